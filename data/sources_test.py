"""Sources as they sit on disk: folders of shards, globs, the Hub's split layout,
in a bucket and on the Hub, read whole and numbered as one data set."""

import gzip
import json
import os
from unittest import mock

from absl.testing import absltest

from common import gcs_emulator
from common import storage
from data import sources
from data import testing


def _rows(source, **kwargs):
    records = sources.read(source, **kwargs)
    return [item if isinstance(item, sources.Skip) else (item.number, item.fields)
            for item in records], records


def _write(directory, name, rows, compress=False):
    path = os.path.join(directory, name)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    data = "".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows).encode()
    with open(path, "wb") as f:
        f.write(gzip.compress(data) if compress else data)
    return path


class FoldersAndGlobsTest(absltest.TestCase):

    def test_shards_read_in_name_order_numbered_on_with_skips_naming_their_file(self):
        folder = self.create_tempdir().full_path
        _write(folder, "train-00001-of-00002.jsonl", [{"i": 3}, "{broken", {"i": 4}])
        _write(folder, "train-00000-of-00002.jsonl", [{"i": 1}, {"i": 2}])
        _write(folder, "README.md", ["# not rows"])
        items, records = _rows(folder)
        self.assertEqual(items[:3] + items[4:], [(1, {"i": 1}), (2, {"i": 2}),
                                                 (3, {"i": 3}), (5, {"i": 4})])
        skip = items[3]
        self.assertEqual((skip.number, skip.reason), (4, sources.INVALID_JSON))
        self.assertTrue(skip.detail.startswith("train-00001-of-00002.jsonl row 2: "), skip.detail)
        self.assertEqual(records.total, 5)

    def test_max_rows_counts_what_it_leaves_in_later_shards(self):
        folder = self.create_tempdir().full_path
        for i in range(3):
            _write(folder, f"part-{i}.jsonl", [{"i": 2 * i}, {"i": 2 * i + 1}])
        items, records = _rows(folder, max_rows=3)
        self.assertEqual([number for number, _ in items], [1, 2, 3])
        self.assertEqual((records.not_read, records.total), (3, 6))

    def test_split_names_pick_the_files(self):
        folder = self.create_tempdir().full_path
        _write(folder, "data/train-00000-of-00001.jsonl.gz", [{"s": "train"}], compress=True)
        _write(folder, "data/test-00000-of-00001.jsonl", [{"s": "test"}])
        _write(folder, "validation/part-0.jsonl", [{"s": "validation"}])
        _write(folder, ".cache/train-stale.jsonl", [{"s": "hidden"}])
        for split, want in (("train", "train"), ("test", "test"), ("validation", "validation"),
                            ("val", "validation")):
            items, _ = _rows(folder, split=split)
            self.assertEqual([fields["s"] for _, fields in items], [want], split)
        with self.assertRaisesRegex(sources.DataError,
                                    "no file of split 'dev2'; its files name the splits "
                                    r"test, train, validation \(set data.split\)"):
            _rows(folder, split="dev2")

    def test_unnamed_files_are_the_train_split(self):
        folder = self.create_tempdir().full_path
        _write(folder, "chats-0.jsonl", [{"s": "a"}])
        _write(folder, "chats-1.jsonl", [{"s": "b"}])
        _write(folder, "test.jsonl", [{"s": "held out"}])
        self.assertEqual([f["s"] for _, f in _rows(folder)[0]], ["a", "b"])
        self.assertEqual([f["s"] for _, f in _rows(folder, split="test")[0]], ["held out"])
        plain = self.create_tempdir().full_path
        _write(plain, "rows.jsonl", [{"s": "a"}])
        with self.assertRaisesRegex(sources.DataError, "no file names a split, so its 1 files "
                                                       "are the train split; there is no split "
                                                       "'test'"):
            _rows(plain, split="test")

    def test_a_folder_without_data_and_a_glob_without_match_are_one_error(self):
        folder = self.create_tempdir().full_path
        _write(folder, "notes.txt", ["hello"])
        with self.assertRaisesRegex(sources.DataError, "no data file in it .* found notes.txt"):
            _rows(folder)
        with self.assertRaisesRegex(sources.DataError, "matches no file"):
            _rows(os.path.join(folder, "*.jsonl"))
        with self.assertRaisesRegex(sources.DataError, r"unknown file type \.txt"):
            _rows(os.path.join(folder, "*.txt"))  # named outright: refused, not passed over

    def test_a_recursive_glob(self):
        folder = self.create_tempdir().full_path
        _write(folder, "a/x/train-0.jsonl", [{"i": 1}])
        _write(folder, "b/train-1.jsonl", [{"i": 2}])
        _write(folder, "b/test-0.jsonl", [{"i": 3}])
        items, _ = _rows(os.path.join(folder, "**", "train-*.jsonl"))
        self.assertEqual([f["i"] for _, f in items], [1, 2])

    def test_glob_segments_match_as_glob_does(self):
        self.assertTrue(sources._matches("data/train-*.parquet", "data/train-00000.parquet"))
        self.assertFalse(sources._matches("data/*.parquet", "data/sub/x.parquet"))
        self.assertTrue(sources._matches("**/x.parquet", "x.parquet"))
        self.assertTrue(sources._matches("**/x.parquet", "a/b/x.parquet"))
        self.assertFalse(sources._matches("train-?.jsonl", "train-10.jsonl"))


class RemoteTest(absltest.TestCase):

    def setUp(self):
        super().setUp()
        os.environ[storage.CACHE_ENV] = self.create_tempdir().full_path

    def test_a_bucket_folder_and_glob(self):
        with gcs_emulator.running("bkt"):
            for name, rows in (("data/train-00000-of-00002.jsonl", [{"i": 1}]),
                               ("data/train-00001-of-00002.jsonl", [{"i": 2}]),
                               ("data/test-00000-of-00001.jsonl", [{"i": 3}]),
                               ("README.md", ["# card"])):
                storage.write_bytes(f"gs://bkt/set/{name}",
                                    "".join(json.dumps(r) + "\n" for r in rows).encode())
            folder = [f["i"] for _, f in _rows("gs://bkt/set/")[0]]
            test = [f["i"] for _, f in _rows("gs://bkt/set", split="test")[0]]
            globbed = [f["i"] for _, f in _rows("gs://bkt/set/data/*-0000?-of-*.jsonl")[0]]
            with self.assertRaisesRegex(sources.DataError, "matches no object"):
                _rows("gs://bkt/set/data/*.parquet")
        self.assertEqual((folder, test, globbed), ([1, 2], [3], [3, 1, 2]))  # in name order

    def test_a_hub_glob_and_folder_download_only_their_files(self):
        local = self.create_tempdir().full_path
        repo = {"README.md": ["# card"],
                "data/train-00000-of-00002.jsonl": [{"i": 1}],
                "data/train-00001-of-00002.jsonl": [{"i": 2}],
                "data/test-00000-of-00001.jsonl": [{"i": 3}]}
        downloaded = []

        def download(repo_id, filename):
            self.assertEqual(repo_id, "someone/chats")
            downloaded.append(filename)
            return _write(local, filename, repo[filename])

        with mock.patch.object(sources, "_hub_repo_files", lambda repo_id: sorted(repo)), \
                mock.patch.object(sources, "_hub_download", download):
            globbed = _rows("hf://datasets/someone/chats/data/train-*.jsonl")[0]
            self.assertEqual(downloaded, ["data/train-00000-of-00002.jsonl",
                                          "data/train-00001-of-00002.jsonl"])
            folder = _rows("hf://datasets/someone/chats/data", split="test")[0]
            with self.assertRaisesRegex(sources.DataError, "matches no file of someone/chats"):
                _rows("hf://datasets/someone/chats/data/*.parquet")
            with self.assertRaisesRegex(sources.DataError, "someone/chats has no file or "
                                                           "folder other"):
                _rows("hf://datasets/someone/chats/other")
        self.assertEqual([f["i"] for _, f in globbed], [1, 2])
        self.assertEqual([f["i"] for _, f in folder], [3])


class ShapedDataTest(absltest.TestCase):

    def test_every_shape_reads_every_row(self):
        for name, (path, rows) in testing.write_shaped_data(
                self.create_tempdir().full_path).items():
            with self.subTest(name):
                encoding = "latin-1" if name == "latin1.jsonl" else "utf-8"
                items, _ = _rows(path, encoding=encoding)
                self.assertLen(items, rows)
                self.assertFalse([i for i in items if isinstance(i, sources.Skip)])


if __name__ == "__main__":
    absltest.main()
