import os
import subprocess

from absl.testing import absltest

from tools import debs
from tools import test_tools


class TestToolsTest(absltest.TestCase):

    def test_every_tool_is_pinned_by_sha256_from_debian(self):
        entries = debs.read_lock(test_tools.LOCK)
        self.assertEqual([p for p, _, _ in entries], list(test_tools.PACKAGES))
        for _, url, _ in entries:
            self.assertRegex(url, r"^http://deb\.debian\.org/debian(-security)?/pool/")

    def test_a_wrapper_runs_its_binary_from_its_own_real_folder(self):
        out = self.create_tempdir().full_path
        root = os.path.join(out, "root")
        binary = os.path.join(root, "usr", "bin", "iverilog")
        os.makedirs(os.path.dirname(binary))
        with open(binary, "w") as f:
            f.write('#!/bin/sh\necho "$LD_LIBRARY_PATH" "$@"\n')
        os.chmod(binary, 0o755)
        os.makedirs(os.path.join(out, "bin"))
        wrapper = os.path.join(out, "bin", "iverilog")
        with open(wrapper, "w") as f:
            f.write(test_tools.wrapper("iverilog"))
        os.chmod(wrapper, 0o755)
        # Reached through a link elsewhere, as from a runfiles tree.
        link = os.path.join(self.create_tempdir().full_path, "iverilog")
        os.symlink(wrapper, link)
        done = subprocess.run([link, "-V"], capture_output=True, text=True, check=True,
                              env={"PATH": "/usr/bin:/bin", "LD_LIBRARY_PATH": "/mine"})
        libraries, ivl, flag = done.stdout.split()
        real_root = os.path.realpath(root)
        self.assertEqual(libraries, f"{real_root}/lib/x86_64-linux-gnu:"
                                    f"{real_root}/usr/lib/x86_64-linux-gnu:/mine")
        self.assertEqual(ivl, f"-B{real_root}/usr/lib/x86_64-linux-gnu/ivl")
        self.assertEqual(flag, "-V")


if __name__ == "__main__":
    absltest.main()
