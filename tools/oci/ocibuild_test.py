import gzip
import io
import json
import os
import tarfile
import tracemalloc
import zipfile

from absl.testing import absltest

from tools.oci import ocibuild


def _members(layer_path):
    with open(layer_path, "rb") as f:
        data = gzip.decompress(f.read())
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        return {m.name: (m, tar.extractfile(m).read() if m.isfile() else None)
                for m in tar.getmembers()}


class LayerTest(absltest.TestCase):

    def setUp(self):
        super().setUp()
        self.tmp = self.create_tempdir().full_path

    def _source(self, name, data, mode=0o644, mtime=0):
        path = os.path.join(self.tmp, name)
        with open(path, "wb") as f:
            f.write(data)
        os.chmod(path, mode)
        os.utime(path, (mtime, mtime))
        return path

    def _listing(self, name, pairs):
        path = os.path.join(self.tmp, name)
        with open(path, "w") as f:
            f.writelines(f"{dest}\t{src}\n" for dest, src in pairs)
        return path

    def test_same_files_give_the_same_bytes_whatever_their_order_times_and_umask(self):
        a = self._source("a", b"print(1)\n", 0o600, mtime=1_000)
        b = self._source("b", b"#!/bin/sh\n", 0o700, mtime=2_000)
        first = os.path.join(self.tmp, "1.tar.gz")
        ocibuild.build_layer(first, [self._listing("l1", [("/app/x/a.py", a), ("/app/b", b)])])
        os.chmod(a, 0o664)
        os.chmod(b, 0o775)
        os.utime(a, (9_999, 9_999))
        second = os.path.join(self.tmp, "2.tar.gz")
        ocibuild.build_layer(second, [self._listing("l2", [("/app/b", b), ("app/x/a.py", a)])])
        with open(first, "rb") as f, open(second, "rb") as g:
            first_bytes = f.read()
            self.assertEqual(first_bytes, g.read())
        self.assertEqual(first_bytes[4:8], b"\0\0\0\0")  # gzip mtime
        self.assertEqual(first_bytes[3] & 0x08, 0)  # no FNAME
        members = _members(first)
        self.assertEqual(list(members), ["app", "app/b", "app/x", "app/x/a.py"])
        for member, _ in members.values():
            self.assertEqual((member.mtime, member.uid, member.gid, member.uname, member.gname),
                             (0, 0, 0, "", ""))
            self.assertFalse(member.pax_headers)
        self.assertEqual(members["app"][0].mode, 0o755)
        self.assertEqual(members["app/b"][0].mode, 0o755)  # executable
        self.assertEqual(members["app/x/a.py"][0].mode, 0o644)
        self.assertEqual(members["app/x/a.py"][1], b"print(1)\n")

    def test_long_names_survive_without_pax_headers(self):
        src = self._source("f", b"x")
        name = "/opt/" + "/".join(["directory_with_a_long_name"] * 12) + "/file.py"
        out = os.path.join(self.tmp, "l.tar.gz")
        ocibuild.build_layer(out, [self._listing("l", [(name, src)])])
        self.assertIn(name.lstrip("/"), _members(out))

    def test_conflicts_and_escapes_are_refused(self):
        a = self._source("a", b"1")
        b = self._source("b", b"2")
        out = os.path.join(self.tmp, "l.tar.gz")
        for pairs, message in [
                ([("/x", a), ("/x", b)], "two different files"),
                ([("/x", a), ("/x/y", b)], "both a file and a directory"),
                ([("/", a)], "does not name a file inside")]:
            with self.assertRaisesRegex(ocibuild.BuildError, message):
                ocibuild.build_layer(out, [self._listing("l", pairs)])
        self.assertFalse(os.path.exists(out))
        # Paths are absolute inside the image: `..` cannot climb out of its root.
        self.assertEqual(ocibuild.normalize("../../etc/passwd"), "etc/passwd")
        bad = os.path.join(self.tmp, "bad")
        with open(bad, "w") as f:
            f.write("no tab here\n")
        with self.assertRaisesRegex(ocibuild.BuildError, "bad:1: expected IMAGE_PATH<TAB>SOURCE"):
            ocibuild.build_layer(out, [bad])

    def test_a_large_wheel_is_streamed_in_bounded_memory(self):
        """A 64 MiB member goes through a few MiB: read, tarred and compressed by the
        chunk (the GPU image's CUDA wheels hold members of GBs); the bytes are those
        of the layer built in memory."""
        size = 64 << 20
        wheel = os.path.join(self.tmp, "big-1.0-py3-none-any.whl")
        with zipfile.ZipFile(wheel, "w", compression=zipfile.ZIP_DEFLATED) as z:
            with z.open("big/blob.bin", "w", force_zip64=True) as f:
                for _ in range(size >> 20):
                    f.write(bytes(range(256)) * 4096)
            z.writestr("big/__init__.py", "")
        out = os.path.join(self.tmp, "big.tar.gz")
        tracemalloc.start()
        try:
            ocibuild.build_layer(out, wheels=[wheel], site_packages="/s")
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        self.assertLess(peak, 8 << 20)
        self.assertFalse(os.path.exists(out + ".tmp"))
        reference = ocibuild.Layer()
        reference.add_wheel(wheel, "/s", "/bin", "/")
        with open(out, "rb") as f:
            self.assertEqual(f.read(), ocibuild.gzip_bytes(reference.tar_bytes()))
        reference.close()
        image = os.path.join(self.tmp, "image")
        tracemalloc.start()
        try:
            ocibuild.build_image(image, [out])
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        self.assertLess(peak, 8 << 20)
        _, manifest, config = ocibuild.Layout(image).manifest()
        self.assertEqual(manifest["layers"][0]["size"], os.path.getsize(out))
        with gzip.open(out) as f:
            self.assertEqual(config["rootfs"]["diff_ids"],
                             [ocibuild.sha256_digest(f.read())])

    def test_wheels_are_installed_as_an_installer_lays_them_out(self):
        wheel = os.path.join(self.tmp, "demo-1.0-py3-none-any.whl")
        with zipfile.ZipFile(wheel, "w") as z:
            z.writestr("demo/__init__.py", "VALUE = 1\n")
            z.writestr("demo-1.0.dist-info/METADATA", "Name: demo\n")
            z.writestr("demo-1.0.data/purelib/demo_extra.py", "")
            z.writestr("demo-1.0.data/scripts/demo-cli", "#!python\nprint('hi')\n")
            z.writestr("demo-1.0.data/headers/demo.h", "")
            info = zipfile.ZipInfo("demo/tool.sh")
            info.external_attr = 0o755 << 16
            z.writestr(info, "#!/bin/sh\n")
        out = os.path.join(self.tmp, "w.tar.gz")
        ocibuild.build_layer(out, wheels=[wheel], site_packages="/opt/g4/site-packages",
                             bin_dir="/opt/g4/bin")
        members = _members(out)
        site = "opt/g4/site-packages/"
        for name in ("demo/__init__.py", "demo-1.0.dist-info/METADATA", "demo_extra.py"):
            self.assertIn(site + name, members)
        self.assertEqual(members["opt/g4/bin/demo-cli"][1], b"#!/usr/bin/env python3\nprint('hi')\n")
        self.assertEqual(members["opt/g4/bin/demo-cli"][0].mode, 0o755)
        self.assertEqual(members[site + "demo/tool.sh"][0].mode, 0o755)
        self.assertEqual(members[site + "demo/__init__.py"][0].mode, 0o644)
        self.assertFalse([n for n in members if n.endswith(".h")])
        evil = os.path.join(self.tmp, "evil-1.0-py3-none-any.whl")
        with zipfile.ZipFile(evil, "w") as z:
            z.writestr("demo/../../../etc/passwd", "x")
        with self.assertRaisesRegex(ocibuild.BuildError, "leaves the wheel"):
            ocibuild.build_layer(out, wheels=[evil], site_packages="/s")
        not_a_wheel = self._source("x.whl", b"not a zip")
        with self.assertRaisesRegex(ocibuild.BuildError, "x.whl: not a wheel"):
            ocibuild.build_layer(out, wheels=[not_a_wheel], site_packages="/s")


class ImageTest(absltest.TestCase):

    def setUp(self):
        super().setUp()
        self.tmp = self.create_tempdir().full_path
        src = os.path.join(self.tmp, "f")
        with open(src, "w") as f:
            f.write("hello\n")
        listing = os.path.join(self.tmp, "list")
        with open(listing, "w") as f:
            f.write(f"/etc/hello\t{src}\n")
        self.layer = os.path.join(self.tmp, "layer.tar.gz")
        ocibuild.build_layer(self.layer, [listing])
        self.base = os.path.join(self.tmp, "base")
        self.base_digest = ocibuild.build_image(
            self.base, [self.layer], env=["PATH=/usr/bin", "LANG=C"], cmd=["bash"])

    def _layout(self, root):
        layout = ocibuild.Layout(root)
        return layout.manifest()

    def test_an_image_on_a_base(self):
        labels = os.path.join(self.tmp, "labels")
        with open(labels, "w") as f:
            f.write("# comment\na.b=1\nc=x=y\n")
        out = os.path.join(self.tmp, "image")
        digest = ocibuild.build_image(
            out, [self.layer], base=self.base, entrypoint=["python3", "-m", "m"],
            env=["PATH=/opt/bin:$PATH", "HOME=${LANG}/h"], workdir="/app",
            labels=ocibuild.read_labels(labels))
        manifest_digest, manifest, config = self._layout(out)
        self.assertEqual(digest, manifest_digest)
        self.assertLen(manifest["layers"], 2)
        self.assertEqual(config["config"]["Env"], ["PATH=/opt/bin:/usr/bin", "LANG=C", "HOME=C/h"])
        self.assertEqual(config["config"]["Entrypoint"], ["python3", "-m", "m"])
        self.assertNotIn("Cmd", config["config"])  # the base's arguments were for its entrypoint
        self.assertEqual(config["config"]["Labels"], {"a.b": "1", "c": "x=y"})
        self.assertEqual(config["created"], ocibuild.EPOCH)
        self.assertEqual([h["created"] for h in config["history"]], [ocibuild.EPOCH] * 2)
        with open(os.path.join(out, "index.json"), "rb") as f:
            raw = f.read()
        self.assertEqual(raw, ocibuild.canonical_json(json.loads(raw)))
        # The same inputs again: the same digest.
        again = ocibuild.build_image(
            os.path.join(self.tmp, "again"), [self.layer], base=self.base,
            entrypoint=["python3", "-m", "m"], env=["PATH=/opt/bin:$PATH", "HOME=${LANG}/h"],
            workdir="/app", labels=ocibuild.read_labels(labels))
        self.assertEqual(again, digest)

    def test_pinned_digest_and_damaged_inputs(self):
        out = os.path.join(self.tmp, "again")
        self.assertEqual(ocibuild.build_image(out, [self.layer], env=["PATH=/usr/bin", "LANG=C"],
                                              cmd=["bash"], expect_digest=self.base_digest),
                         self.base_digest)
        with self.assertRaisesRegex(ocibuild.BuildError, "is pinned; its inputs changed"):
            ocibuild.build_image(out, [self.layer], expect_digest=self.base_digest)
        _, manifest, _ = self._layout(self.base)
        blob = ocibuild.Layout(self.base).blob_path(manifest["layers"][0]["digest"])
        os.chmod(blob, 0o644)
        with open(blob, "ab") as f:
            f.write(b"x")
        with self.assertRaisesRegex(ocibuild.BuildError, "does not match its digest"):
            ocibuild.build_image(out, [self.layer], base=self.base)
        not_gzip = os.path.join(self.tmp, "plain.tar")
        with open(not_gzip, "wb") as f:
            f.write(b"plain")
        with self.assertRaisesRegex(ocibuild.BuildError, "not a gzip-compressed layer"):
            ocibuild.build_image(out, [not_gzip])
        with self.assertRaisesRegex(ocibuild.BuildError, "not an OCI image layout"):
            ocibuild.build_image(out, [self.layer], base=self.tmp)


class LabelsTest(absltest.TestCase):

    def test_commit_lock_hashes_and_versions(self):
        tmp = self.create_tempdir()
        status = tmp.create_file("stable-status.txt",
                                 "BUILD_HOST box\nSTABLE_GIT_COMMIT abc123\n").full_path
        lock = tmp.create_file("train_lock.txt", "jax[cuda]==0.10.2 \\\n    --hash=sha256:00\n"
                               "Torch==2.13.0+cpu \\\n    --hash=sha256:11\n").full_path
        labels = ocibuild.build_labels(status, [f"train={lock}"], ["jax", "torch"], ["k=v"])
        with open(lock, "rb") as f:
            lock_hash = ocibuild.sha256_digest(f.read())
        self.assertEqual(labels, {
            "org.opencontainers.image.revision": "abc123",
            "dev.gemma4-toolkit.lock.train": lock_hash,
            "dev.gemma4-toolkit.version.jax": "0.10.2",
            "dev.gemma4-toolkit.version.torch": "2.13.0+cpu",
            "k": "v",
        })
        with self.assertRaisesRegex(ocibuild.BuildError, "vllm is in none of the locks"):
            ocibuild.build_labels(status, [f"train={lock}"], ["vllm"])


if __name__ == "__main__":
    absltest.main()
