import json
import os
import subprocess
import sys

from absl.testing import absltest

from common import binaries
from common import repo


class LauncherTest(absltest.TestCase):

    def test_a_binary_in_data_runs_under_its_own_launcher(self):
        command = binaries.command("//common:repo_probe", "a b", 3)
        self.assertEqual(command[0], os.path.join(repo.code_root(), "common", "repo_probe"))
        done = subprocess.run(command, env=binaries.child_env(PYTHONPATH="/borrowed"),
                              capture_output=True, text=True, check=True, timeout=120)
        probe = json.loads(done.stdout)
        self.assertEqual(probe["argv"], ["a b", "3"])
        # The same runfiles tree: the child imports our packages from where we do.
        self.assertEqual(os.path.realpath(probe["code_root"]), os.path.realpath(repo.code_root()))

    def test_a_binary_not_in_data_is_named_with_the_fix(self):
        with self.assertRaisesRegex(binaries.NotInRunfiles, r"//common:nothing.*`data`"):
            binaries.launcher("//common:nothing")
        # A package folder is not a launcher.
        with self.assertRaises(binaries.NotInRunfiles):
            binaries.launcher("//:common")

    def test_labels_of_this_repository_only(self):
        for label in ("common:repo_probe", "@x//common:repo_probe", "//common/repo_probe"):
            with self.assertRaisesRegex(ValueError, "//PACKAGE:NAME"):
                binaries.launcher(label)


class EnvironmentTest(absltest.TestCase):

    def test_child_env_drops_the_parents_import_path(self):
        env = binaries.child_env({"PYTHONPATH": "/p", "PYTHONHOME": "/h", "HOME": "/home",
                                  "GONE": "x"}, JAX_PLATFORMS="cpu", GONE=None, N=2)
        self.assertEqual(env, {"HOME": "/home", "JAX_PLATFORMS": "cpu", "N": "2"})

    def test_this_interpreter_env_imports_what_this_process_imports(self):
        done = subprocess.run(
            [sys.executable, "-c", "import absl.testing, common.binaries; print('ok')"],
            env=binaries.this_interpreter_env(), capture_output=True, text=True, timeout=120)
        self.assertEqual(done.stdout.strip(), "ok", done.stderr)


if __name__ == "__main__":
    absltest.main()
