import json
import os

from absl.testing import absltest

from eval import completions


class CompletionsTest(absltest.TestCase):

    def _write(self, text):
        path = os.path.join(self.create_tempdir().full_path, "c.jsonl")
        with open(path, "w") as f:
            f.write(text)
        return path

    def test_sample_indexes_assigned_in_order(self):
        path = self._write("\n".join(json.dumps(r) for r in [
            {"problem": "A", "completion": "a0"}, {"problem": "B", "completion": "b0"},
            {"problem": "A", "completion": "a1"}, {"problem": "B", "completion": "b1",
                                                   "sample": 7}]) + "\n\n")
        rows = completions.read(path)
        self.assertEqual([(r.problem, r.sample, r.completion) for r in rows],
                         [("A", 0, "a0"), ("B", 0, "b0"), ("A", 1, "a1"), ("B", 7, "b1")])
        self.assertEqual(completions.counts(rows), {"A": 2, "B": 2})

    def test_bad_lines_are_named(self):
        for text, why in [('{"problem": "A"}\n', "completion"), ("{oops\n", "line"),
                          ('{"problem": 1, "completion": "x"}\n', "strings")]:
            with self.subTest(text=text), self.assertRaisesRegex(completions.CompletionsError, ":1: .*" + why):
                completions.read(self._write(text))

    def test_duplicate_sample_is_an_error(self):
        path = self._write('{"problem": "A", "completion": "x", "sample": 0}\n'
                           '{"problem": "A", "completion": "y", "sample": 0}\n')
        with self.assertRaisesRegex(completions.CompletionsError, "appears twice"):
            completions.read(path)

    def test_append_and_round_trip(self):
        path = os.path.join(self.create_tempdir().full_path, "s.jsonl")
        rows = [completions.Completion("A", 0, "x\n[BEGIN]é", "stop"),
                completions.Completion("A", 1, "", "length")]
        completions.append(path, rows)
        completions.append(path, [completions.Completion("B", 0, "z")])
        self.assertEqual(completions.read(path), rows + [completions.Completion("B", 0, "z")])

    def test_a_torn_last_line_is_dropped_a_broken_one_before_it_is_not(self):
        path = self._write('{"problem": "A", "completion": "x"}\n{"problem": "A", "compl')
        with self.assertLogs("common.jsonl", "WARNING") as logs:
            self.assertEqual(completions.read(path), [completions.Completion("A", 0, "x")])
        self.assertIn(path, logs.output[0])
        path = self._write('{"problem": "A", "completion": "x"}\n{"problem": "A", "compl\n'
                           '{"problem": "A", "completion": "y"}\n')
        with self.assertRaisesRegex(completions.CompletionsError, f"^{path}:2: not a JSON line"):
            completions.read(path)


if __name__ == "__main__":
    absltest.main()
