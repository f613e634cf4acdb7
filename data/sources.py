"""Rows of a data set, from wherever a user keeps it.

A source is one of:
  * `sample`: the small CodeV-R1 data set written for this project (data/sample/);
  * `synthetic:N`: N generated CodeV-R1 rows with the real data set's length
    profile (data/synthetic.py), for smoke tests and benchmarks;
  * a local file: JSON Lines (`.jsonl`), JSON (`.json`: an array of objects, or
    JSON Lines), Parquet (`.parquet`), CSV (`.csv`) or TSV (`.tsv`; in both
    every value is a string); the text files also compressed, as
    `NAME.jsonl.gz` (gzip), `.bz2`, `.xz` or `.zst` (zstd); read as UTF-8
    unless `encoding` says otherwise, a byte-order mark at the start of the file
    or of a line ignored, CRLF line ends as LF;
  * a folder of such files (shards: `train-00000-of-00004.jsonl`, ...), read one
    after the other in name order. When file or folder names name splits, as the
    Hub lays data sets out (`SET/data/train-00000-of-00004.parquet`,
    `test.jsonl`, `validation/part-0.jsonl`; aliases `training`, `val`,
    `valid`, `dev`, `testing`, `eval`), `split` picks the files; READMEs,
    hidden files and other types are left aside;
  * a glob over such files (`shards/*.jsonl.gz`, `**/train-*.parquet`);
  * a local folder written by `datasets` (`Dataset.save_to_disk`); a
    `DatasetDict` folder gives its `split`;
  * a gs:// URL of such a file, folder or glob (copied to the local cache first);
  * a file, folder or glob of a Hugging Face Hub data set,
    `hf://datasets/OWNER/NAME/PATH` (`.../data/train-*.parquet`; downloaded
    into the Hugging Face cache, then read as local files);
  * a Hugging Face Hub data set id (`owner/name`), read with `datasets.load_dataset`
    with its `subset` (the Hub's name for a config) and `split`.

A row that cannot be parsed never stops a run: it becomes a `Skip` with its
1-based row number and a reason, and is counted. A source that cannot be read
at all is one `DataError`; so is text that is not in the encoding (UTF-8 unless
`data.encoding` names another), with the row where it was met. `max_rows` reads
the first N rows; the rows it leaves out are counted (`Records.not_read`), never
dropped silently.
"""

import bz2
import codecs
import csv
import dataclasses
import fnmatch
import glob
import gzip
import io
import json
import lzma
import os
import re
import zlib

from common import cli
from common import config_cli
from common import storage
from data import synthetic

SAMPLE = "sample"
SYNTHETIC = "synthetic:"
SAMPLE_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "sample",
                           "codev_r1_sample.jsonl")
HUB_FILE = "hf://datasets/"
FILE_TYPES = (".jsonl", ".json", ".parquet", ".csv", ".tsv")
COMPRESSIONS = (".gz", ".bz2", ".xz", ".zst")  # of the text types: `chats.jsonl.gz`
GLOB_CHARS = "*?["
# A folder's split, named by a folder or at the start of a file name, as the Hub
# lays data sets out (`SET/data/train-00000-of-00004.parquet`), with the usual aliases.
_SPLIT_ALIASES = {"training": "train", "valid": "validation", "val": "validation",
                  "dev": "validation", "testing": "test", "eval": "test"}
_SPLIT_NAME = re.compile(r"(train|training|validation|valid|val|dev|test|testing|eval)"
                         r"(?:[-_.0-9]|$)")
# Files of a folder that describe it, not rows (`datasets`' metadata).
_METADATA = frozenset({"dataset_info.json", "dataset_infos.json", "state.json",
                       "dataset_dict.json"})

# Skip reasons, in the order reports list them.
INVALID_JSON = "invalid_json"
MALFORMED = "malformed"  # a CSV/TSV row with more cells than its header
MISSING_FIELD = "missing_field"
NOT_A_STRING = "not_a_string"
BAD_MESSAGES = "bad_messages"
NOT_TEXT = "not_text"
EMPTY = "empty"
NO_ASSISTANT = "no_assistant"
UNCLOSED_THINK = "unclosed_think"
NO_CODE = "no_code"
# The text holds an image/audio/video placeholder token, which a multimodal model
# replaces by media features (data/chat.py, ChatEncoder.media_ids).
MEDIA_TOKEN = "media_token"
TEMPLATE = "template"
TOO_LONG = "too_long"
SKIP_REASONS = (INVALID_JSON, MALFORMED, MISSING_FIELD, NOT_A_STRING, BAD_MESSAGES, NOT_TEXT,
                EMPTY, NO_ASSISTANT, UNCLOSED_THINK, NO_CODE, MEDIA_TOKEN, TEMPLATE, TOO_LONG)


class DataError(cli.UserError):
    """A data source or data config that cannot be used at all (not a bad row)."""


class SkipRow(Exception):
    """A row that cannot become an example; counted under `reason`, never fatal."""

    def __init__(self, reason, detail=""):
        super().__init__(reason)
        self.reason = reason
        self.detail = detail


@dataclasses.dataclass(frozen=True)
class Record:
    number: int  # 1-based position in the source
    fields: dict


@dataclasses.dataclass(frozen=True)
class Skip:
    number: int
    reason: str
    detail: str = ""


class Records:
    """The first `max_rows` rows (0: all) of a source, as `Record`s or `Skip`s.

    After iteration, `not_read` is how many rows the cap left out and `total` the
    number of rows in the source. `files` are the data files read (in order) and
    `left_aside` the files of a folder or glob that were not, with why; `where`
    names a row's file and its row there."""

    def __init__(self, rows, max_rows=0, files=(), left_aside=None, starts=None):
        self._rows = rows  # (iterator factory, row count function)
        self.max_rows = max_rows
        self.total = None
        self.not_read = 0
        self.files = list(files)
        self.left_aside = dict(left_aside or {})  # file -> why it was not read
        # (first row number, file) of each file begun, filled in as they are read.
        self._starts = starts if starts is not None else []

    def where(self, number):
        """`FILE row K` for row `number` of a source of several files, else ""."""
        if len(self.files) < 2:
            return ""
        start, path = max(((s, p) for s, p in self._starts if s <= number),
                          default=(1, self.files[0]))
        return f"{os.path.basename(path)} row {number - start + 1}"

    def __iter__(self):
        iterate, count = self._rows
        number = 0
        for number, item in enumerate(iterate(), start=1):
            record = item if isinstance(item, Skip) else _record(number, item)
            yield (Skip(record.number, record.reason, self.named(record.number, record.detail))
                   if isinstance(record, Skip) else record)
            if self.max_rows and number == self.max_rows:  # not one row more is read
                self.total = count()
                self.not_read = self.total - self.max_rows
                return
        self.total = number

    def named(self, number, detail):
        """`detail` of row `number`'s skip, after its file and row there (`where`)."""
        where = self.where(number)
        return f"{where}: {detail}" if where else detail


def _record(number, fields):
    if not isinstance(fields, dict):
        return Skip(number, INVALID_JSON,
                    f"expected a JSON object, found {type(fields).__name__} {fields!r:.40}")
    return Record(number, fields)


def _open_binary(path):
    """The file's bytes, decompressed by its last suffix (COMPRESSIONS)."""
    suffix = os.path.splitext(path)[1].lower()
    if suffix == ".gz":
        return gzip.open(path, "rb")
    if suffix == ".bz2":
        return bz2.open(path, "rb")
    if suffix == ".xz":
        return lzma.open(path, "rb")
    if suffix == ".zst":
        import pyarrow  # pylint: disable=import-outside-toplevel
        return io.BufferedReader(pyarrow.input_stream(path, compression="zstd"))
    return open(path, "rb")


def _text_encoding(encoding):
    """Python's codec for `encoding`; UTF-8 reads past a byte-order mark."""
    try:
        name = codecs.lookup(encoding).name
    except LookupError:
        raise DataError(f"data.encoding={encoding!r} is not an encoding Python knows "
                        "(e.g. utf-8, latin-1, cp1252, utf-16)") from None
    return "utf-8-sig" if name == "utf-8" else name


def _not_encoded(path, where, encoding, error):
    return DataError(
        f"{path}: {where} is not {encoding} text ({error.reason}, byte "
        f"{error.object[error.start:error.start + 1]!r}); if the file is in another "
        "encoding, name it with data.encoding (e.g. latin-1, cp1252, utf-16)")


def _decoded_lines(f, codec):
    """The lines of a binary file as text. Line by line where a line end is the byte
    0x0A (UTF-8, Latin-1, cp1252, ...), so that a byte the codec refuses is met
    on its own line; as a stream otherwise (UTF-16, UTF-32)."""
    if "\n".encode(codec.replace("-sig", "")) != b"\n":
        yield from io.TextIOWrapper(f, encoding=codec, newline="")
        return
    for raw in f:
        yield raw.decode(codec)


def _json_lines(path, encoding):
    """One JSON value per line; blank lines are not rows."""
    codec = _text_encoding(encoding)

    def iterate():
        number = line_number = 0
        with _open_binary(path) as f:
            try:
                for line_number, line in enumerate(_decoded_lines(f, codec), start=1):
                    line = line.lstrip("\ufeff")  # a mark on any line (files joined with cat)
                    if not line.strip():
                        continue
                    number += 1
                    try:
                        yield json.loads(line)
                    except json.JSONDecodeError as e:
                        yield Skip(number, INVALID_JSON, f"expected a JSON object, found {e}")
            except UnicodeDecodeError as e:
                where = f"row {number + 1}" + (f" (line {line_number + 1})"
                                               if line_number != number else "")
                raise _not_encoded(path, where, encoding, e) from None

    def count():
        with _open_binary(path) as f:
            if "\n".encode(codec.replace("-sig", "")) != b"\n":  # UTF-16, UTF-32
                return sum(1 for line in _decoded_lines(f, codec) if line.strip())
            return sum(1 for line in f if line.strip())
    return iterate, count


def _json(path, encoding):
    """A JSON array of objects, or JSON Lines under a .json name."""
    codec = _text_encoding(encoding)
    with _open_binary(path) as f:
        head = f.read(4096).decode(codec, errors="ignore")
    if not head.lstrip("\ufeff \t\r\n").startswith("["):
        return _json_lines(path, encoding)
    with _open_binary(path) as f:
        data = f.read()
    try:
        text = data.decode(codec)
    except UnicodeDecodeError as e:
        line = data[:e.start].count(b"\n") + 1
        raise _not_encoded(path, f"line {line}", encoding, e) from None
    try:
        rows = json.loads(text.lstrip("\ufeff"))
    except json.JSONDecodeError as e:
        raise DataError(f"cannot read JSON file {path}: {e}") from e
    return (lambda: iter(rows)), (lambda: len(rows))


def _parquet(path):
    """Opened when read, not before: a folder of thousands of shards holds one open."""
    import pyarrow.parquet as pq  # pylint: disable=import-outside-toplevel

    def opened():
        try:
            return pq.ParquetFile(path)
        except Exception as e:  # pyarrow raises several types for a bad file
            raise DataError(f"cannot read Parquet file {path}: {e}") from e

    def iterate():
        with opened() as table:
            for batch in table.iter_batches(batch_size=4096):
                yield from batch.to_pylist()

    def count():
        with opened() as table:
            return table.metadata.num_rows
    return iterate, count


csv.field_size_limit(1 << 30)  # a cell may hold a whole document; Python's default is 128 KiB


def _delimited(delimiter):
    """CSV (`,`) or TSV (tab): a header row, then rows; quoted cells may hold line ends."""
    def reader(path, encoding):
        codec = _text_encoding(encoding)

        def iterate():
            with _open_binary(path) as f:
                rows = csv.DictReader(_decoded_lines(f, codec), delimiter=delimiter)
                number = 0
                try:
                    for number, row in enumerate(rows, start=1):
                        if None in row:  # csv's key for cells past the header's
                            yield Skip(number, MALFORMED, f"expected {len(rows.fieldnames)} "
                                       f"cells as the header has, found "
                                       f"{len(rows.fieldnames) + len(row[None])}")
                        else:
                            yield row
                except UnicodeDecodeError as e:
                    raise _not_encoded(path, f"row {number + 1}", encoding, e) from None
                except csv.Error as e:
                    raise DataError(f"{path}: row {number + 1}: {e}") from None

        def count():
            return sum(1 for _ in iterate())
        return iterate, count
    return reader


def _dataset(dataset):
    return (lambda: iter(dataset)), (lambda: len(dataset))


def _saved_dataset(path, split):
    import datasets  # pylint: disable=import-outside-toplevel
    try:
        loaded = datasets.load_from_disk(path)
    except Exception as e:  # not a saved data set, or a damaged one
        raise DataError(f"cannot read {path} as a folder written by datasets' save_to_disk: "
                        f"{e}") from e
    if isinstance(loaded, datasets.DatasetDict):
        if split not in loaded:
            raise DataError(f"{path} has no split {split!r}; its splits are "
                            f"{', '.join(loaded)} (set data.split)")
        loaded = loaded[split]
    return _dataset(loaded)


def _hub_dataset(repo_id, subset, split):
    import datasets  # pylint: disable=import-outside-toplevel
    try:
        return _dataset(datasets.load_dataset(repo_id, subset or None, split=split))
    except Exception as e:  # network, auth, missing config/split/file errors alike
        where = f"{repo_id}" + (f" subset {subset}" if subset else "") + f" split {split}"
        raise DataError(f"cannot load Hub data set {where}: {e}") from e


def _synthetic(source):
    count = source[len(SYNTHETIC):]
    if not count.isdigit() or not int(count):
        raise DataError(f"data source {source!r}: {SYNTHETIC}N takes a number of rows, "
                        f"as in {SYNTHETIC}2000")
    with open(SAMPLE_PATH, encoding="utf-8") as f:
        words = [word for line in f for field in ("prompt", "response")
                 for word in json.loads(line)[field].split()]
    return (lambda: synthetic.rows(int(count), words), lambda: int(count))


def _is_glob(source):
    return any(c in source for c in GLOB_CHARS)


def _matches(pattern, name):
    """Whether the relative `name` matches `pattern` segment by segment: `*`, `?` and
    `[...]` within a segment, `**` any number of segments (as `glob` matches)."""
    def match(parts, names):
        if not parts:
            return not names
        if parts[0] == "**":
            return any(match(parts[1:], names[i:]) for i in range(len(names) + 1))
        return bool(names) and fnmatch.fnmatchcase(names[0], parts[0]) and match(parts[1:],
                                                                                   names[1:])
    return match(pattern.split("/"), name.split("/"))


def _glob_root(source):
    """(the part of `source` before its first segment with a wildcard, the rest)."""
    parts = source.split("/")
    first = next(i for i, part in enumerate(parts) if _is_glob(part))
    return "/".join(parts[:first]), "/".join(parts[first:])


def _file_type(name):
    """`.jsonl`, `.parquet`, ... of a data file's name (under its compression), or None."""
    stem, suffix = os.path.splitext(name.lower())
    if suffix in COMPRESSIONS:
        stem, suffix = os.path.splitext(stem)
    return suffix if suffix in FILE_TYPES else None


def _split_of(name):
    """The split a data file's relative path names (a folder `train/`, a file
    `train-00000-of-00004.parquet`, `test.jsonl`), or None."""
    segments = name.split("/")
    segments[-1] = segments[-1].split(".", 1)[0]
    for segment in segments:
        match = _SPLIT_NAME.match(segment.lower())
        if match:
            return _SPLIT_ALIASES.get(match.group(1), match.group(1))
    return None


@dataclasses.dataclass
class Files:
    """The data files a source reads, in order, and those of its folder or glob it
    leaves aside, with why (another split, not a data file)."""
    read: list
    left_aside: dict = dataclasses.field(default_factory=dict)


def _data_files(names, split, where, explicit=False):
    """The `Files` among `names` (relative paths in the folder, or the matches of the
    glob, `where`) that hold the rows of `split`: data files only (READMEs, hidden
    files and `datasets`' own metadata left aside, unless the glob named them:
    `explicit`); when some name a split (the Hub's
    `SET/data/train-00000-of-00004.parquet`, `train.jsonl`, `test/part-0.jsonl`), those
    of `split` (the train split: the files that name no split, if none names it);
    otherwise all of them, as one `train` split."""
    left = {}
    data = []
    for name in names:
        hidden = any(part.startswith((".", "_")) for part in name.split("/"))
        if explicit or (_file_type(name) and os.path.basename(name) not in _METADATA
                        and not hidden):
            data.append(name)
        else:
            left[name] = "hidden" if hidden else "not a data file"
    if not data:
        raise DataError(f"{where}: no data file in it (expected {', '.join(FILE_TYPES)} files, "
                        "compressed or not, or a folder written by datasets); found "
                        f"{', '.join(names[:5]) or 'nothing'}")
    splits = {n: _split_of(n) for n in data}
    named = sorted({s for s in splits.values() if s})
    wanted = _SPLIT_ALIASES.get(split.lower(), split.lower())
    if not named:
        if wanted != "train":
            raise DataError(f"{where}: no file names a split, so its {len(data)} files are "
                            f"the train split; there is no split {split!r} (set data.split)")
        return Files(sorted(data), left)
    chosen = sorted(n for n, s in splits.items() if s == wanted)
    if not chosen and wanted == "train":  # `chats-0.jsonl`, `chats-1.jsonl` and `test.jsonl`
        chosen = sorted(n for n, s in splits.items() if s is None)
    if not chosen:
        raise DataError(f"{where}: no file of split {split!r}; its files name the splits "
                        f"{', '.join(named)} (set data.split)")
    left.update({n: f"split {s or 'none'}" for n, s in splits.items() if n not in chosen})
    return Files(chosen, left)


def _is_saved_dataset(path):
    names = set(os.listdir(path))
    return "dataset_dict.json" in names or {"dataset_info.json", "state.json"} <= names


def _walk(path):
    """Relative names of the files under `path`, following linked folders once each."""
    seen, names = set(), []
    for directory, folders, found in os.walk(path, followlinks=True):
        real = os.path.realpath(directory)
        if real in seen:  # a link back up, or to a folder already read
            folders[:] = []
            continue
        seen.add(real)
        names += [os.path.relpath(os.path.join(directory, f), path).replace(os.sep, "/")
                  for f in found]
    return sorted(names)


def _local(where, names, split, explicit=False):
    files = _data_files(names, split, where, explicit)
    return Files([os.path.join(where, n) for n in files.read],
                 {os.path.join(where, n): why for n, why in files.left_aside.items()})


def _local_glob(source, path, split):
    """The files a local glob matches (each real file once), split by their names
    below the glob's fixed part."""
    root, _ = _glob_root(path)
    names, seen = [], set()
    for match in sorted(glob.glob(path, recursive=True)):
        real = os.path.realpath(match)
        if os.path.isfile(match) and real not in seen:
            seen.add(real)
            names.append(os.path.relpath(match, root).replace(os.sep, "/"))
    if not names:
        raise DataError(f"data source {source!r} matches no file")
    return _local(root, names, split, explicit=True)


def _gs_files(url, split):
    """Local copies of the data files of the gs:// file, folder or glob `url`."""
    if _is_glob(url):
        root, pattern = _glob_root(url)
        names = [n for n in storage.list_names(root) if _matches(pattern, n)]
        if not names:
            raise DataError(f"{url} matches no object")
        files = _data_files(names, split, url, explicit=True)
    else:
        root, names = url, storage.list_names(url)
        if names == ["."]:
            return _single(storage.fetch_file(url), split, url)
        if not names:
            raise storage.StorageError(f"{url} does not exist (no objects under it)")
        files = _data_files(names, split, url)
    local = storage.fetch(root, only=files.read)
    return Files([os.path.join(local, *n.split("/")) for n in files.read],
                 {storage.join(root, n): why for n, why in files.left_aside.items()})


def _single(path, split, source):
    """One file: the train split, whatever its name."""
    if _SPLIT_ALIASES.get(split.lower(), split.lower()) != "train":
        raise DataError(f"{source} is one file, one train split: there is no split {split!r} "
                        "in it (give the split's own file, or a folder of both)")
    return Files([path])


def _hub_repo_files(repo_id):
    from huggingface_hub import HfApi  # pylint: disable=import-outside-toplevel
    return HfApi().list_repo_files(repo_id, repo_type="dataset")


def _hub_download(repo_id, filename):
    from huggingface_hub import hf_hub_download  # pylint: disable=import-outside-toplevel
    return hf_hub_download(repo_id=repo_id, filename=filename, repo_type="dataset")


def _hub_files(url, split):
    """Local copies of the Hub data set file, folder or glob
    `hf://datasets/OWNER/NAME/PATH` (its root folder without PATH), downloaded into
    the Hugging Face cache."""
    parts = url[len(HUB_FILE):].split("/", 2)
    if len(parts) < 2 or not all(parts[:2]):
        raise DataError(f"{url}: a Hub data set source is {HUB_FILE}OWNER/NAME[/PATH] (a file, "
                        "a folder or a glob such as data/train-*.parquet)")
    repo_id, path = "/".join(parts[:2]), (parts[2] if len(parts) > 2 else "").strip("/")
    try:
        if _file_type(path) and not _is_glob(path):
            return _single(_hub_download(repo_id, path), split, url)
        files = _hub_repo_files(repo_id)
        if _is_glob(path):
            names = [f for f in files if _matches(path, f)]
            if not names:
                raise DataError(f"{url} matches no file of {repo_id}")
            chosen = _data_files(names, split, url, explicit=True)
        else:
            prefix = path + "/" if path else ""
            inside = [f[len(prefix):] for f in files if f.startswith(prefix)]
            if not inside:
                raise DataError(f"{url}: {repo_id} has no file or folder {path}")
            chosen = _data_files(inside, split, url)
            chosen = Files([prefix + n for n in chosen.read],
                           {prefix + n: why for n, why in chosen.left_aside.items()})
        return Files([_hub_download(repo_id, name) for name in chosen.read],
                     {f"{HUB_FILE}{repo_id}/{n}": why for n, why in chosen.left_aside.items()})
    except DataError:
        raise
    except Exception as e:  # network, auth and missing-file errors alike
        raise DataError(f"cannot download {url}: {e}") from e


def local_files(source, split="train"):
    """The `Files` of a file-like source (`sample`, a file, folder or glob, local,
    gs:// or hf://datasets/), a folder written by `datasets` as a string, or None
    for a Hub data set id. A path that exists is read as it is, even where its
    name holds `*`, `?` or `[`; only one that does not is a glob."""
    if source == SAMPLE:
        return Files([SAMPLE_PATH])
    if source.startswith("hf://") and not source.startswith(HUB_FILE):
        raise DataError(f"{source}: a Hub data set source is {HUB_FILE}OWNER/NAME[/PATH] "
                        "(models are not data)")
    if source.startswith(HUB_FILE):
        return _hub_files(source, split)
    if storage.is_url(source):
        return _gs_files(storage.check_url(source), split)
    path = config_cli.user_path(source)  # relative to where the user ran the command
    if os.path.isdir(path):
        return path if _is_saved_dataset(path) else _local(path, _walk(path), split)
    if os.path.exists(path):
        return _single(path, split, source)
    if _is_glob(source):
        return _local_glob(source, path, split)
    if (source.count("/") == 1 and not source.startswith((".", "/", "~"))
            and not _file_type(source)):
        return None
    raise DataError(f"data source {source!r} is neither a file, folder or glob, nor "
                    "'sample', nor a gs:// or hf://datasets/ URL, nor a Hub data set id like "
                    "owner/name")


_READERS = {".jsonl": _json_lines, ".json": _json, ".csv": _delimited(","),
            ".tsv": _delimited("\t")}


def _file_rows(path, encoding):
    """(iterator factory, row count function) of one data file, by its type."""
    if not os.path.isfile(path) or not os.access(path, os.R_OK):
        raise DataError(f"cannot read data file {path}")
    stem, suffix = os.path.splitext(path.lower())
    compressed = suffix in COMPRESSIONS
    if compressed:
        stem, suffix = os.path.splitext(stem)
    if suffix == ".parquet":
        if compressed:
            raise DataError(f"{path}: a Parquet file compresses its columns itself; give "
                            "it uncompressed (only the text types are read compressed)")
        return _parquet(path)
    if suffix not in _READERS:
        raise DataError(f"{path}: unknown file type {suffix or '(none)'}; one of "
                        f"{', '.join(FILE_TYPES)} (the text types also compressed: "
                        f"{', '.join(COMPRESSIONS)}), or a folder written by datasets")
    return _READERS[suffix](path, encoding)


_DECOMPRESSION_ERRORS = (OSError, EOFError, lzma.LZMAError, zlib.error)


def _guarded(path, rows):
    """`rows` (an iterator factory) with a damaged file (a compressed file that
    does not decompress, a truncated one) as one DataError naming it."""
    def iterate():
        try:
            yield from rows()
        except _DECOMPRESSION_ERRORS as e:
            raise DataError(f"{path}: cannot read it ({type(e).__name__}: {e}); a damaged or "
                            "truncated file?") from None
    return iterate


def _shards(paths, encoding, starts):
    """The rows of several files, one after the other, numbered on from file to file;
    `starts` gets each file's first row number as it begins (`Records.where`)."""
    readers = [(path, *_file_rows(path, encoding)) for path in paths]

    def iterate():
        offset = 0
        for path, rows, _ in readers:
            starts.append((offset + 1, path))
            local = 0
            for local, item in enumerate(_guarded(path, rows)(), start=1):
                yield (Skip(offset + item.number, item.reason, item.detail)
                       if isinstance(item, Skip) else item)
            offset += local

    def count():
        total = 0
        for path, _, rows in readers:
            try:
                total += rows()
            except _DECOMPRESSION_ERRORS as e:
                raise DataError(f"{path}: cannot read it ({type(e).__name__}: {e})") from None
        return total
    return iterate, count


def read(source, *, subset="", split="train", max_rows=0, encoding="utf-8"):
    """The rows of `source` (see the module docstring) as a `Records`."""
    if source.startswith(SYNTHETIC):
        return Records(_synthetic(source), max_rows)
    _text_encoding(encoding)  # an unknown encoding fails here, before any row
    files = local_files(source, split)
    if files is None:
        return Records(_hub_dataset(source, subset, split), max_rows)
    if isinstance(files, str):
        return Records(_saved_dataset(files, split), max_rows)
    starts = []
    return Records(_shards(files.read, encoding, starts), max_rows, files=files.read,
                   left_aside=files.left_aside, starts=starts)
