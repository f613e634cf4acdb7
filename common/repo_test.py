import os
import subprocess
import sys

from absl.testing import absltest

from common import repo


class RepoTest(absltest.TestCase):

    def test_source_root_is_the_checkout(self):
        root = repo.source_root()
        self.assertTrue(os.path.isfile(os.path.join(root, repo.MARKER)))
        # The real checkout, not a runfiles tree: .git and this package are there.
        self.assertTrue(os.path.isfile(os.path.join(root, "common", "repo.py")))
        self.assertEqual(root, os.path.realpath(root))

    def test_code_root_holds_the_packages(self):
        self.assertTrue(os.path.isfile(os.path.join(repo.code_root(), "common", "repo.py")))

    def test_without_the_marker_the_error_names_the_dependency(self):
        # A copy of the module in a tree without MODULE.bazel: a target that lacks the
        # data dependency sees exactly this.
        tree = self.create_tempdir().full_path
        os.makedirs(os.path.join(tree, "common"))
        with open(repo.__file__) as src, open(os.path.join(tree, "common", "repo.py"), "w") as f:
            f.write(src.read())
        done = subprocess.run([sys.executable, "-c", "from common import repo; repo.source_root()"],
                              cwd=tree, env={**os.environ, "PYTHONPATH": tree},
                              capture_output=True, text=True, check=False)
        self.assertNotEqual(done.returncode, 0)
        self.assertIn("//common:repo", done.stderr)


if __name__ == "__main__":
    absltest.main()
