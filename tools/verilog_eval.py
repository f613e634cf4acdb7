"""Fetches the VerilogEval v2 spec-to-rtl data where no copy is at hand.

The evaluation (eval/problems.py) reads $VERILOG_EVAL_DIR, else the shared copy
beside the checkout (`../shared/verilog-eval`, development and CI machines),
else DEST below. This script fills DEST on any other machine: it downloads
NVlabs/verilog-eval at the pinned commit from GitHub, keeps the files that
tools/verilog_eval.sha256 lists (the data set, the n-shot prefixes from
`scripts/`, the license) and checks each against its checksum before the folder
is moved into place. Run by ./bazelw and by the `verilog_eval` repository
(tools/pinned.bzl), standard library only:

    python3 tools/verilog_eval.py                # prints the data set folder
    python3 tools/verilog_eval.py --dest DIR     # the pinned data at DIR, checked
"""

import hashlib
import io
import os
import shutil
import sys
import tarfile
import tempfile
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir))
from common import repo  # pylint: disable=wrong-import-position

COMMIT = "c498220d0a52248f8e3fdffe279075215bde2da6"  # NVlabs/verilog-eval main, 2025-02-07
URL = f"https://github.com/NVlabs/verilog-eval/archive/{COMMIT}.tar.gz"
SUMS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "verilog_eval.sha256")
DEST = os.path.join(repo.source_root(), ".venvs", "verilog-eval")
SHARED = os.path.normpath(os.path.join(repo.source_root(), os.pardir, "shared", "verilog-eval"))
DATASET = "dataset_spec-to-rtl"
# Our layout -> the upstream one (the shared copy's README): the n-shot prefixes
# live in the upstream `scripts/` folder.
UPSTREAM_FOLDERS = {"icl-examples": "scripts"}


def expected():
    """{relative path: sha256} of tools/verilog_eval.sha256."""
    sums = {}
    with open(SUMS) as f:
        for line in f:
            digest, path = line.rstrip("\n").split("  ", 1)
            sums[path] = digest
    return sums


def upstream_path(path):
    head, _, rest = path.partition("/")
    return f"{UPSTREAM_FOLDERS.get(head, head)}/{rest}" if rest else head


def complete(folder, sums):
    return all(os.path.isfile(os.path.join(folder, p)) for p in sums)


class Mismatch(Exception):
    """A file of the data is missing from its source or differs from its checksum."""


def install(dest, sums, read, source):
    """Writes every file of `sums` into `dest`, each read by `read(path)` (bytes, or
    None where the source lacks it) and checked against its checksum; the folder
    is moved into place only once complete. Raises Mismatch naming the file."""
    os.makedirs(os.path.dirname(dest), exist_ok=True)
    staging = tempfile.mkdtemp(prefix=".verilog-eval-", dir=os.path.dirname(dest))
    try:
        for path, digest in sums.items():
            data = read(path)
            if data is None:
                raise Mismatch(f"{source} has no {path}")
            if hashlib.sha256(data).hexdigest() != digest:
                raise Mismatch(f"{path} of {source} does not match its checksum in {SUMS}")
            target = os.path.join(staging, path)
            os.makedirs(os.path.dirname(target), exist_ok=True)
            with open(target, "wb") as f:
                f.write(data)
        shutil.rmtree(dest, ignore_errors=True)
        os.replace(staging, dest)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def fetch(dest=DEST, url=URL):
    """Downloads, checks and installs the data at `dest`; returns its data set folder."""
    sums = expected()
    if complete(dest, sums):
        return os.path.join(dest, DATASET)
    print(f"[verilog_eval] downloading {url}", file=sys.stderr)
    with urllib.request.urlopen(url, timeout=120) as response:
        archive = response.read()
    with tarfile.open(fileobj=io.BytesIO(archive), mode="r:gz") as tar:
        members = {m.name.split("/", 1)[1]: m for m in tar.getmembers()
                   if m.isfile() and "/" in m.name}

        def read(path):
            member = members.get(upstream_path(path))
            return None if member is None else tar.extractfile(member).read()

        try:
            install(dest, sums, read, url)
        except Mismatch as e:
            raise SystemExit(f"error: {e}") from None
    return os.path.join(dest, DATASET)


def copy_checked(source, dest, sums):
    """Copies the files of `sums` from a local copy of the data into `dest`, each
    checked against its checksum; False (nothing written) if the copy lacks one
    or differs."""

    def read(path):
        try:
            with open(os.path.join(source, path), "rb") as f:
                return f.read()
        except OSError:
            return None

    try:
        install(dest, sums, read, source)
    except Mismatch:
        return False
    return True


def pinned(dest):
    """The pinned data at `dest` (the `verilog_eval` repository, tools/pinned.bzl):
    from the shared copy beside the checkout where it is complete and intact,
    else downloaded; either way every file is checked. Returns the data set folder."""
    if not copy_checked(SHARED, dest, expected()):
        fetch(dest)
    return os.path.join(dest, DATASET)


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--dest":
        print(pinned(os.path.abspath(sys.argv[2])))
    elif os.environ.get("VERILOG_EVAL_DIR"):
        print(os.environ["VERILOG_EVAL_DIR"])
    elif os.path.isdir(os.path.join(SHARED, DATASET)):
        print(os.path.join(SHARED, DATASET))
    else:
        print(fetch())


if __name__ == "__main__":
    main()
