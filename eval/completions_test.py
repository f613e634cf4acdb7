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

    def test_drop_torn_tail(self):
        path = self._write('{"problem": "A", "completion": "x"}\n{"problem": "A", "compl')
        self.assertEqual(completions.drop_torn_tail(path), len('{"problem": "A", "compl'))
        self.assertLen(completions.read(path), 1)
        self.assertEqual(completions.drop_torn_tail(path), 0)


if __name__ == "__main__":
    absltest.main()
