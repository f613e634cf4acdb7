"""./bazelw's PATH guard (tools/host_guard/): a pinned tool taken by name from PATH
is refused loudly, whatever the host has installed, and ./bazelw puts the guard
first on every test's PATH."""

import os
import re
import subprocess

from absl.testing import absltest

from common import pinned
from common import repo


class HostGuardTest(absltest.TestCase):

    def test_every_pinned_tool_by_name_is_refused(self):
        guard = os.path.join(repo.source_root(), "tools", "host_guard")
        self.assertEqual(sorted(n for n in os.listdir(guard) if n != "refuse"),
                         sorted(pinned.TOOLS))
        for name in pinned.TOOLS:
            done = subprocess.run([os.path.join(guard, name), "-V"], capture_output=True,
                                  text=True, timeout=30, check=False)
            self.assertEqual(done.returncode, 127, name)
            self.assertIn(f"error: {name} was taken from the host's PATH", done.stderr)
            self.assertIn(f"//third_party/pinned:{name}", done.stderr)

    def test_bazelw_puts_the_guard_first_on_the_tests_path(self):
        with open(os.path.join(repo.source_root(), "bazelw")) as f:
            text = f.read()
        branch = re.search(r"\n  test\|coverage\)\n(.*?);;", text, re.S)
        self.assertIsNotNone(branch, "./bazelw has no test|coverage branch")
        self.assertIn('"--test_env=PATH=$root/tools/host_guard:$PATH"', branch.group(1))

    def test_a_pinned_tool_the_target_does_not_carry_is_an_error_not_the_hosts(self):
        self.assertTrue(pinned.under_bazel())
        with self.assertRaisesRegex(pinned.NotCarried, "this Bazel target does not carry it"):
            pinned.tool("iverilog")


if __name__ == "__main__":
    absltest.main()
