import os
import subprocess

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


if __name__ == "__main__":
    absltest.main()
