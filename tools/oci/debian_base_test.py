"""tools/oci/debian_base.py: .deb data into one layer, links kept, pins enforced."""

import gzip
import hashlib
import io
import os
import tarfile

from absl.testing import absltest

from tools.oci import debian_base


def tar_xz(entries):
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:xz") as tar:
        for name, value in entries:
            info = tarfile.TarInfo(name)
            if isinstance(value, bytes):
                info.size, info.mode = len(value), 0o755
                tar.addfile(info, io.BytesIO(value))
            else:
                info.type, info.linkname = tarfile.SYMTYPE, value
                tar.addfile(info)
    return out.getvalue()


def deb(entries):
    """An `ar` archive as dpkg-deb writes one: debian-binary, control, data."""
    members = [("debian-binary", b"2.0\n"), ("control.tar.xz", tar_xz([])),
               ("data.tar.xz", tar_xz(entries))]
    out = b"!<arch>\n"
    for name, body in members:
        out += f"{name + '/':<16}{0:<12}{0:<6}{0:<6}{'100644':<8}{len(body):<10}`\n".encode()
        out += body + (b"\n" if len(body) % 2 else b"")
    return out


class DebianBaseTest(absltest.TestCase):

    def test_layer_from_pinned_packages(self):
        tmp = self.create_tempdir().full_path
        debs = os.path.join(tmp, "debs")
        os.makedirs(debs)
        data = deb([("./usr/bin/python3.11", b"\x7fELF"), ("./usr/share/doc/x/README", b"doc"),
                    ("./lib64/ld-linux-x86-64.so.2", "/lib/x86_64-linux-gnu/ld.so")])
        with open(os.path.join(debs, "p_1_amd64.deb"), "wb") as f:
            f.write(data)
        lock = os.path.join(tmp, "lock.txt")
        with open(lock, "w") as f:
            f.write(f"p http://127.0.0.1:9/pool/p_1_amd64.deb "
                    f"{hashlib.sha256(data).hexdigest()}\n")
        out = os.path.join(tmp, "base.tar.gz")
        debian_base.build_layer(debs, out, lock)
        with tarfile.open(fileobj=io.BytesIO(gzip.decompress(open(out, "rb").read()))) as tar:
            members = {m.name: m for m in tar.getmembers()}
        self.assertEqual(members["usr/bin/python3.11"].mode, 0o755)
        self.assertEqual(members["lib64/ld-linux-x86-64.so.2"].linkname,
                         "/lib/x86_64-linux-gnu/ld.so")
        self.assertEqual(members["usr/bin/python3"].linkname, "python3.11")
        self.assertEqual(members["bin/sh"].linkname, "dash")
        self.assertNotIn("usr/share/doc/x/README", members)
        # Present and intact: fetch keeps it without a download (the URL answers nothing).
        debian_base.fetch(debs, lock)
        with open(os.path.join(debs, "p_1_amd64.deb"), "ab") as f:
            f.write(b"changed")
        with self.assertRaisesRegex(debian_base.BaseError, "cannot download"):
            debian_base.fetch(debs, lock)

    def test_the_lock_pins_every_package_by_sha256(self):
        entries = debian_base.read_lock()
        self.assertEqual(sorted(p for p, _, _ in entries), sorted(debian_base.PACKAGES))
        for _, url, digest in entries:
            self.assertRegex(url, r"^http://deb\.debian\.org/debian(-security)?/pool/")
            self.assertRegex(digest, r"^[0-9a-f]{64}$")

    def test_not_a_package(self):
        path = os.path.join(self.create_tempdir().full_path, "x.deb")
        with open(path, "wb") as f:
            f.write(b"PK\x03\x04")
        with self.assertRaisesRegex(debian_base.BaseError, "not a Debian package"):
            debian_base.deb_data(path)


if __name__ == "__main__":
    absltest.main()
