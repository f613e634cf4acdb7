"""The pinned package installer and where packages come from, for the build tooling.

Run with the system python3 (standard library only) by the offline pip hubs
(tools/pip_hub.py, third_party/offline/repositories.bzl) and by
tools/update_locks.py; no process of the product runs from a virtualenv of
ours: Bazel installs each lock one folder per package, in both modes.

    python3 tools/venvs.py --wheels LOCK DEST    # the wheels of LOCK, hash-checked

`uv_binary()` installs the pinned uv (uv_lock.txt) into `.venvs/uv` once, and
again only when that lock changes.
"""

import argparse
import fcntl
import hashlib
import os
import shutil
import subprocess
import sys

# Run as a script, this file's folder is on sys.path, not the checkout's.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir))
from common import repo  # pylint: disable=wrong-import-position

ROOT = repo.source_root()
LOCKS = os.path.join(ROOT, "third_party", "requirements")
VENVS = os.path.join(ROOT, ".venvs")
STAMP = ".lock.sha256"
# The CPU build of torch that the locks pin (`+cpu`) lives on the PyTorch index,
# unless pip is configured with local find-links that hold it (CI machines).
TORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"


def lock_path(name):
    return os.path.join(LOCKS, f"{name}_lock.txt")


def _log(message):
    print(f"[venvs] {message}", file=sys.stderr, flush=True)


def pip_find_links():
    """pip's configured find-links (a local wheel folder on these machines)."""
    result = subprocess.run(
        [sys.executable, "-m", "pip", "config", "list"],
        capture_output=True, text=True)
    links = []
    for line in result.stdout.splitlines():
        key, _, value = line.partition("=")
        if key.strip().endswith("find-links"):
            links.extend(value.strip().strip("'\"").split())
    return [link for link in links if os.path.isdir(link)]


def uv_binary():
    """The pinned uv installer, itself installed by hash into .venvs/uv (once: Bazel
    fetches the offline pip hubs in parallel, each asking for it)."""
    with open(lock_path("uv"), "rb") as f:
        digest = hashlib.sha256(f.read() + sys.version.encode()).hexdigest()
    path = os.path.join(VENVS, "uv")
    os.makedirs(VENVS, exist_ok=True)
    with open(os.path.join(VENVS, ".uv.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            with open(os.path.join(path, STAMP)) as f:
                current = f.read().strip() == digest
        except FileNotFoundError:
            current = False
        if not current:
            _log("installing the pinned uv installer")
            shutil.rmtree(path, ignore_errors=True)
            subprocess.run([sys.executable, "-m", "venv", path], check=True)
            subprocess.run(
                [os.path.join(path, "bin", "python"), "-m", "pip", "install",
                 "--quiet", "--require-hashes", "--no-deps", "-r", lock_path("uv")],
                check=True)
            with open(os.path.join(path, STAMP + ".tmp"), "w") as f:
                f.write(digest + "\n")
            os.replace(os.path.join(path, STAMP + ".tmp"), os.path.join(path, STAMP))
    return os.path.join(path, "bin", "uv")


def download_wheels(lock, dest):
    """The wheels of `lock`, checked against its hashes, into `dest` (`pip wheel`:
    a package published as an sdist only, e.g. promise, is built into one).

    For runnable offline images (G4_OFFLINE_IMAGES=real): the offline pip hubs
    (third_party/offline/repositories.bzl) list them as the images' wheels.
    """
    command = [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps",
               "--require-hashes", "--wheel-dir", dest, "-r", lock]
    if not pip_find_links():
        command += ["--extra-index-url", TORCH_CPU_INDEX]
    # A machine-wide constraints file (pip config) must not veto a hashed lock.
    subprocess.run(command, check=True, env={**os.environ, "PIP_CONSTRAINT": ""})


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--wheels", nargs=2, metavar=("LOCK", "DEST"), required=True,
                        help="download the wheels of LOCK into DEST")
    args = parser.parse_args(argv)
    download_wheels(*args.wheels)


if __name__ == "__main__":
    main()
