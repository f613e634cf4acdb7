import os
import subprocess
from unittest import mock

from absl.testing import absltest

from common import pinned


class PinnedTest(absltest.TestCase):

    def test_a_pinned_tool_runs_from_the_runfiles(self):
        iverilog = pinned.path("iverilog")
        self.assertTrue(os.path.isabs(iverilog))
        version = subprocess.run([iverilog, "-V"], capture_output=True, text=True,
                                 check=False, timeout=60).stdout
        self.assertIn("Icarus Verilog version 11.0", version)  # tools/test_tools_debs.txt

    def test_pinned_data(self):
        problems = pinned.path("verilog_eval")
        self.assertEqual(os.path.basename(problems), "problems.txt")
        with open(problems) as f:
            self.assertIn("Prob001_zero", f.read().split())

    def test_what_the_target_does_not_carry_is_none(self):
        self.assertIsNone(pinned.path("bwrap"))  # not in this test's data

    def test_a_carried_tool_is_the_pinned_one(self):
        self.assertTrue(pinned.under_bazel())
        self.assertEqual(pinned.tool("iverilog"), pinned.path("iverilog"))

    def test_under_bazel_a_tool_not_carried_is_an_error_whatever_the_host_has(self):
        host = self.create_tempdir()
        fake = host.create_file("bwrap", "#!/bin/sh\nexit 0\n").full_path
        os.chmod(fake, 0o755)
        with mock.patch.dict(os.environ, {"PATH": host.full_path}):
            with self.assertRaisesRegex(pinned.NotCarried,
                                        r"//third_party/pinned:bwrap.*does not carry it"):
                pinned.tool("bwrap")
            # Outside Bazel (a checkout, an image) the machine's own is the one.
            with mock.patch.object(pinned, "under_bazel", return_value=False):
                self.assertEqual(pinned.tool("bwrap"), os.path.realpath(fake))
            with mock.patch.object(pinned, "under_bazel", return_value=False), \
                    mock.patch.dict(os.environ, {"PATH": "/nonexistent"}):
                with self.assertRaisesRegex(FileNotFoundError, "bwrap is not on PATH"):
                    pinned.tool("bwrap")

    def test_only_pinned_tools_are_looked_up(self):
        with self.assertRaisesRegex(ValueError, "'gcc' is not a pinned tool"):
            pinned.tool("gcc")


if __name__ == "__main__":
    absltest.main()
