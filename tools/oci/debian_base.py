"""The Python base of the training images made from pinned Debian packages.

Offline (Bazel 4.2.3) the pulled `python:3.11-slim` base cannot be had, so
`./bazelw` builds runnable images (G4_OFFLINE_IMAGES=real, docs/build.md, "Images") on
a base of its own: Debian bookworm's CPython 3.11 and the shared libraries it,
jaxlib and torch load, unpacked from the .deb files that python_base_debs.txt
pins by URL and sha256. No maintainer script runs: the files are the packages'
data, plus /usr/bin/python3 and /bin/sh where no package wrote them.

    python3 tools/oci/debian_base.py update      # re-pin from this machine's apt
    python3 tools/oci/debian_base.py fetch DIR   # download and check the .debs
    python3 tools/oci/debian_base.py layer --debs DIR --out L.tar.gz

The online base (docker.io/library/python 3.11.13-slim) is CPython built from
source under /usr/local; this one is Debian's build under /usr (3.11.2). Both
are CPython 3.11 on glibc for linux/amd64 with `python3` on PATH, which is what
the image's layers need (//tests:training_image_test runs one).
"""

import argparse
import os
import sys

# Run as a script (by the offline base repository), the checkout is not on sys.path.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, os.pardir))
from tools import debs  # pylint: disable=wrong-import-position
from tools.oci import ocibuild  # pylint: disable=wrong-import-position

LOCK = os.path.join(os.path.dirname(os.path.abspath(__file__)), "python_base_debs.txt")
# The interpreter, the libraries of its standard library, the C++ runtime of
# jaxlib and torch, and a shell. Their other dependencies (dpkg, perl, debconf)
# are for installing packages, which an image does not do.
PACKAGES = (
    "python3.11-minimal", "libpython3.11-minimal", "libpython3.11-stdlib", "python3-minimal",
    "media-types", "libc6", "libgcc-s1", "gcc-12-base", "libstdc++6", "zlib1g", "libexpat1",
    "libssl3", "libffi8", "libbz2-1.0", "liblzma5", "libzstd1", "libsqlite3-0", "libuuid1",
    "libncursesw6", "libtinfo6", "libreadline8", "readline-common", "libcrypt1", "libdb5.3",
    "libgdbm6", "libnsl2", "libtirpc3", "libtirpc-common", "libgssapi-krb5-2", "libkrb5-3",
    "libk5crypto3", "libkrb5support0", "libkeyutils1", "libcom-err2", "dash",
)
# Links a package's maintainer script would make (dash's postinst makes /bin/sh).
LINKS = {"usr/bin/python3": "python3.11", "bin/sh": "dash"}


BaseError = debs.DebError


def read_lock(path=LOCK):
    """[(package, url, sha256)] of the lock file."""
    return debs.read_lock(path)


def update(path=LOCK):
    """Pins each package's candidate on this machine's apt sources (Debian 12)."""
    debs.pin(PACKAGES, path, ["Debian bookworm packages of the offline Python base "
                              "(tools/oci/debian_base.py", "update)."])


def fetch(dest, path=LOCK):
    """Downloads every pinned .deb into `dest` (kept if present and intact)."""
    debs.fetch(dest, path, "run `python3 tools/oci/debian_base.py update`")


def build_layer(debs_dir, out, path=LOCK):
    layer = ocibuild.Layer()
    for package, url, _ in read_lock(path):
        with debs.deb_data(os.path.join(debs_dir, debs.filename(url))) as tar:
            for member in tar.getmembers():
                name = debs.relative(member.name)
                if not name or member.isdir():
                    continue
                if name.startswith(("usr/share/doc/", "usr/share/man/", "usr/share/lintian/")):
                    continue
                if member.issym():
                    layer.add_link(name, member.linkname)
                elif member.islnk():
                    target = debs.relative(member.linkname)
                    layer.add(name, *layer.files[ocibuild.normalize(target)])
                elif member.isfile():
                    layer.add(name, tar.extractfile(member).read(),
                              executable=bool(member.mode & 0o111))
    for name, target in LINKS.items():
        if name not in layer.files and name not in layer.links:
            layer.add_link(name, target)
    ocibuild.write_layer(out, layer)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("update")
    fetch_args = commands.add_parser("fetch")
    fetch_args.add_argument("dest")
    layer_args = commands.add_parser("layer")
    layer_args.add_argument("--debs", required=True)
    layer_args.add_argument("--out", required=True)
    layer_args.add_argument("--lock", default=LOCK)
    args = parser.parse_args()
    try:
        if args.command == "update":
            update()
        elif args.command == "fetch":
            fetch(args.dest)
        else:
            build_layer(args.debs, args.out, args.lock)
    except (BaseError, ocibuild.BuildError) as e:
        raise SystemExit(f"error: {e}") from None


if __name__ == "__main__":
    main()
