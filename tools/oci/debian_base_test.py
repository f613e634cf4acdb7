"""tools/oci/debian_base.py: .deb data into one layer, links kept, pins enforced."""

import gzip
import hashlib
import io
import os
import tarfile

from absl.testing import absltest

from tools import deb_testing
from tools import debs
from tools.oci import debian_base


class DebianBaseTest(absltest.TestCase):

    def test_layer_from_pinned_packages(self):
        tmp = self.create_tempdir().full_path
        debs_dir = os.path.join(tmp, "debs")
        os.makedirs(debs_dir)
        data = deb_testing.deb([("./usr/bin/python3.11", b"\x7fELF"), ("./usr/share/doc/x/README", b"doc"),
                    ("./lib64/ld-linux-x86-64.so.2", "/lib/x86_64-linux-gnu/ld.so")])
        with open(os.path.join(debs_dir, "p_1_amd64.deb"), "wb") as f:
            f.write(data)
        lock = os.path.join(tmp, "lock.txt")
        with open(lock, "w") as f:
            f.write(f"p http://127.0.0.1:9/pool/p_1_amd64.deb "
                    f"{hashlib.sha256(data).hexdigest()}\n")
        out = os.path.join(tmp, "base.tar.gz")
        debian_base.build_layer(debs_dir, out, lock)
        with tarfile.open(fileobj=io.BytesIO(gzip.decompress(open(out, "rb").read()))) as tar:
            members = {m.name: m for m in tar.getmembers()}
        self.assertEqual(members["usr/bin/python3.11"].mode, 0o755)
        self.assertEqual(members["lib64/ld-linux-x86-64.so.2"].linkname,
                         "/lib/x86_64-linux-gnu/ld.so")
        self.assertEqual(members["usr/bin/python3"].linkname, "python3.11")
        self.assertEqual(members["bin/sh"].linkname, "dash")
        self.assertNotIn("usr/share/doc/x/README", members)
        # Present and intact: fetch keeps it without a download (the URL answers nothing).
        debian_base.fetch(debs_dir, lock)
        with open(os.path.join(debs_dir, "p_1_amd64.deb"), "ab") as f:
            f.write(b"changed")
        with self.assertRaisesRegex(debian_base.BaseError, "cannot download"):
            debian_base.fetch(debs_dir, lock)

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
            debs.deb_data(path)


if __name__ == "__main__":
    absltest.main()
