import os

from absl.testing import absltest

from common import jsonl


class JsonlTest(absltest.TestCase):

    def file(self, data):
        path = os.path.join(self.create_tempdir().full_path, "metrics.jsonl")
        with open(path, "wb") as f:
            f.write(data)
        return path

    def test_a_torn_last_line_is_dropped_with_a_warning(self):
        path = self.file(b'{"step": 1}\n{"step": 2}\n{"step": 3, "lo')
        with self.assertLogs("common.jsonl", "WARNING") as logs:
            records, torn = jsonl.read(path)
        self.assertEqual((records, torn), ([{"step": 1}, {"step": 2}], True))
        self.assertIn(path, logs.output[0])
        self.assertIn("torn last line", logs.output[0])

    def test_whole_files_and_a_lost_newline_read_whole(self):
        self.assertEqual(jsonl.read(self.file(b'{"a": 1}\n\n{"a": 2}\n')),
                         ([{"a": 1}, {"a": 2}], False))
        self.assertEqual(jsonl.read(self.file(b'{"a": 1}\n{"a": 2}')),
                         ([{"a": 1}, {"a": 2}], False))
        self.assertEqual(jsonl.read(self.file(b"")), ([], False))
        # A prefix of an object that parses as something else is still torn.
        self.assertEqual(jsonl.read(self.file(b'{"a": 1}\n12')), ([{"a": 1}], True))

    def test_a_broken_line_before_the_last_names_file_and_line(self):
        path = self.file(b'{"a": 1}\n{"a": \n{"a": 3}\n')
        with self.assertRaisesRegex(jsonl.JsonlError, rf"^{path}:2: not a JSON line"):
            jsonl.read(path)

    def test_repair_before_appending(self):
        path = self.file(b'{"a": 1}\n{"a": 2, "b')
        with self.assertLogs("common.jsonl", "WARNING"):
            self.assertEqual(jsonl.repair(path), len(b'{"a": 2, "b'))
        with open(path, "rb") as f:
            self.assertEqual(f.read(), b'{"a": 1}\n')
        self.assertEqual(jsonl.repair(path), 0)  # nothing left to cut
        lost_newline = self.file(b'{"a": 1}')
        self.assertEqual(jsonl.repair(lost_newline), 0)
        with open(lost_newline, "rb") as f:
            self.assertEqual(f.read(), b'{"a": 1}\n')
        self.assertEqual(jsonl.repair(os.path.join(self.create_tempdir().full_path, "x")), 0)


if __name__ == "__main__":
    absltest.main()
