"""Builds the project's virtualenvs from their lock files, only when a lock changed.

Run by ./bazelw with the system python3 before Bazel starts (standard library
only). A virtualenv `.venvs/NAME` is built from `third_party/requirements/NAME_lock.txt`,
or from the locks LOCKS_OF names (a lock and the overlay installed with it). It is
complete once its stamp file holds the hash of the locks, site files and
interpreter it was built from; anything else (no stamp, another lock, an
interrupted install) is rebuilt from scratch.

    python3 tools/venvs.py train serve     # ensure both, print their pythons

The training stacks' runtime follows the machine (tools/accelerator.py, README
"Runtimes"): `train` (torch+cpu), `train_tpu` (the same with libtpu) or
`train_gpu` (CUDA torch). `libtpu` holds libtpu alone, for compiling the TPU step
ahead of time on any machine (training/tpu/aot.py).
"""

import argparse
import hashlib
import os
import shutil
import subprocess
import sys

# Run as a script, this file's folder is on sys.path, not the checkout's.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir))
from common import repo  # pylint: disable=wrong-import-position
from tools import accelerator  # pylint: disable=wrong-import-position

ROOT = repo.source_root()
LOCKS = os.path.join(ROOT, "third_party", "requirements")
VENVS = os.path.join(ROOT, ".venvs")
STAMP = ".lock.sha256"
# Files of tools/venv_site/ copied into a virtualenv's site-packages after its
# install: the `serve` one imports PyPI's torchvision beside its CPU torch.
SITE = os.path.join(ROOT, "tools", "venv_site")
SITE_FILES = {"serve": ("g4_torchvision_cpu.py", "g4_torchvision_cpu.pth")}
# Virtualenvs not built from their namesake lock alone: name -> locks, in order.
LOCKS_OF = {
    "train_tpu": ("train", "train_tpu"),  # train_tpu_lock.txt is an overlay: libtpu
    "libtpu": ("train_tpu",),
}
# The training runtime on each accelerator (tools/accelerator.py).
TRAIN_VENVS = {"cpu": "train", "tpu": "train_tpu", "gpu": "train_gpu"}
# The CPU build of torch that the locks pin (`+cpu`) lives on the PyTorch index,
# unless pip is configured with local find-links that hold it (CI machines).
TORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"


def lock_path(name):
    return os.path.join(LOCKS, f"{name}_lock.txt")


def venv_path(name):
    return os.path.join(VENVS, name)


def locks_of(name):
    return [lock_path(lock) for lock in LOCKS_OF.get(name, (name,))]


def wanted_stamp(name, base_python=sys.executable):
    digest = hashlib.sha256()
    for path in [*locks_of(name), *(os.path.join(SITE, f) for f in SITE_FILES.get(name, ()))]:
        with open(path, "rb") as f:
            digest.update(f.read())
    version = subprocess.run(
        [base_python, "-c", "import sys; print(sys.version)"],
        check=True, capture_output=True, text=True).stdout
    digest.update(version.encode())
    return digest.hexdigest()


def is_current(name, stamp):
    try:
        with open(os.path.join(venv_path(name), STAMP)) as f:
            return f.read().strip() == stamp
    except FileNotFoundError:
        return False


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


def _create(path, base_python):
    if os.path.exists(path):
        shutil.rmtree(path)
    subprocess.run([base_python, "-m", "venv", path], check=True)


def uv_binary():
    """The pinned uv installer, itself installed by hash into .venvs/uv."""
    stamp = wanted_stamp("uv")
    path = venv_path("uv")
    if not is_current("uv", stamp):
        _log("installing the pinned uv installer")
        _create(path, sys.executable)
        subprocess.run(
            [os.path.join(path, "bin", "python"), "-m", "pip", "install",
             "--quiet", "--require-hashes", "--no-deps", "-r", lock_path("uv")],
            check=True)
        _write_stamp(path, stamp)
    return os.path.join(path, "bin", "uv")


def _write_stamp(path, stamp):
    tmp = os.path.join(path, STAMP + ".tmp")
    with open(tmp, "w") as f:
        f.write(stamp + "\n")
    os.replace(tmp, os.path.join(path, STAMP))


def ensure(name, base_python=sys.executable):
    """Returns the venv's python, building the venv first if its lock changed."""
    locks = locks_of(name)
    missing = [lock for lock in locks if not os.path.exists(lock)]
    if missing:
        raise SystemExit(f"no lock file {missing[0]}")
    path = venv_path(name)
    python = os.path.join(path, "bin", "python3")
    stamp = wanted_stamp(name, base_python)
    if is_current(name, stamp):
        return python
    _log(f"building .venvs/{name} from "
         f"{' + '.join(os.path.relpath(lock, ROOT) for lock in locks)}")
    uv = uv_binary()
    _create(path, base_python)
    command = [uv, "pip", "install", "--python", python, "--require-hashes", "--no-deps"]
    for lock in locks:
        command += ["-r", lock]
    find_links = pip_find_links()
    if find_links:
        for link in find_links:
            command += ["--find-links", link]
    else:
        command += ["--extra-index-url", TORCH_CPU_INDEX,
                    "--index-strategy", "unsafe-best-match"]
    subprocess.run(command, check=True)
    if SITE_FILES.get(name):
        site = subprocess.run(
            [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            check=True, capture_output=True, text=True).stdout.strip()
        for file in SITE_FILES[name]:
            shutil.copy(os.path.join(SITE, file), site)
    _write_stamp(path, stamp)
    _log(f".venvs/{name} is ready")
    return python


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
    parser.add_argument("names", nargs="*", help="virtualenvs, e.g. train serve; `train@` "
                        "names the training runtime of this machine's accelerator")
    parser.add_argument("--wheels", nargs=2, metavar=("LOCK", "DEST"),
                        help="download the wheels of LOCK into DEST instead")
    args = parser.parse_args(argv)
    if args.wheels:
        download_wheels(*args.wheels)
        return
    for name in args.names:
        if name == "train@":
            name = TRAIN_VENVS[accelerator.detect()]
        print(ensure(name))


if __name__ == "__main__":
    main()
