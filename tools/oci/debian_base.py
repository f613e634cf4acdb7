"""The Python base of the training images made from pinned Debian packages.

Offline (Bazel 4.2.3) the pulled `python:3.11-slim` base cannot be had, so
`./bazelw` builds runnable images (G4_OFFLINE_IMAGES=real, README "Images") on
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
import hashlib
import io
import os
import posixpath
import re
import subprocess
import sys
import tarfile
import urllib.parse
import urllib.request

# Run as a script (by the offline base repository), the checkout is not on sys.path.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, os.pardir))
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


class BaseError(Exception):
    pass


def read_lock(path=LOCK):
    """[(package, url, sha256)] of the lock file."""
    entries = []
    with open(path) as f:
        for line in f:
            if line.strip() and not line.startswith("#"):
                package, url, digest = line.split()
                entries.append((package, url, digest))
    return entries


def update(path=LOCK):
    """Pins each package's candidate on this machine's apt sources (Debian 12)."""
    lines = ["# Debian bookworm packages of the offline Python base (tools/oci/debian_base.py",
             "# update); PACKAGE URL SHA256."]
    for package in PACKAGES:
        out = subprocess.run(["apt-get", "download", "--print-uris", "-qq", package],
                             check=True, capture_output=True, text=True).stdout
        match = re.match(r"'(\S+)' \S+ \d+ SHA256:([0-9a-f]{64})", out.strip())
        if not match:
            raise BaseError(f"apt-get download --print-uris {package}: {out!r}")
        lines.append(f"{package} {match.group(1)} {match.group(2)}")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def fetch(dest, path=LOCK):
    """Downloads every pinned .deb into `dest` (kept if present and intact)."""
    os.makedirs(dest, exist_ok=True)
    for package, url, digest in read_lock(path):
        target = os.path.join(dest, filename(url))
        if os.path.exists(target) and _sha256(target) == digest:
            continue
        try:
            with urllib.request.urlopen(url, timeout=120) as response:
                data = response.read()
        except OSError as e:
            raise BaseError(f"{package}: cannot download {url} ({e}); if Debian has moved "
                            "past this version, run `python3 tools/oci/debian_base.py "
                            "update`") from e
        if hashlib.sha256(data).hexdigest() != digest:
            raise BaseError(f"{package}: {url} does not match its sha256 in {path}")
        with open(target + ".tmp", "wb") as f:
            f.write(data)
        os.replace(target + ".tmp", target)


def filename(url):
    return urllib.parse.unquote(posixpath.basename(url))


def _sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def deb_data(deb):
    """The data.tar.* member of a .deb (an `ar` archive), as an open tarfile."""
    with open(deb, "rb") as f:
        blob = f.read()
    if not blob.startswith(b"!<arch>\n"):
        raise BaseError(f"{deb}: not a Debian package")
    offset = 8
    while offset + 60 <= len(blob):
        header = blob[offset:offset + 60]
        name = header[:16].decode().strip().rstrip("/")
        size = int(header[48:58].decode().strip())
        body = blob[offset + 60:offset + 60 + size]
        if name.startswith("data.tar"):
            if name.endswith(".zst"):
                raise BaseError(f"{deb}: zstd-compressed data is not supported")
            return tarfile.open(fileobj=io.BytesIO(body), mode="r:*")
        offset += 60 + size + (size % 2)
    raise BaseError(f"{deb}: no data.tar member")


def build_layer(debs_dir, out, path=LOCK):
    layer = ocibuild.Layer()
    for package, url, _ in read_lock(path):
        with deb_data(os.path.join(debs_dir, filename(url))) as tar:
            for member in tar.getmembers():
                name = posixpath.normpath(member.name).lstrip("./")
                if not name or member.isdir():
                    continue
                if name.startswith(("usr/share/doc/", "usr/share/man/", "usr/share/lintian/")):
                    continue
                if member.issym():
                    layer.add_link(name, member.linkname)
                elif member.islnk():
                    target = posixpath.normpath(member.linkname).lstrip("./")
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
