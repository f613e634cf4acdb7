import os

import pyarrow as pa
import pyarrow.parquet as pq
from absl.testing import absltest

from common import gcs_emulator
from common import storage
from data import codev
from data import sources
from data import testing


class ReadRowsTest(absltest.TestCase):

    def test_malformed_rows_are_skipped_with_reason_and_row_number(self):
        lines = [
            testing.record(),                                   # 1 ok
            "{not json",                                        # 2
            {"system": "", "prompt": "p"},                      # 3 no response
            testing.record(prompt=7),                           # 4
            testing.record(response="   "),                     # 5
            "[1, 2]",                                           # 6 not an object
            testing.record(system=None),                        # 7 ok: system is optional
            testing.record(),                                   # 8 ok
        ]
        path = testing.write_jsonl(self.create_tempdir().full_path, lines)
        items = list(codev.read_rows(path))
        self.assertLen(items, 8)
        self.assertEqual([i.number for i in items if isinstance(i, codev.Row)], [1, 7, 8])
        skips = {i.number: (i.reason, i.detail) for i in items if isinstance(i, sources.Skip)}
        self.assertEqual(skips[2][0], sources.INVALID_JSON)
        self.assertEqual(skips[3], (sources.MISSING_FIELD,
                                    "expected a value for `response`, found none"))
        self.assertEqual(skips[4], (sources.NOT_A_STRING, "prompt: expected text, found int 7"))
        self.assertEqual(skips[5], (sources.EMPTY, "response: expected text, found an empty text"))
        self.assertEqual(skips[6][0], sources.INVALID_JSON)
        self.assertEqual(items[6].system, "")

    def test_first_n_rows(self):
        path = testing.write_jsonl(self.create_tempdir().full_path, [testing.record()] * 10)
        self.assertLen(list(codev.read_rows(path, max_rows=4)), 4)

    def test_parquet(self):
        directory = self.create_tempdir().full_path
        rows = [testing.record(), testing.record(response="")]
        path = os.path.join(directory, "rows.parquet")
        pq.write_table(pa.Table.from_pylist(rows), path)
        items = list(codev.read_rows(path))
        self.assertIsInstance(items[0], codev.Row)
        self.assertEqual((items[1].number, items[1].reason), (2, sources.EMPTY))

    def test_a_source_in_a_bucket(self):
        path = testing.write_jsonl(self.create_tempdir().full_path,
                                   [testing.record(), testing.record(prompt="second")])
        with open(path, "rb") as f:
            data = f.read()
        os.environ[storage.CACHE_ENV] = self.create_tempdir().full_path
        with gcs_emulator.running("bkt"):
            storage.write_bytes("gs://bkt/data/rows.jsonl", data)
            items = list(codev.read_rows("gs://bkt/data/rows.jsonl"))
            with self.assertRaisesRegex(storage.StorageError, "gs://bkt/data/none.jsonl does "
                                                              "not exist"):
                list(codev.read_rows("gs://bkt/data/none.jsonl"))
        self.assertEqual([item.prompt for item in items][1], "second")

    def test_unreadable_source(self):
        with self.assertRaisesRegex(sources.DataError, "neither a file"):
            list(codev.read_rows("/no/such/file.jsonl"))
        corrupt = os.path.join(self.create_tempdir().full_path, "bad.parquet")
        with open(corrupt, "wb") as f:
            f.write(b"not parquet at all")
        with self.assertRaisesRegex(sources.DataError, "bad.parquet"):
            list(codev.read_rows(corrupt))

    def test_sample_is_readable(self):
        items = list(codev.read_rows(sources.SAMPLE))
        self.assertGreaterEqual(len(items), 32)
        self.assertTrue(all(isinstance(i, codev.Row) for i in items))


class ResponseTest(absltest.TestCase):

    def test_split(self):
        reasoning, answer = codev.split_response(testing.GOOD_RESPONSE)
        self.assertEqual(reasoning, "An inverter is one assign.")
        self.assertTrue(answer.startswith("Here it is."))
        self.assertTrue(answer.endswith("```"))
        self.assertNotIn("<answer>", answer)

    def test_no_think_block(self):
        self.assertEqual(codev.split_response(testing.CODE), ("", testing.CODE))

    def test_malformed(self):
        cases = {
            "<think>never closed " + testing.CODE: sources.UNCLOSED_THINK,
            "<think>x</think>\n<answer>  </answer>": sources.EMPTY,
            "<think>x</think>\n<answer>Just prose, no design.</answer>": sources.NO_CODE,
        }
        for response, reason in cases.items():
            with self.assertRaises(sources.SkipRow) as raised:
                codev.split_response(response)
            self.assertEqual(raised.exception.reason, reason)

    def test_policies(self):
        row = codev.Row(1, "Be terse.", "Write inv.", testing.GOOD_RESPONSE)
        stripped = codev.to_messages(row)
        self.assertEqual([m["role"] for m in stripped], ["user", "assistant"])
        self.assertNotIn("inverter is one assign", stripped[-1]["content"])
        kept = codev.to_messages(row, "keep_thinking", "keep")
        self.assertEqual([m["role"] for m in kept], ["system", "user", "assistant"])
        self.assertTrue(kept[-1]["content"].startswith(
            "<|channel>thought\nAn inverter is one assign.<channel|>Here it is."))
        with self.assertRaisesRegex(sources.DataError, "unknown response policy"):
            codev.to_messages(row, "keep_everything")


if __name__ == "__main__":
    absltest.main()
