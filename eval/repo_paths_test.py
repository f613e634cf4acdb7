import os

from absl.testing import absltest

from eval import repo_paths


class RepoPathsTest(absltest.TestCase):

    def test_source_root_is_the_checkout(self):
        root = repo_paths.source_root()
        self.assertTrue(os.path.isfile(os.path.join(root, "MODULE.bazel")))
        # The real source tree, not a runfiles copy: the eval sources are there.
        self.assertTrue(os.path.isfile(os.path.join(root, "eval", "repo_paths.py")))
        self.assertEqual(root, os.path.realpath(root))

    def test_default_dataset_is_the_shared_copy_beside_the_repo(self):
        dataset = repo_paths.default_dataset_dir()
        self.assertEqual(dataset, os.path.join(os.path.dirname(repo_paths.source_root()),
                                               "shared", "verilog-eval", "dataset_spec-to-rtl"))
        self.assertTrue(os.path.isfile(os.path.join(dataset, "problems.txt")), dataset)


if __name__ == "__main__":
    absltest.main()
