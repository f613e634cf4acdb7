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


class HostileShapesTest(absltest.TestCase):
    """What an outside attack on the folders and globs found, each case kept."""

    def test_a_path_that_exists_is_read_as_it_is_even_with_glob_characters(self):
        folder = self.create_tempdir().full_path
        _write(folder, "a[1].jsonl", [{"i": "bracketed"}])
        _write(folder, "a1.jsonl", [{"i": "other"}])
        _write(folder, "run[2]/part-0.jsonl", [{"i": "in a bracketed folder"}])
        self.assertEqual([f["i"] for _, f in _rows(os.path.join(folder, "a[1].jsonl"))[0]],
                         ["bracketed"])
        self.assertEqual([f["i"] for _, f in _rows(os.path.join(folder, "run[2]"))[0]],
                         ["in a bracketed folder"])

    def test_a_damaged_compressed_shard_is_one_error_naming_it(self):
        folder = self.create_tempdir().full_path
        _write(folder, "a.jsonl", [{"i": 1}])
        with open(os.path.join(folder, "b.jsonl.gz"), "wb") as f:
            data = gzip.compress("".join(json.dumps({"i": i, "r": os.urandom(8).hex()}) + "\n"
                                         for i in range(200)).encode())
            f.write(data[:len(data) // 2])  # truncated
        with self.assertRaisesRegex(sources.DataError, r"b\.jsonl\.gz: cannot read it"):
            _rows(folder)

    def test_files_left_aside_are_listed_with_why(self):
        folder = self.create_tempdir().full_path
        _write(folder, "train.jsonl", [{"i": 1}])
        _write(folder, "extra-0.jsonl", [{"i": 2}])
        _write(folder, "_scratch.jsonl", [{"i": 3}])
        _write(folder, "notes.txt", ["x"])
        _, records = _rows(folder)
        self.assertEqual([os.path.basename(p) for p in records.files], ["train.jsonl"])
        self.assertEqual({os.path.basename(p): why for p, why in records.left_aside.items()},
                         {"extra-0.jsonl": "split none", "_scratch.jsonl": "hidden",
                          "notes.txt": "not a data file"})

    def test_a_glob_and_a_single_file_honour_the_split(self):
        folder = self.create_tempdir().full_path
        train = _write(folder, "train.jsonl", [{"s": "train"}])
        _write(folder, "test.jsonl", [{"s": "test"}])
        pattern = os.path.join(folder, "*.jsonl")
        self.assertEqual([f["s"] for _, f in _rows(pattern)[0]], ["train"])
        self.assertEqual([f["s"] for _, f in _rows(pattern, split="test")[0]], ["test"])
        with self.assertRaisesRegex(sources.DataError, "is one file, one train split: there "
                                                       "is no split 'test'"):
            _rows(train, split="test")  # never the training rows as a validation set
        # A folder above the glob named like a split says nothing of the files.
        deep = self.create_tempdir().full_path
        _write(deep, "testing/chats-0.jsonl", [{"s": "a"}])
        self.assertLen(_rows(os.path.join(deep, "testing", "*.jsonl"))[0], 1)

    def test_linked_folders_are_read_once_and_never_loop(self):
        folder = self.create_tempdir().full_path
        _write(folder, "part-0.jsonl", [{"i": 1}])
        other = self.create_tempdir().full_path
        _write(other, "part-1.jsonl", [{"i": 2}])
        os.symlink(folder, os.path.join(folder, "loop"))
        os.symlink(other, os.path.join(folder, "more"))
        self.assertEqual(sorted(f["i"] for _, f in _rows(folder)[0]), [1, 2])
        self.assertEqual(sorted(f["i"] for _, f in _rows(os.path.join(folder, "**",
                                                                      "*.jsonl"))[0]), [1, 2])

    def test_one_bad_row_does_not_stop_the_run(self):
        folder = self.create_tempdir().full_path
        big = "x" * 300_000  # past csv's default 128 KiB cell limit
        with open(os.path.join(folder, "rows.csv"), "w") as f:
            f.write(f"prompt,completion\nq,{big}\nq2,a,extra cell\nq3,a3\n")
        items, _ = _rows(os.path.join(folder, "rows.csv"))
        self.assertEqual(items[0][1]["completion"], big)
        self.assertEqual((items[1].number, items[1].reason), (2, sources.MALFORMED))
        self.assertEqual(items[2], (3, {"prompt": "q3", "completion": "a3"}))

    def test_the_cap_reads_no_row_past_it_and_counts_utf16_rows(self):
        folder = self.create_tempdir().full_path
        _write(folder, "a.jsonl", [{"i": 1}, {"i": 2}])
        with open(os.path.join(folder, "b.jsonl"), "wb") as f:
            f.write(b'{"i": "\xff"}\n')  # not UTF-8: past the cap, never read
        items, records = _rows(folder, max_rows=2)
        self.assertEqual((len(items), records.not_read), (2, 1))
        wide = os.path.join(folder, "wide.jsonl")
        with open(wide, "w", encoding="utf-16") as f:
            f.write("".join(json.dumps({"i": i}) + "\n" for i in range(5)))
        _, records = _rows(wide, max_rows=2, encoding="utf-16")
        self.assertEqual(records.not_read, 3)

    def test_misnamed_sources_get_the_right_error(self):
        with self.assertRaisesRegex(sources.DataError, "a Hub data set source is hf://datasets/"):
            _rows("hf://someone/chats/train.jsonl")
        with self.assertRaisesRegex(sources.DataError, "neither a file, folder or glob"):
            _rows("typo/nothere.jsonl")  # a missing file, not a Hub data set id


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
            globbed_test = [f["i"] for _, f in _rows("gs://bkt/set/data/*.jsonl",
                                                     split="test")[0]]
            with self.assertRaisesRegex(sources.DataError, "matches no object"):
                _rows("gs://bkt/set/data/*.parquet")
        self.assertEqual((folder, test, globbed, globbed_test), ([1, 2], [3], [1, 2], [3]))

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
            root = _rows("hf://datasets/someone/chats")[0]  # the whole repository: train
            with self.assertRaisesRegex(sources.DataError, "matches no file of someone/chats"):
                _rows("hf://datasets/someone/chats/data/*.parquet")
            with self.assertRaisesRegex(sources.DataError, "someone/chats has no file or "
                                                           "folder other"):
                _rows("hf://datasets/someone/chats/other")
        self.assertEqual([f["i"] for _, f in globbed], [1, 2])
        self.assertEqual([f["i"] for _, f in folder], [3])
        self.assertEqual([f["i"] for _, f in root], [1, 2])


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
