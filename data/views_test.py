import numpy as np
from absl.testing import absltest

from data import packing
from data import pipeline
from data import sources
from data import testing
from data import tokenizer as tokenizer_lib
from data import views

BATCH = 4


class ViewsTest(absltest.TestCase):

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        tokenizer = tokenizer_lib.build_tokenizer()
        cls.prepared = {}
        for packed in (False, True):
            config = pipeline.default_config()
            config.source = sources.SAMPLE
            config.max_rows = 0
            config.max_seq_len = 384
            config.packing = packed
            cls.prepared[packed] = pipeline.prepare(config, tokenizer).sequences

    def _assert_views_agree(self, sequences):
        grain_batches = list(views.grain_batches(sequences, BATCH))
        dataset = views.hf_dataset(sequences)
        self.assertLen(grain_batches, len(dataset) // BATCH)
        for step, batch in enumerate(grain_batches):
            rows = [dataset[i] for i in range(step * BATCH, (step + 1) * BATCH)]
            for grain_name, hf_name in (("input_ids", "input_ids"),
                                        ("loss_mask", "completion_mask"),
                                        ("segment_ids", "segment_ids"),
                                        ("positions", "position_ids")):
                np.testing.assert_array_equal(
                    batch[grain_name], np.asarray([r[hf_name] for r in rows]))
            hf = views.collate(rows)
            np.testing.assert_array_equal(batch["input_ids"], hf["input_ids"].numpy())
            np.testing.assert_array_equal(batch["positions"], hf["position_ids"].numpy())
            self.assertNotIn("attention_mask", hf)
            # transformers starts a segment wherever a position is not the last one + 1
            # (a row's first token opens its first): the segments' starts, and every
            # padding token.
            positions = hf["position_ids"].numpy()
            starts = np.diff(positions, prepend=positions[:, :1] - 1) != 1
            segments = batch["segment_ids"]
            expected = (np.diff(segments, prepend=0) != 0) | (segments == 0)
            expected[:, 0] = False
            np.testing.assert_array_equal(starts, expected)
            labels = hf["labels"].numpy()
            trained = batch["loss_mask"] == 1
            np.testing.assert_array_equal(labels[trained], batch["input_ids"][trained])
            self.assertTrue((labels[~trained] == views.IGNORE_INDEX).all())

    def test_grain_and_hf_views_yield_identical_batches(self):
        for packed, sequences in self.prepared.items():
            with self.subTest(packed=packed):
                self._assert_views_agree(sequences)

    def test_each_format_gives_both_stacks_the_same_tokens_and_masks(self):
        tokenizer = tokenizer_lib.build_tokenizer()
        sets = testing.write_user_data(self.create_tempdir().full_path)
        # Alpaca, ShareGPT, OpenAI's chat, compressed, CSV/TSV, ...: one of each.
        for name, (path, _) in testing.write_shaped_data(self.create_tempdir().full_path).items():
            sets[name] = {"source": path,
                          "encoding": "latin-1" if name == "latin1.jsonl" else "utf-8"}
        for name, overrides in sets.items():
            for packed in (False, True):
                with self.subTest(name, packed=packed):
                    config = pipeline.default_config()
                    config.update(overrides, max_seq_len=256, packing=packed, epochs=4)
                    prepared = pipeline.prepare(config, tokenizer)
                    self.assertEqual(int(prepared.sequences["loss_mask"].sum()),
                                     4 * prepared.report.trained_tokens)
                    self._assert_views_agree(prepared.sequences)

    def test_process_slices_concatenate_to_the_global_batch(self):
        sequences = self.prepared[True]
        whole = list(views.grain_batches(sequences, BATCH))
        parts = [list(views.grain_batches(sequences, BATCH, p, 2)) for p in range(2)]
        for step, batch in enumerate(whole):
            for name in packing.FIELDS:
                np.testing.assert_array_equal(
                    batch[name], np.concatenate([parts[0][step][name], parts[1][step][name]]))

    def test_iterator_state_restores_the_position(self):
        dataset = views.grain_batches(self.prepared[False], BATCH).to_iter_dataset()
        iterator = iter(dataset)
        next(iterator)
        state = iterator.get_state()
        expected = [next(iterator)["input_ids"] for _ in range(2)]
        restored = iter(dataset)
        restored.set_state(state)
        for want in expected:
            np.testing.assert_array_equal(next(restored)["input_ids"], want)

    def test_indivisible_process_split(self):
        with self.assertRaisesRegex(ValueError, "does not split over 3 processes"):
            views.grain_batches(self.prepared[False], BATCH, 0, 3)


if __name__ == "__main__":
    absltest.main()
