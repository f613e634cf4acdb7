"""The Debian tools the tests run, from pinned packages: Icarus Verilog and bubblewrap.

The `test_tools` repository (tools/pinned.bzl, both Bazel modes) runs this with
the system python3 (standard library only):

    python3 tools/test_tools.py install --out DIR   # download, check, unpack
    python3 tools/test_tools.py update              # re-pin from this machine's apt

It downloads the .deb files test_tools_debs.txt pins by URL and sha256, unpacks
their data under DIR/root (no maintainer script runs), and writes DIR/bin/NAME
for each tool: a small shell wrapper that runs the unpacked binary with its
support files where the package placed them (iverilog's compiler stages,
vvp's modules and libreadline). A wrapper finds its package folder from its
own real path, so it runs from any runfiles tree and inside the evaluation's
sandbox (eval/sandbox.py binds the folder read-only).
"""

import argparse
import os
import shutil
import sys

# Run as a script, this file's folder is on sys.path, not the checkout's.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir))
from tools import debs  # pylint: disable=wrong-import-position

LOCK = os.path.join(os.path.dirname(os.path.abspath(__file__)), "test_tools_debs.txt")
# iverilog's own library, vvp's libreadline8 (not on every machine), bubblewrap.
PACKAGES = ("iverilog", "libreadline8", "bubblewrap")
_IVL = "usr/lib/x86_64-linux-gnu/ivl"
_LIBRARY_DIRS = ("lib/x86_64-linux-gnu", "usr/lib/x86_64-linux-gnu")
# Tool -> (binary under root, arguments put first).
TOOLS = {
    "iverilog": ("usr/bin/iverilog", ["-B$root/" + _IVL]),
    "vvp": ("usr/bin/vvp", ["-M$root/" + _IVL]),
    "bwrap": ("usr/bin/bwrap", []),
}

_WRAPPER = """#!/bin/sh
# {name} from the pinned Debian package (tools/test_tools.py); $0 may be a link.
root="$(dirname "$(dirname "$(readlink -f "$0")")")/root"
LD_LIBRARY_PATH="{library_path}${{LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}}" \\
  exec "$root/{binary}" {args}"$@"
"""


def wrapper(name):
    binary, args = TOOLS[name]
    return _WRAPPER.format(
        name=name, binary=binary,
        library_path=":".join(f"$root/{d}" for d in _LIBRARY_DIRS),
        args="".join(f'"{a}" ' for a in args))


def install(out, lock=LOCK):
    """Fetches and unpacks the pinned packages into `out`; writes bin/ and BUILD."""
    paths = debs.fetch(os.path.join(out, "debs"), lock,
                       "run `python3 tools/test_tools.py update`")
    root = os.path.join(out, "root")
    if os.path.exists(root):
        shutil.rmtree(root)
    for path in paths:
        debs.unpack(path, root)
    bin_dir = os.path.join(out, "bin")
    os.makedirs(bin_dir, exist_ok=True)
    for name, (binary, _) in TOOLS.items():
        if not os.path.isfile(os.path.join(root, binary)):
            raise debs.DebError(f"{binary} is in none of the packages of {lock}")
        with open(os.path.join(bin_dir, name), "w") as f:
            f.write(wrapper(name))
        os.chmod(os.path.join(bin_dir, name), 0o755)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    install_args = commands.add_parser("install")
    install_args.add_argument("--out", required=True)
    commands.add_parser("update")
    args = parser.parse_args(argv)
    try:
        if args.command == "update":
            debs.pin(PACKAGES, LOCK, ["Debian bookworm packages of the test tools "
                                      "(tools/test_tools.py update)."])
        else:
            install(args.out)
    except debs.DebError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
