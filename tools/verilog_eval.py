"""Fetches the VerilogEval v2 spec-to-rtl data where no copy is at hand.

The evaluation (eval/problems.py) reads $VERILOG_EVAL_DIR, else the shared copy
beside the checkout (`../shared/verilog-eval`, development and CI machines),
else DEST below. This script fills DEST on any other machine: it downloads
NVlabs/verilog-eval at the pinned commit from GitHub, keeps the files that
tools/verilog_eval.sha256 lists (the data set, the n-shot prefixes from
`scripts/`, the license) and checks each against its checksum before the folder
is moved into place. Run by ./bazelw (standard library only):

    python3 tools/verilog_eval.py          # prints the data set folder
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


def fetch(dest=DEST, url=URL):
    """Downloads, checks and installs the data at `dest`; returns its data set folder."""
    sums = expected()
    if complete(dest, sums):
        return os.path.join(dest, DATASET)
    print(f"[verilog_eval] downloading {url}", file=sys.stderr)
    with urllib.request.urlopen(url, timeout=120) as response:
        archive = response.read()
    parent = os.path.dirname(dest)
    os.makedirs(parent, exist_ok=True)
    staging = tempfile.mkdtemp(prefix=".verilog-eval-", dir=parent)
    try:
        with tarfile.open(fileobj=io.BytesIO(archive), mode="r:gz") as tar:
            members = {m.name.split("/", 1)[1]: m for m in tar.getmembers()
                       if m.isfile() and "/" in m.name}
            for path, digest in sums.items():
                member = members.get(upstream_path(path))
                if member is None:
                    raise SystemExit(f"error: {url} has no {upstream_path(path)}")
                data = tar.extractfile(member).read()
                if hashlib.sha256(data).hexdigest() != digest:
                    raise SystemExit(f"error: {upstream_path(path)} of {url} does not match "
                                     f"its checksum in {SUMS}")
                target = os.path.join(staging, path)
                os.makedirs(os.path.dirname(target), exist_ok=True)
                with open(target, "wb") as f:
                    f.write(data)
        shutil.rmtree(dest, ignore_errors=True)
        os.replace(staging, dest)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return os.path.join(dest, DATASET)


def main():
    if os.environ.get("VERILOG_EVAL_DIR"):
        print(os.environ["VERILOG_EVAL_DIR"])
    elif os.path.isdir(os.path.join(SHARED, DATASET)):
        print(os.path.join(SHARED, DATASET))
    else:
        print(fetch())


if __name__ == "__main__":
    main()
