"""./bazelw's PATH guard is in force for tests: a pinned tool taken by name from
PATH is tools/host_guard/'s refusal, whatever the host has installed."""

import os
import shutil
import subprocess

from absl.testing import absltest

from common import pinned


class HostGuardTest(absltest.TestCase):

    def test_every_pinned_tool_by_name_is_refused(self):
        for name in pinned.TOOLS:
            found = shutil.which(name)
            self.assertIsNotNone(found, name)
            self.assertEqual(os.path.basename(os.path.dirname(found)), "host_guard", found)
            done = subprocess.run([found, "-V"], capture_output=True, text=True, timeout=30,
                                  check=False)
            self.assertEqual(done.returncode, 127)
            self.assertIn(f"error: {name} was taken from the host's PATH", done.stderr)
            self.assertIn(f"//third_party/pinned:{name}", done.stderr)

    def test_a_pinned_tool_the_target_does_not_carry_is_an_error_not_the_hosts(self):
        self.assertTrue(pinned.under_bazel())
        with self.assertRaisesRegex(pinned.NotCarried, "this Bazel target does not carry it"):
            pinned.tool("iverilog")


if __name__ == "__main__":
    absltest.main()
