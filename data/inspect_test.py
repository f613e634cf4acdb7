import json
import os
import subprocess

from absl.testing import absltest

from common import binaries
from data import testing


def _run(*args):
    env = binaries.child_env()
    return subprocess.run(binaries.command("//data:inspect", *args), env=env,
                          capture_output=True, text=True)


class InspectTest(absltest.TestCase):

    def test_sample_with_json(self):
        out = os.path.join(self.create_tempdir().full_path, "figures.json")
        result = _run("--data.source=sample", "--data.max_seq_len=1024", f"--output_json={out}")
        self.assertEqual(result.returncode, 0, result.stderr)
        with open(out) as f:
            figures = json.load(f)
        self.assertGreaterEqual(figures["rows_read"], 32)
        self.assertEqual(figures["kept"] + sum(figures["dropped"].values()), figures["rows_read"])
        self.assertGreater(figures["trained_fraction"], 0)
        self.assertLessEqual(figures["token_length"]["p50"], figures["token_length"]["max"])
        fractions = figures["non_padding_fraction"]
        self.assertGreater(fractions["packing"], fractions["padding"])
        self.assertIn("rows read", result.stdout)
        self.assertIn("non-padding", result.stdout)

    def test_drops_are_reported_by_reason_and_row(self):
        source = testing.write_jsonl(self.create_tempdir().full_path, [
            testing.record(), "{broken", testing.record(response="")])
        out = os.path.join(self.create_tempdir().full_path, "figures.json")
        result = _run(f"--data.source={source}", f"--output_json={out}")
        self.assertEqual(result.returncode, 0, result.stderr)
        with open(out) as f:
            figures = json.load(f)
        self.assertEqual((figures["rows_read"], figures["kept"]), (3, 1))
        self.assertEqual(figures["dropped"], {"invalid_json": 1, "empty": 1})
        self.assertEqual(figures["dropped_rows"], {"invalid_json": [2], "empty": [3]})
        self.assertRegex(result.stdout, r"invalid_json\s+1\s+\(rows 2\)")
        self.assertIn("e.g. row 2: expected a JSON object, found", result.stdout)
        self.assertEqual(figures["dropped_why"]["empty"],
                         "row 3: response: expected text, found an empty text")

    def test_files_as_people_have_them_with_the_source_alone(self):
        shaped = testing.write_shaped_data(self.create_tempdir().full_path)
        for name, (path, rows) in shaped.items():
            with self.subTest(name):
                out = os.path.join(self.create_tempdir().full_path, "figures.json")
                extra = ("--data.encoding=latin-1",) if name == "latin1.jsonl" else ()
                result = _run(f"--data.source={path}", *extra, f"--output_json={out}")
                self.assertEqual(result.returncode, 0, result.stderr[-3000:])
                with open(out) as f:
                    figures = json.load(f)
                self.assertEqual((figures["rows_read"], figures["kept"], figures["dropped"]),
                                 (rows, rows, {}))

    def test_fails_loudly_when_nothing_is_trained(self):
        source = testing.write_jsonl(self.create_tempdir().full_path, ["{broken", "[]"])
        result = _run(f"--data.source={source}")
        self.assertNotEqual(result.returncode, 0)
        self.assertIn("no token would be trained", result.stderr)

    def test_missing_file_is_one_clear_error(self):
        result = _run("--data.source=/no/such/rows.jsonl")
        self.assertNotEqual(result.returncode, 0)
        self.assertIn("neither a file", result.stderr)


if __name__ == "__main__":
    absltest.main()
