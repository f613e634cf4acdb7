"""A small deterministic OCI image builder (standard library only).

Subcommands run by the Bazel rules in tools/oci/defs.bzl (both modes) and by the
offline stand-in of rules_oci (third_party/offline/rules_oci):

    ocibuild.py layer --out L.tar.gz [--files LIST] [--wheel W.whl ...]
    ocibuild.py labels --out F --status stable-status.txt [--lock NAME=PATH ...]
    ocibuild.py image --out DIR [--base DIR] --layer L.tar.gz ... [--entrypoint JSON] ...

The same inputs give the same bytes on any machine with the same zlib:
  * tar: entries sorted by path, parents before children, mtime 0, uid/gid 0,
    no user or group names, GNU format (long names without pax timestamps),
    modes normalised to 0755 (directories, executables) or 0644;
  * gzip: header mtime 0, no file name, fixed compression level;
  * JSON: keys sorted, no spaces; the image's `created` and its history dates are
    the epoch.
A wheel is installed into a layer by unpacking it as an installer would
(`*.data/purelib` and `platlib` into site-packages, `scripts` into bin).
"""

import argparse
import gzip
import hashlib
import io
import json
import os
import posixpath
import re
import shutil
import sys
import tarfile
import zipfile
import zlib

EPOCH = "1970-01-01T00:00:00Z"
LAYER_MEDIA_TYPE = "application/vnd.oci.image.layer.v1.tar+gzip"
CONFIG_MEDIA_TYPE = "application/vnd.oci.image.config.v1+json"
MANIFEST_MEDIA_TYPE = "application/vnd.oci.image.manifest.v1+json"
INDEX_MEDIA_TYPE = "application/vnd.oci.image.index.v1+json"
GZIP_LEVEL = 6


class BuildError(Exception):
    """Input the builder refuses (named precisely)."""


def canonical_json(value):
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def sha256_digest(data):
    return "sha256:" + hashlib.sha256(data).hexdigest()


# ----------------------------------------------------------------------------- layers

def normalize(path):
    """A path inside the image -> its tar name (no leading /; `..` stops at the root)."""
    clean = posixpath.normpath("/" + path).lstrip("/")
    if not clean:
        raise BuildError(f"path {path!r} does not name a file inside the image")
    return clean


def _file_mode(executable):
    return 0o755 if executable else 0o644


CHUNK = 1 << 20  # bytes read and written at a time: a layer never sits in memory whole


class Bytes:
    """A file's content held in memory (small files: scripts, labels, tests)."""

    def __init__(self, data):
        self.data = data
        self.size = len(data)

    def open(self):
        return io.BytesIO(self.data)


class FileSource:
    """A file on disk, read when the layer is written."""

    def __init__(self, path):
        self.path = path
        self.size = os.path.getsize(path)

    def open(self):
        return open(self.path, "rb")


class WheelMember:
    """A member of an open wheel, decompressed when the layer is written."""

    def __init__(self, archive, info):
        self.archive = archive
        self.info = info
        self.size = info.file_size

    def open(self):
        return self.archive.open(self.info)


def _as_source(data):
    return Bytes(data) if isinstance(data, (bytes, bytearray)) else data


def _stream_digest(f):
    """"sha256:..." of what file object `f` reads, chunk by chunk."""
    hasher = hashlib.sha256()
    for chunk in iter(lambda: f.read(CHUNK), b""):
        hasher.update(chunk)
    return "sha256:" + hasher.hexdigest()


def _same_content(a, b):
    if a.size != b.size:
        return False
    with a.open() as fa, b.open() as fb:
        return _stream_digest(fa) == _stream_digest(fb)


class Layer:
    """The files of one layer: image path -> (source, executable), where a source
    has `size` and `open()` (Bytes, FileSource, WheelMember); symbolic links:
    image path -> target. Contents are read only while the layer is written, one
    chunk at a time, so a layer of many GB is built in bounded memory."""

    def __init__(self):
        self.files = {}
        self.links = {}
        self._archives = []

    def add_link(self, path, target):
        name = normalize(path)
        if self.links.get(name, target) != target:
            raise BuildError(f"{path}: two different link targets in the layer")
        self.links[name] = target

    def add(self, path, data, executable=False):
        """`data`: bytes or a source."""
        name = normalize(path)
        source = _as_source(data)
        if name in self.files and not _same_content(self.files[name][0], source):
            raise BuildError(f"{path}: two different files for one path in the layer")
        self.files[name] = (source, executable)

    def add_file(self, path, source):
        self.add(path, FileSource(source), executable=os.access(source, os.X_OK))

    def add_wheel(self, wheel, site_packages, bin_dir, data_dir):
        """Installs `wheel` as pip would lay it out (no compiled .pyc, no INSTALLER)."""
        try:
            archive = zipfile.ZipFile(wheel)
        except (OSError, zipfile.BadZipFile) as e:
            raise BuildError(f"{wheel}: not a wheel ({e})") from e
        self._archives.append(archive)  # open until the layer is written
        targets = {"purelib": site_packages, "platlib": site_packages,
                   "scripts": bin_dir, "data": data_dir}
        for info in archive.infolist():
            if info.is_dir():
                continue
            parts = info.filename.split("/")
            if info.filename.startswith("/") or ".." in parts:
                raise BuildError(f"{wheel}: member {info.filename!r} leaves the wheel")
            top, _, rest = info.filename.partition("/")
            if top.endswith(".data"):
                kind, _, inner = rest.partition("/")
                if kind == "headers":
                    continue
                if kind not in targets:
                    raise BuildError(f"{wheel}: unknown wheel data directory {kind!r}")
                path = posixpath.join(targets[kind], inner)
            else:
                path = posixpath.join(site_packages, info.filename)
            is_script = top.endswith(".data") and rest.startswith("scripts/")
            source = WheelMember(archive, info)
            if is_script:
                data = archive.read(info)  # scripts are small; the placeholder is rewritten
                if data.startswith(b"#!python"):
                    # The installer's job: point a script's placeholder at the interpreter.
                    data = b"#!/usr/bin/env python3" + data[len(b"#!python"):]
                source = Bytes(data)
            executable = is_script or bool((info.external_attr >> 16) & 0o111)
            self.add(path, source, executable)

    def close(self):
        for archive in self._archives:
            archive.close()
        self._archives = []

    def write_tar(self, out):
        """Writes the uncompressed tar to file object `out`: parents first, every
        entry normalised, each file's content streamed."""
        names = set(self.files) | set(self.links)
        directories = set()
        for name in names:
            parent = posixpath.dirname(name)
            while parent:
                directories.add(parent)
                parent = posixpath.dirname(parent)
        clashes = sorted((directories & names) | (set(self.files) & set(self.links)))
        if clashes:
            raise BuildError(f"{clashes[0]}: both a file and a directory in the layer")
        with tarfile.open(fileobj=out, mode="w", format=tarfile.GNU_FORMAT,
                          copybufsize=CHUNK) as tar:
            for name in sorted(names | directories):
                info = tarfile.TarInfo(name)
                info.mtime = 0
                info.uid = info.gid = 0
                info.uname = info.gname = ""
                if name in directories:
                    info.type = tarfile.DIRTYPE
                    info.mode = 0o755
                    tar.addfile(info)
                elif name in self.links:
                    info.type = tarfile.SYMTYPE
                    info.linkname = self.links[name]
                    info.mode = 0o777
                    tar.addfile(info)
                else:
                    source, executable = self.files[name]
                    info.size = source.size
                    info.mode = _file_mode(executable)
                    with source.open() as f:
                        tar.addfile(info, f)

    def tar_bytes(self):
        """The uncompressed tar in memory (small layers and tests)."""
        out = io.BytesIO()
        self.write_tar(out)
        return out.getvalue()


def gzip_writer(raw):
    """A deterministic gzip stream over file object `raw` (mtime 0, no file name)."""
    return gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0, compresslevel=GZIP_LEVEL)


def gzip_bytes(data):
    out = io.BytesIO()
    with gzip_writer(out) as f:
        f.write(data)
    return out.getvalue()


def read_file_list(path):
    """`IMAGE_PATH<TAB>SOURCE` lines (written by the Bazel rules)."""
    pairs = []
    with open(path) as f:
        for number, line in enumerate(f, 1):
            line = line.rstrip("\n")
            if not line:
                continue
            if line.count("\t") != 1:
                raise BuildError(f"{path}:{number}: expected IMAGE_PATH<TAB>SOURCE")
            pairs.append(tuple(line.split("\t")))
    return pairs


def build_layer(out, file_lists=(), wheels=(), site_packages="", bin_dir="", data_dir=""):
    layer = Layer()
    for file_list in file_lists:
        for path, source in read_file_list(file_list):
            layer.add_file(path, source)
    for wheel in wheels:
        if not site_packages:
            raise BuildError("--wheel needs --site_packages")
        layer.add_wheel(wheel, site_packages, bin_dir or posixpath.join(site_packages, "../bin"),
                        data_dir or posixpath.dirname(site_packages))
    write_layer(out, layer)


def write_layer(out, layer):
    """Writes `layer` gzip-compressed to path `out`, streaming; no partial file is
    left behind (written under a temporary name, renamed when complete)."""
    tmp = out + ".tmp"
    try:
        with open(tmp, "wb") as raw, gzip_writer(raw) as compressed:
            layer.write_tar(compressed)
        os.replace(tmp, out)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise
    finally:
        layer.close()


# ----------------------------------------------------------------------------- images

def _write_atomic(path, data):
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


class Layout:
    """An OCI image layout on disk with exactly one image manifest."""

    def __init__(self, root):
        self.root = root

    def blob_path(self, digest):
        algorithm, _, hexdigest = digest.partition(":")
        return os.path.join(self.root, "blobs", algorithm, hexdigest)

    def read_blob(self, digest):
        try:
            with open(self.blob_path(digest), "rb") as f:
                data = f.read()
        except FileNotFoundError as e:
            raise BuildError(f"{self.root}: blob {digest} is missing") from e
        if sha256_digest(data) != digest:
            raise BuildError(f"{self.root}: blob {digest} does not match its digest")
        return data

    def copy_blob(self, source, digest=None):
        """Copies the file `source` in as a blob, chunk by chunk; returns its
        descriptor. With `digest`, the copy must have it (a base's blob checked)."""
        blobs = os.path.join(self.root, "blobs", "sha256")
        os.makedirs(blobs, exist_ok=True)
        tmp = os.path.join(blobs, ".incoming")
        hasher, size = hashlib.sha256(), 0
        with open(source, "rb") as f, open(tmp, "wb") as out:
            for chunk in iter(lambda: f.read(CHUNK), b""):
                hasher.update(chunk)
                size += len(chunk)
                out.write(chunk)
        actual = "sha256:" + hasher.hexdigest()
        if digest and actual != digest:
            os.remove(tmp)
            raise BuildError(f"{source}: blob {digest} does not match its digest")
        os.replace(tmp, self.blob_path(actual))
        return {"digest": actual, "size": size}

    def write_blob(self, data):
        digest = sha256_digest(data)
        path = self.blob_path(digest)
        if not os.path.exists(path):
            os.makedirs(os.path.dirname(path), exist_ok=True)
            _write_atomic(path, data)
        return {"digest": digest, "size": len(data)}

    def manifest(self):
        """(manifest digest, manifest, config) of the layout's one image."""
        try:
            with open(os.path.join(self.root, "index.json"), "rb") as f:
                index = json.loads(f.read())
        except (OSError, ValueError) as e:
            raise BuildError(f"{self.root}: not an OCI image layout ({e})") from e
        manifests = index.get("manifests", [])
        if len(manifests) != 1 or manifests[0].get("mediaType") != MANIFEST_MEDIA_TYPE:
            raise BuildError(f"{self.root}: expected exactly one image manifest in index.json")
        digest = manifests[0]["digest"]
        manifest = json.loads(self.read_blob(digest))
        config = json.loads(self.read_blob(manifest["config"]["digest"]))
        return digest, manifest, config


def _merge_env(base_env, extra):
    """The base's environment with `extra` (NAME=VALUE) set; `$NAME` and `${NAME}`
    in a value expand to the base's value, as rules_oci does (`PATH=/x:$PATH`)."""
    env = dict(item.split("=", 1) for item in base_env)
    for item in extra:
        if "=" not in item:
            raise BuildError(f"--env {item!r}: expected NAME=VALUE")
        key, value = item.split("=", 1)
        env[key] = re.sub(r"\$\{(\w+)\}|\$(\w+)",
                          lambda m: env.get(m.group(1) or m.group(2), ""), value)
    return [f"{k}={v}" for k, v in env.items()]


def read_labels(path):
    labels = {}
    with open(path) as f:
        for number, line in enumerate(f, 1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            if "=" not in line:
                raise BuildError(f"{path}:{number}: expected KEY=VALUE")
            key, value = line.split("=", 1)
            labels[key] = value
    return labels


def _diff_id(path):
    """The sha256 of a gzip-compressed layer's tar, decompressed chunk by chunk."""
    try:
        with gzip.open(path, "rb") as f:
            return _stream_digest(f)
    except (OSError, EOFError, zlib.error) as e:
        raise BuildError(f"{path}: not a gzip-compressed layer ({e})") from e


def build_image(out, layers, base=None, entrypoint=None, cmd=None, env=(), workdir=None,
                labels=None, expect_digest=None, created_by="ocibuild"):
    """Writes the OCI layout `out` (a directory, replaced) and returns its manifest digest."""
    if os.path.exists(out):
        shutil.rmtree(out)
    layout = Layout(out)
    os.makedirs(out)
    if base:
        base_layout = Layout(base)
        _, base_manifest, config = base_layout.manifest()
        layer_descriptors = []
        for descriptor in base_manifest["layers"]:
            path = base_layout.blob_path(descriptor["digest"])
            if not os.path.exists(path):
                raise BuildError(f"{base}: blob {descriptor['digest']} is missing")
            layout.copy_blob(path, descriptor["digest"])
            layer_descriptors.append(descriptor)
    else:
        config = {"architecture": "amd64", "os": "linux", "config": {},
                  "rootfs": {"type": "layers", "diff_ids": []}, "history": []}
        layer_descriptors = []
    config = json.loads(json.dumps(config))  # a copy
    settings = config.setdefault("config", {})
    for path in layers:
        diff_id = _diff_id(path)
        descriptor = {"mediaType": LAYER_MEDIA_TYPE, **layout.copy_blob(path)}
        layer_descriptors.append(descriptor)
        config["rootfs"]["diff_ids"].append(diff_id)
        config.setdefault("history", []).append(
            {"created": EPOCH, "created_by": f"{created_by}: {os.path.basename(path)}"})
    if entrypoint is not None:
        settings["Entrypoint"] = entrypoint
        settings.pop("Cmd", None)  # a base's arguments belong to the base's entrypoint
    if cmd is not None:
        settings["Cmd"] = cmd
    if env:
        settings["Env"] = _merge_env(settings.get("Env", []), env)
    if workdir:
        settings["WorkingDir"] = workdir
    if labels:
        settings["Labels"] = {**settings.get("Labels", {}), **labels}
    config["created"] = EPOCH
    config_descriptor = {"mediaType": CONFIG_MEDIA_TYPE,
                         **layout.write_blob(canonical_json(config))}
    manifest = {"schemaVersion": 2, "mediaType": MANIFEST_MEDIA_TYPE,
                "config": config_descriptor, "layers": layer_descriptors}
    manifest_descriptor = {"mediaType": MANIFEST_MEDIA_TYPE,
                           **layout.write_blob(canonical_json(manifest))}
    index = {"schemaVersion": 2, "mediaType": INDEX_MEDIA_TYPE,
             "manifests": [manifest_descriptor]}
    _write_atomic(os.path.join(out, "index.json"), canonical_json(index))
    _write_atomic(os.path.join(out, "oci-layout"), canonical_json({"imageLayoutVersion": "1.0.0"}))
    digest = manifest_descriptor["digest"]
    if expect_digest and digest != expect_digest:
        raise BuildError(
            f"{out}: the image's digest is {digest}, but {expect_digest} is pinned; "
            "its inputs changed (update the pin only if that change is intended)")
    return digest


# ----------------------------------------------------------------------------- labels

LABEL_PREFIX = "dev.gemma4-toolkit"


def _normalize_package(name):
    return re.sub(r"[-_.]+", "-", name).lower()


def lock_versions(path):
    """{normalized package name: version} of a lock file's `name==version` lines."""
    versions = {}
    with open(path) as f:
        for line in f:
            match = re.match(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(\[[^]]*\])?==([^\s;\\]+)", line)
            if match:
                versions[_normalize_package(match.group(1))] = match.group(3)
    return versions


def build_labels(status_file, locks=(), packages=(), extra=()):
    """Image labels: the source commit, each lock's hash, package versions, `extra`.

    `status_file` is Bazel's stable-status.txt (tools/workspace_status.sh writes
    STABLE_GIT_COMMIT); `locks` are NAME=PATH; each of `packages` must be pinned by
    one of the locks.
    """
    status = {}
    with open(status_file) as f:
        for line in f:
            key, _, value = line.rstrip("\n").partition(" ")
            status[key] = value
    labels = {"org.opencontainers.image.revision": status.get("STABLE_GIT_COMMIT", "unknown")}
    versions = {}
    for item in locks:
        name, _, path = item.partition("=")
        with open(path, "rb") as f:
            labels[f"{LABEL_PREFIX}.lock.{name}"] = sha256_digest(f.read())
        versions.update(lock_versions(path))
    for package in packages:
        version = versions.get(_normalize_package(package))
        if version is None:
            raise BuildError(f"{package} is in none of the locks {[l.split('=')[0] for l in locks]}")
        labels[f"{LABEL_PREFIX}.version.{_normalize_package(package)}"] = version
    for item in extra:
        key, sep, value = item.partition("=")
        if not sep:
            raise BuildError(f"--label {item!r}: expected KEY=VALUE")
        labels[key] = value
    return labels


# ----------------------------------------------------------------------------- CLI

def _parser():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    layer = commands.add_parser("layer", help="a deterministic .tar.gz layer")
    layer.add_argument("--out", required=True)
    layer.add_argument("--files", action="append", default=[],
                       help="file of IMAGE_PATH<TAB>SOURCE lines")
    layer.add_argument("--wheel", action="append", default=[], help="a wheel to install")
    layer.add_argument("--site_packages", default="")
    layer.add_argument("--bin_dir", default="")
    labels = commands.add_parser("labels", help="the image labels file")
    labels.add_argument("--out", required=True)
    labels.add_argument("--status", required=True, help="Bazel's stable-status.txt")
    labels.add_argument("--lock", action="append", default=[], help="NAME=PATH")
    labels.add_argument("--package", action="append", default=[],
                        help="a package whose locked version becomes a label")
    labels.add_argument("--label", action="append", default=[], help="KEY=VALUE")
    image = commands.add_parser("image", help="an OCI image layout")
    image.add_argument("--out", required=True)
    image.add_argument("--base", default=None, help="OCI layout of the base image")
    image.add_argument("--layer", action="append", default=[])
    image.add_argument("--entrypoint", default=None, help="JSON list")
    image.add_argument("--cmd", default=None, help="JSON list")
    image.add_argument("--env", action="append", default=[])
    image.add_argument("--workdir", default=None)
    image.add_argument("--labels", default=None, help="file of KEY=VALUE lines")
    image.add_argument("--expect_digest", default=None)
    image.add_argument("--digest_out", default=None, help="write the manifest digest here")
    return parser


def _json_list(text, flag):
    if text is None:
        return None
    value = json.loads(text)
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise BuildError(f"{flag} must be a JSON list of strings, got {text!r}")
    return value


def main(argv=None):
    args = _parser().parse_args(argv)
    try:
        if args.command == "layer":
            build_layer(args.out, args.files, args.wheel, args.site_packages, args.bin_dir)
        elif args.command == "labels":
            labels = build_labels(args.status, args.lock, args.package, args.label)
            _write_atomic(args.out, "".join(
                f"{k}={v}\n" for k, v in sorted(labels.items())).encode())
        else:
            digest = build_image(
                args.out, args.layer, base=args.base,
                entrypoint=_json_list(args.entrypoint, "--entrypoint"),
                cmd=_json_list(args.cmd, "--cmd"), env=args.env, workdir=args.workdir,
                labels=read_labels(args.labels) if args.labels else None,
                expect_digest=args.expect_digest)
            if args.digest_out:
                _write_atomic(args.digest_out, digest.encode() + b"\n")
    except BuildError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
