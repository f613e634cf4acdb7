"""Debian packages pinned by URL and sha256: the lock files, download, unpack.

A lock file holds one `PACKAGE URL SHA256` line per package (comments with #).
Used by the offline Python base of the images (tools/oci/debian_base.py) and by
the test tools (tools/test_tools.py). Standard library only: repository rules
run it with the system python3.
"""

import hashlib
import io
import os
import posixpath
import re
import shutil
import subprocess
import tarfile
import urllib.parse
import urllib.request


class DebError(Exception):
    pass


def read_lock(path):
    """[(package, url, sha256)] of a lock file."""
    entries = []
    with open(path) as f:
        for number, line in enumerate(f, 1):
            if line.strip() and not line.startswith("#"):
                fields = line.split()
                if len(fields) != 3 or not re.fullmatch(r"[0-9a-f]{64}", fields[2]):
                    raise DebError(f"{path}:{number}: expected PACKAGE URL SHA256")
                entries.append(tuple(fields))
    return entries


def pin(packages, path, header):
    """Writes `path`: each package's candidate on this machine's apt sources."""
    lines = [f"# {line}" for line in header] + ["# PACKAGE URL SHA256"]
    for package in packages:
        out = subprocess.run(["apt-get", "download", "--print-uris", "-qq", package],
                             check=True, capture_output=True, text=True).stdout
        match = re.match(r"'(\S+)' \S+ \d+ SHA256:([0-9a-f]{64})", out.strip())
        if not match:
            raise DebError(f"apt-get download --print-uris {package}: {out!r}")
        lines.append(f"{package} {match.group(1)} {match.group(2)}")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def filename(url):
    return urllib.parse.unquote(posixpath.basename(url))


def sha256(path):
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def fetch(dest, lock, repin_hint):
    """Downloads every .deb of `lock` into `dest` (kept if present and intact);
    returns their paths in lock order."""
    os.makedirs(dest, exist_ok=True)
    paths = []
    for package, url, digest in read_lock(lock):
        target = os.path.join(dest, filename(url))
        paths.append(target)
        if os.path.exists(target) and sha256(target) == digest:
            continue
        try:
            with urllib.request.urlopen(url, timeout=120) as response, \
                    open(target + ".tmp", "wb") as f:
                shutil.copyfileobj(response, f)
        except OSError as e:
            raise DebError(f"{package}: cannot download {url} ({e}); if Debian has moved "
                           f"past this version, {repin_hint}") from e
        if sha256(target + ".tmp") != digest:
            os.remove(target + ".tmp")
            raise DebError(f"{package}: {url} does not match its sha256 in {lock}")
        os.replace(target + ".tmp", target)
    return paths


def deb_data(deb):
    """The data.tar.* member of a .deb (an `ar` archive), as an open tarfile."""
    with open(deb, "rb") as f:
        blob = f.read()
    if not blob.startswith(b"!<arch>\n"):
        raise DebError(f"{deb}: not a Debian package")
    offset = 8
    while offset + 60 <= len(blob):
        header = blob[offset:offset + 60]
        name = header[:16].decode().strip().rstrip("/")
        size = int(header[48:58].decode().strip())
        body = blob[offset + 60:offset + 60 + size]
        if name.startswith("data.tar"):
            if name.endswith(".zst"):
                raise DebError(f"{deb}: zstd-compressed data is not supported")
            return tarfile.open(fileobj=io.BytesIO(body), mode="r:*")
        offset += 60 + size + (size % 2)
    raise DebError(f"{deb}: no data.tar member")


def relative(name):
    """A member path (`./usr/bin/x`) relative to the package root; refused if it
    leaves the root."""
    clean = posixpath.normpath(name)
    if clean.startswith("/") or clean == ".." or clean.startswith("../"):
        raise DebError(f"member {name!r} leaves the package root")
    return "" if clean == "." else clean


def unpack(deb, root):
    """Extracts a .deb's files (its data, no maintainer script) under `root`."""
    with deb_data(deb) as tar:
        for member in tar.getmembers():
            name = relative(member.name)
            if not name:
                continue
            path = os.path.join(root, name)
            if member.isdir():
                os.makedirs(path, exist_ok=True)
                continue
            os.makedirs(os.path.dirname(path), exist_ok=True)
            if os.path.lexists(path):
                os.remove(path)
            if member.issym():
                os.symlink(member.linkname, path)
            elif member.islnk():
                shutil.copy2(os.path.join(root, relative(member.linkname)), path)
            elif member.isfile():
                with tar.extractfile(member) as src, open(path, "wb") as out:
                    shutil.copyfileobj(src, out)
                os.chmod(path, 0o755 if member.mode & 0o111 else 0o644)
