"""Locations: every flag that names a place takes a local path or a gs:// URL.

    where = config_cli.user_path(flag_value)    # an absolute local path, or the URL
    storage.join(where, "run.json")
    storage.write_json(storage.join(where, "run.json"), value)   # whole or not at all
    storage.probe(where)                        # one `error:` line: no bucket, no
                                                # credentials, write denied
    with storage.output_dir(where) as tmp: ...  # a folder that appears complete or not at all
    local = storage.fetch(url)                  # a gs:// folder copied to the local cache
    mirror = storage.Mirror(where)              # a local working copy, pushed at commit points

Local paths keep the standard library. URLs go through fsspec's gcsfs, the layer
etils.epath (and so Orbax) reads gs:// with; Orbax writes its arrays to the same
buckets through tensorstore. An object store has no rename and no append: one
object is written whole or not at all, and a folder written here is complete
once its commit marker (COMMIT_MARKER, written last, as Orbax marks a finished
checkpoint) exists; `fetch` refuses a folder without one when asked to.

STORAGE_EMULATOR_HOST, the variable Google's own clients read, routes all gs://
traffic to a GCS API emulator; `configure()`, run by the first gs:// access
here (every stage probes its location first, before Orbax opens a bucket),
points tensorstore and gcsfs at it too.
"""

import contextlib
import hashlib
import json
import os
import posixpath
import shutil
import tempfile

from common import cli

SCHEME = "gs://"
COMMIT_MARKER = ".g4_complete"
_FETCHED = ".g4_fetched.json"  # what a local copy holds: object generations by name
_PUSHED = ".g4_pushed.json"  # what a mirror uploaded: (size, mtime) by name
_BOOKKEEPING = (_FETCHED, _PUSHED, COMMIT_MARKER)  # never uploaded
CACHE_ENV = "G4_CACHE_DIR"


class StorageError(cli.UserError):
    """A location that cannot be used: the message names it and says why."""


def _emulator():
    host = os.environ.get("STORAGE_EMULATOR_HOST")
    return (host if "://" in host else f"http://{host}") if host else None


def configure():
    """Points tensorstore and gcsfs at $STORAGE_EMULATOR_HOST when it is set.

    Orbax's arrays go through tensorstore, which reads its own variables; the
    emulator takes any token, so none is looked up (no metadata server is asked).
    Called by the first gs:// access here, before Orbax opens any bucket.
    """
    url = _emulator()
    if url:
        os.environ["TENSORSTORE_GCS_HTTP_URL"] = url
        os.environ.setdefault("GOOGLE_AUTH_TOKEN_FOR_TESTING", "emulator")
        # gcsfs asks Storage Control's gRPC API for a bucket's layout; emulators lack it.
        os.environ.setdefault("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")


def is_url(where):
    return isinstance(where, str) and "://" in where


def check_url(value):
    """A gs:// URL as typed, without a trailing slash; other schemes are refused."""
    if not value.startswith(SCHEME) or not value[len(SCHEME):].strip("/"):
        raise StorageError(f"{value}: only local paths and gs://BUCKET/... URLs are supported")
    return value.rstrip("/")


def join(where, *parts):
    return posixpath.join(where, *parts) if is_url(where) else os.path.join(where, *parts)


def bucket(url):
    return url[len(SCHEME):].split("/", 1)[0]


def _fs():
    """The gcsfs file system (one per endpoint), without a listing cache: other
    processes write the same buckets, and what exists must be asked each time."""
    configure()
    import fsspec  # pylint: disable=import-outside-toplevel
    emulator = _emulator()
    if emulator:
        return fsspec.filesystem("gs", endpoint_url=emulator, token="anon", cache_timeout=0)
    return fsspec.filesystem("gs", cache_timeout=0)


def _key(url):
    return url[len(SCHEME):]


def exists(where):
    return _fs().exists(_key(where)) if is_url(where) else os.path.exists(where)


def read_bytes(where):
    try:
        if is_url(where):
            return _fs().cat_file(_key(where))
        with open(where, "rb") as f:
            return f.read()
    except FileNotFoundError:
        raise StorageError(f"{where} does not exist") from None


def read_text(where):
    return read_bytes(where).decode()


def read_json(where):
    try:
        return json.loads(read_text(where))
    except json.JSONDecodeError as e:
        raise StorageError(f"{where} is not valid JSON: {e}") from None


def write_bytes(where, data):
    """Writes `where` whole: an object upload, or a local file renamed into place."""
    if is_url(where):
        _fs().pipe_file(_key(where), data)
        return
    os.makedirs(os.path.dirname(where) or ".", exist_ok=True)
    tmp = f"{where}.tmp.{os.getpid()}"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, where)


def write_json(where, value):
    write_bytes(where, (json.dumps(value, indent=2, sort_keys=True) + "\n").encode())


def makedirs(where):
    """A local folder is created; an object store has no folders to create."""
    if not is_url(where):
        os.makedirs(where, exist_ok=True)


def listdir(where):
    """The names directly under `where` (files and folders); [] when there are none."""
    if not is_url(where):
        return os.listdir(where) if os.path.isdir(where) else []
    try:
        return [posixpath.basename(p.rstrip("/")) for p in _fs().ls(_key(where), detail=False)]
    except FileNotFoundError:
        return []


def remove(where):
    """Deletes the file or folder `where` (all objects under a URL)."""
    if is_url(where):
        _fs().rm(_key(where), recursive=True)
    elif os.path.isdir(where):
        shutil.rmtree(where)
    elif os.path.exists(where):
        os.remove(where)


def _explain(where, error):
    """A sentence for what went wrong writing to a bucket."""
    text = str(error)
    code = getattr(error, "code", None)
    name = bucket(where)
    if isinstance(error, FileNotFoundError) or code == 404 or "does not exist" in text:
        return f"the bucket gs://{name} does not exist (or this account cannot see it)"
    if code == 401 or "credential" in text.lower() or "Anonymous caller" in text:
        return ("no Google Cloud credentials were found: run `gcloud auth application-default "
                "login`, or set GOOGLE_APPLICATION_CREDENTIALS, or run on a VM whose service "
                "account has access")
    # gcsfs raises a 403 as OSError("Forbidden: URL"), without the code.
    if isinstance(error, PermissionError) or code == 403 or text.startswith("Forbidden"):
        return f"writing to gs://{name} is denied: the account needs roles/storage.objectAdmin"
    return f"{type(error).__name__}: {text.splitlines()[0] if text else ''}"


def probe(where):
    """Checks that `where` can be written (a probe file or object, removed again),
    so that a bad location fails with one sentence before any weight loads."""
    name = f".write_probe.{os.getpid()}"
    if not is_url(where):
        try:
            os.makedirs(where, exist_ok=True)
            write_bytes(os.path.join(where, name), b"ok")
            os.remove(os.path.join(where, name))
        except OSError as e:
            raise StorageError(f"cannot write to {where}: {e.strerror}") from e
        return where
    try:
        fs = _fs()
        fs.pipe_file(_key(join(where, name)), b"ok")
        fs.rm_file(_key(join(where, name)))
    except Exception as e:  # gcsfs raises HttpError, OSError subclasses and auth errors
        raise StorageError(f"cannot write to {where}: {_explain(where, e)}") from e
    return where


def cache_root():
    return os.environ.get(CACHE_ENV) or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "gemma4-toolkit")


def cache_dir(url, kind="gs"):
    """The local folder that holds a copy of `url` (stable, so copies are reused)."""
    digest = hashlib.sha256(url.encode()).hexdigest()[:12]
    return os.path.join(cache_root(), kind, bucket(url), f"{posixpath.basename(url)}-{digest}")


def _listing(url):
    """{relative name: (size, generation)} of the objects under `url`."""
    fs = _fs()
    root = _key(url).rstrip("/")
    found = fs.find(root, detail=True)
    return {posixpath.relpath(name, root): (int(info.get("size") or 0),
                                            str(info.get("generation") or info.get("etag") or
                                                info.get("md5Hash") or info.get("updated")))
            for name, info in found.items() if info.get("type") != "directory"}


def list_names(url):
    """The names (relative to `url`, sorted) of the objects under the gs:// prefix
    `url`; `["."]` when `url` is one object."""
    try:
        return sorted(_listing(url))
    except Exception as e:  # gcsfs raises HttpError, OSError subclasses and auth errors
        raise StorageError(f"cannot read {url}: {_explain(url, e)}") from e


def _progress(total, desc):
    from tqdm import tqdm  # pylint: disable=import-outside-toplevel
    return tqdm(total=total, unit="B", unit_scale=True, desc=desc,
                disable=total < (64 << 20) and not os.environ.get("G4_PROGRESS"))


def _complete(url, listing):
    """Whether `url`, or a folder above it, holds the commit marker (an export
    of both formats marks its root, not each of its two folders)."""
    if COMMIT_MARKER in listing:
        return True
    parent = url
    while parent.count("/") > 3:  # gs://BUCKET/a/b -> gs://BUCKET/a
        parent = parent.rsplit("/", 1)[0]
        if exists(join(parent, COMMIT_MARKER)):
            return True
    return False


def fetch(url, dest=None, *, only=None, require_complete=False):
    """A local copy of the gs:// folder `url` (only the names under the prefixes
    in `only`, when given); objects copied before and unchanged are kept.

    Returns the local folder. A local path is returned as it is.
    """
    if not is_url(url):
        return url
    dest = dest or cache_dir(url)
    try:
        listing = _listing(url)
    except Exception as e:
        raise StorageError(f"cannot read {url}: {_explain(url, e)}") from e
    if not listing:
        raise StorageError(f"{url} does not exist (no objects under it)")
    if require_complete and not _complete(url, listing):
        raise StorageError(f"{url} is incomplete: its writer did not finish "
                           f"(no {COMMIT_MARKER})")
    if only is not None:
        listing = {name: meta for name, meta in listing.items()
                   if any(name == p or name.startswith(p.rstrip("/") + "/") for p in only)}
    record_path = os.path.join(dest, _FETCHED)
    held = json.loads(read_text(record_path)) if os.path.exists(record_path) else {}
    todo = {name: meta for name, meta in listing.items()
            if held.get(name) != list(meta) or not os.path.exists(os.path.join(dest, name))}
    if todo:
        print(f"copying {url} to the local cache {dest} ({len(todo)} files)", flush=True)
    fs = _fs()
    try:
        os.makedirs(dest, exist_ok=True)
    except OSError as e:
        raise StorageError(f"cannot copy {url} to the local cache {dest}: {e.strerror} (set "
                           f"{CACHE_ENV} to a writable folder)") from None
    with _progress(sum(size for size, _ in todo.values()), f"fetch {url}") as bar:
        for name, meta in sorted(todo.items()):
            target = os.path.join(dest, name)
            os.makedirs(os.path.dirname(target), exist_ok=True)
            part = f"{target}.part{os.getpid()}"  # processes of one host may share a cache
            fs.get_file(_key(join(url, name)), part)
            os.replace(part, target)
            held[name] = list(meta)
            bar.update(meta[0])
    if todo:
        write_json(record_path, held)
    return dest


def fetch_file(url):
    """A local copy of the gs:// object `url` (a data file), kept while unchanged."""
    parent, name = url.rsplit("/", 1)
    path = os.path.join(fetch(parent, only=[name]), name)
    if not os.path.isfile(path):
        raise StorageError(f"{url} does not exist")
    return path


def push(local_dir, url, names=None, *, mark_complete=False):
    """Uploads the files under `local_dir` (or the `names` under it: files or
    folders) to `url`; with `mark_complete` the commit marker goes last."""
    fs = _fs()
    files = []
    for name in names if names is not None else [""]:
        top = os.path.join(local_dir, name)
        if os.path.isfile(top):
            files.append(name)
        for directory, _, found in os.walk(top):
            files += [os.path.relpath(os.path.join(directory, f), local_dir) for f in found]
    # A file its writer removed since it was listed (a tracker's temporary file)
    # is not uploaded.
    files = [f for f in files if os.path.basename(f) not in _BOOKKEEPING
             and os.path.isfile(os.path.join(local_dir, f))]
    total = sum(os.path.getsize(os.path.join(local_dir, f)) for f in files)
    with _progress(total, f"upload {url}") as bar:
        for name in sorted(files):
            path = os.path.join(local_dir, name)
            try:
                size = os.path.getsize(path)
                fs.put_file(path, _key(join(url, *name.split(os.sep))))
            except FileNotFoundError:
                continue
            bar.update(size)
    if mark_complete:
        fs.pipe_file(_key(join(url, COMMIT_MARKER)), json.dumps({"files": len(files)}).encode())


@contextlib.contextmanager
def output_dir(where, overwrite=False):
    """Yields a fresh local folder that becomes `where` on success, whole: a local
    folder renamed into place, or objects uploaded with the commit marker last.
    An error in the body leaves `where` as it was. In a bucket, an upload cut
    short leaves objects without the marker, which readers refuse (`fetch`)."""
    if not is_url(where):
        with _atomic_local_dir(where, overwrite) as tmp:
            yield tmp
        return
    probe_parent = where.rsplit("/", 1)[0] if where.count("/") > 2 else where
    probe(probe_parent)
    if exists(join(where, COMMIT_MARKER)) and not overwrite:
        raise OutputExists(f"{where} exists; pass --overwrite to replace it")
    tmp = tempfile.mkdtemp(prefix="g4-output-")
    try:
        yield tmp
        if overwrite and exists(where):
            remove(where)
        push(tmp, where, mark_complete=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


class OutputExists(cli.UserError):
    pass


@contextlib.contextmanager
def _atomic_local_dir(path, overwrite):
    """Everything is written beside `path` and renamed into place at the end;
    every file is fsynced before the rename and the parent folder after it."""
    path = os.path.abspath(path)
    if os.path.exists(path) and not overwrite:
        raise OutputExists(f"{path} exists; pass --overwrite to replace it")
    parent = os.path.dirname(path)
    os.makedirs(parent, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=f".{os.path.basename(path)}.", dir=parent)
    try:
        yield tmp
        _fsync_tree(tmp)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if os.path.exists(path):
        old = tmp + ".old"
        os.rename(path, old)
        os.rename(tmp, path)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.rename(tmp, path)
    _fsync(parent, os.O_RDONLY | os.O_DIRECTORY)


def _fsync_tree(root):
    for directory, _, files in os.walk(root, topdown=False):
        for name in files:
            _fsync(os.path.join(directory, name), os.O_RDONLY)
        _fsync(directory, os.O_RDONLY | os.O_DIRECTORY)


def _fsync(path, flags):
    fd = os.open(path, flags)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class Mirror:
    """A local working copy of a location, for writers that need a local folder
    (TensorBoard, Hugging Face's Trainer) or append (metrics.jsonl).

    For a local location the copy is the location itself and pull/push do
    nothing; for a URL it is a cache folder: `pull` copies objects down, `push`
    uploads the files that changed since they were pulled or pushed.
    """

    def __init__(self, where, clear=False):
        """`clear` empties a URL's cache folder first: what it holds then comes
        from the bucket alone (one process per host owns a mirror)."""
        self.where = where
        self.remote = is_url(where)
        self.local = cache_dir(where, "mirror") if self.remote else where
        if self.remote and clear:
            shutil.rmtree(self.local, ignore_errors=True)
        os.makedirs(self.local, exist_ok=True)
        self._record = os.path.join(self.local, _PUSHED)

    def _stats(self):
        """{name: [size, mtime_ns]} of the files the copy holds."""
        stats = {}
        for directory, _, files in os.walk(self.local):
            for f in files:
                if f not in _BOOKKEEPING and ".part" not in f:
                    path = os.path.join(directory, f)
                    try:
                        info = os.stat(path)
                    except FileNotFoundError:  # removed by its writer since the walk
                        continue
                    stats[os.path.relpath(path, self.local)] = [info.st_size, info.st_mtime_ns]
        return stats

    def _held(self):
        return json.loads(read_text(self._record)) if os.path.exists(self._record) else {}

    def pull(self, only=None):
        if self.remote and _fs().exists(_key(self.where)):
            try:
                fetch(self.where, self.local, only=only)
            except StorageError as e:
                if "no objects" not in str(e):
                    raise
            write_json(self._record, {**self._held(), **self._stats()})
        return self.local

    def push(self, names=None):
        """Uploads what changed (under `names` only, when given)."""
        if not self.remote:
            return
        held, stats = self._held(), self._stats()
        changed = [name for name, stat in stats.items() if held.get(name) != stat and (
            names is None or any(name == n or name.startswith(n + os.sep) for n in names))]
        push(self.local, self.where, changed)
        write_json(self._record, {**held, **{name: stats[name] for name in changed}})
