import numpy as np
from absl.testing import absltest

from data import pipeline
from data import sources
from data import testing
from data import tokenizer as tokenizer_lib


def _config(source, **overrides):
    return testing.data_config(source=source, **overrides)


class PipelineTest(absltest.TestCase):

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.tokenizer = tokenizer_lib.build_tokenizer()

    def _source(self, lines):
        return testing.write_jsonl(self.create_tempdir().full_path, lines)

    def test_rows_are_kept_or_dropped_by_reason(self):
        long_prompt = "Describe every gate. " * 400
        source = self._source([
            testing.record(),
            "{broken",
            testing.record(response="<think>unclosed " + testing.CODE),
            testing.record(response="<think>x</think><answer>no design here</answer>"),
            testing.record(prompt=long_prompt),
            testing.record(response=""),
            testing.record(),
            testing.record(prompt="Draw it like <|image|> shows."),
        ])
        examples, report = pipeline.encode(_config(source), self.tokenizer)
        self.assertEqual(report.rows_read, 8)
        self.assertEqual(report.kept, 2)
        self.assertLen(examples, 2)
        self.assertEqual(dict(report.dropped), {
            sources.INVALID_JSON: 1, sources.UNCLOSED_THINK: 1, sources.NO_CODE: 1,
            sources.TOO_LONG: 1, sources.EMPTY: 1, sources.MEDIA_TOKEN: 1})
        self.assertEqual(report.dropped_rows[sources.MEDIA_TOKEN], [8])
        self.assertEqual(report.dropped_rows[sources.TOO_LONG], [5])
        self.assertEqual(report.trained_tokens, sum(int(e.loss_mask.sum()) for e in examples))
        self.assertEqual(report.total_tokens, sum(len(e) for e in examples))

    def test_truncate_keeps_long_rows_cut_to_length(self):
        source = self._source([testing.record(response=(
            "<think>t</think><answer>" + testing.CODE + "\n// filler" * 600 + "</answer>"))])
        config = _config(source, long_rows="truncate", max_seq_len=64)
        examples, report = pipeline.encode(config, self.tokenizer)
        self.assertEqual(report.kept, 1)
        self.assertLen(examples[0], 64)
        self.assertTrue(examples[0].loss_mask.any())

    def test_truncation_that_leaves_nothing_to_train_drops_the_row(self):
        source = self._source([testing.record(prompt="Explain. " * 300)])
        config = _config(source, long_rows="truncate", max_seq_len=64)
        _, report = pipeline.encode(config, self.tokenizer)
        self.assertEqual(dict(report.dropped), {sources.TOO_LONG: 1})

    def test_no_trained_token_fails_loudly(self):
        source = self._source(["{broken"] * 3)
        with self.assertRaisesRegex(sources.DataError, "no token to train on: 3 rows read"):
            pipeline.prepare(_config(source), self.tokenizer)

    def test_prepare_sample(self):
        for packing in (False, True):
            prepared = pipeline.prepare(
                _config(sources.SAMPLE, packing=packing), self.tokenizer)
            sequences = prepared.sequences
            self.assertEqual(sequences["input_ids"].shape[1], 512)
            self.assertEqual(int(sequences["loss_mask"].sum()), prepared.report.trained_tokens)
            self.assertEqual(int((sequences["segment_ids"] > 0).sum()),
                             prepared.report.total_tokens)

    def test_validation_set_held_out_by_fraction(self):
        config = _config(sources.SAMPLE, eval_fraction=0.25)
        prepared = pipeline.prepare(config, self.tokenizer)
        whole = pipeline.prepare(_config(sources.SAMPLE), self.tokenizer)
        held = prepared.eval_report.kept
        self.assertEqual(held, round(0.25 * whole.report.kept))
        self.assertLen(prepared.sequences["input_ids"], whole.report.kept - held)
        self.assertLen(prepared.eval_sequences["input_ids"], held)  # padded: one row each
        # No held-out row is trained on, and the split is the same every time.
        trained = {tuple(r) for r in prepared.sequences["input_ids"].tolist()}
        self.assertFalse(trained & {tuple(r) for r in prepared.eval_sequences["input_ids"].tolist()})
        again = pipeline.prepare(config, self.tokenizer)
        np.testing.assert_array_equal(again.eval_sequences["input_ids"],
                                      prepared.eval_sequences["input_ids"])

    def test_validation_set_from_a_split_or_another_source(self):
        sets = testing.write_user_data(self.create_tempdir().full_path)
        folder = sets["datasets_folder"]["source"]
        prepared = pipeline.prepare(_config(folder, eval_split="test"), self.tokenizer)
        self.assertEqual((prepared.report.kept, prepared.eval_report.kept), (2, 1))
        other = sets["messages_jsonl"]["source"]
        prepared = pipeline.prepare(_config(folder, eval_source=other), self.tokenizer)
        self.assertEqual(prepared.eval_report.kept, len(testing.CHATS))
        self.assertIsNone(pipeline.prepare(_config(folder), self.tokenizer).eval_sequences)

    def test_validation_settings_that_cannot_work(self):
        with self.assertRaisesRegex(sources.DataError, "not both"):
            pipeline.prepare(_config(sources.SAMPLE, eval_fraction=0.1, eval_split="test"),
                             self.tokenizer)
        with self.assertRaisesRegex(sources.DataError, "leaves nothing to train on"):
            pipeline.prepare(_config(sources.SAMPLE, eval_fraction=0.999), self.tokenizer)
        with self.assertRaisesRegex(sources.DataError, r"must be in \(0, 1\)"):
            pipeline.prepare(_config(sources.SAMPLE, eval_fraction=1.5), self.tokenizer)

    def test_shuffle_is_seeded(self):
        items = list(range(50))
        self.assertEqual(pipeline.shuffled(items, 42), pipeline.shuffled(items, 42))
        self.assertNotEqual(pipeline.shuffled(items, 42), pipeline.shuffled(items, 43))
        self.assertCountEqual(pipeline.shuffled(items, 42), items)
        two = pipeline.shuffled(items, 42, epochs=2)
        self.assertCountEqual(two[:50], items)
        self.assertNotEqual(two[:50], two[50:])

    def test_percentiles(self):
        figures = pipeline.length_percentiles(list(range(1, 101)))
        self.assertEqual(figures, {"p50": 50, "p99": 99, "max": 100})


if __name__ == "__main__":
    absltest.main()
