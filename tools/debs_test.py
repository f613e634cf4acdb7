import hashlib
import io
import os
import tarfile

from absl.testing import absltest

from tools import deb_testing
from tools import debs


def _with_hardlink(entries, link, target):
    """deb_testing.deb's data with one more member: `link`, a hard link to `target`."""
    data = io.BytesIO(deb_testing.tar_xz(entries))
    with tarfile.open(fileobj=data, mode="r:xz") as tar:
        members = [(m, tar.extractfile(m).read() if m.isfile() else None)
                   for m in tar.getmembers()]
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:xz") as tar:
        for member, body in members:
            tar.addfile(member, io.BytesIO(body) if body is not None else None)
        info = tarfile.TarInfo(link)
        info.type, info.linkname = tarfile.LNKTYPE, target
        tar.addfile(info)
    return out.getvalue()


class DebsTest(absltest.TestCase):

    def setUp(self):
        super().setUp()
        self.tmp = self.create_tempdir().full_path

    def _write(self, name, data):
        path = os.path.join(self.tmp, name)
        with open(path, "wb") as f:
            f.write(data)
        return path

    def test_unpack_keeps_files_modes_and_links(self):
        deb = self._write("t_1_amd64.deb", deb_testing.deb([
            ("./usr/bin/tool", b"#!/bin/sh\n"), ("./usr/lib/libx.so.1", "libx.so.1.2")]))
        root = os.path.join(self.tmp, "root")
        debs.unpack(deb, root)
        tool = os.path.join(root, "usr", "bin", "tool")
        with open(tool, "rb") as f:
            self.assertEqual(f.read(), b"#!/bin/sh\n")
        self.assertTrue(os.access(tool, os.X_OK))
        self.assertEqual(os.readlink(os.path.join(root, "usr", "lib", "libx.so.1")),
                         "libx.so.1.2")

    def test_hard_links_are_copies_and_escapes_are_refused(self):
        data = _with_hardlink([("./usr/bin/a", b"A")], "./usr/bin/b", "./usr/bin/a")
        members = [("debian-binary", b"2.0\n"), ("data.tar.xz", data)]
        blob = b"!<arch>\n"
        for name, body in members:
            blob += f"{name + '/':<16}{0:<12}{0:<6}{0:<6}{'100644':<8}{len(body):<10}`\n".encode()
            blob += body + (b"\n" if len(body) % 2 else b"")
        root = os.path.join(self.tmp, "root")
        debs.unpack(self._write("h.deb", blob), root)
        with open(os.path.join(root, "usr", "bin", "b"), "rb") as f:
            self.assertEqual(f.read(), b"A")
        escape = self._write("e.deb", deb_testing.deb([("../../etc/evil", b"x")]))
        with self.assertRaisesRegex(debs.DebError, "leaves the package root"):
            debs.unpack(escape, os.path.join(self.tmp, "other"))
        self.assertFalse(os.path.exists(os.path.join(self.tmp, "etc")))

    def test_locks_and_fetch_check_the_pins(self):
        deb = deb_testing.deb([("./x", b"x")])
        cached = os.path.join(self.tmp, "debs")
        os.makedirs(cached)
        self._write("debs/x_1_amd64.deb", deb)
        lock = self._write("lock.txt", (
            "# a comment\nx http://127.0.0.1:9/pool/x_1_amd64.deb "
            f"{hashlib.sha256(deb).hexdigest()}\n").encode())
        # Present and intact: kept, no download (the URL answers nothing).
        self.assertEqual(debs.fetch(cached, lock, "re-pin"),
                         [os.path.join(cached, "x_1_amd64.deb")])
        self._write("debs/x_1_amd64.deb", deb + b"changed")
        with self.assertRaisesRegex(debs.DebError, "cannot download .*; if Debian has moved "
                                    "past this version, re-pin"):
            debs.fetch(cached, lock, "re-pin")
        bad = self._write("bad.txt", b"x http://h/x.deb not-a-sha\n")
        with self.assertRaisesRegex(debs.DebError, "bad.txt:1: expected PACKAGE URL SHA256"):
            debs.read_lock(bad)


if __name__ == "__main__":
    absltest.main()
