"""The repository's own pins: MODULE.bazel, .bazelversion, the locks, the image bases
and the serving configs' images agree and are fully pinned (tools/pins.py)."""

import os

from absl.testing import absltest

from serving import server_config
from tools import pins


class RepositoryPinsTest(absltest.TestCase):
    """The checked-in MODULE.bazel, .bazelversion and locks are fully pinned."""

    def test_repository_is_pinned(self):
        # Bazel runs tests from the root of the main repository's runfiles.
        self.assertEqual(pins.all_problems(os.getcwd()), [])

    def test_module_reads_every_lock(self):
        with open("MODULE.bazel") as f:
            text = f.read()
        for lock in ("train", "serve", "serve_image", "train_tpu", "train_gpu", "k8s", "docs"):
            self.assertIn(f"//third_party/requirements:{lock}_lock.txt", text)

    def test_images_agree(self):
        """Pulls, offline stand-ins, image bases and the serving configs' images."""
        self.assertEqual(pins.all_image_problems(os.getcwd(), server_config.IMAGES.values()), [])
        self.assertLen(pins.pulled_images(open("MODULE.bazel").read()), 3)


if __name__ == "__main__":
    absltest.main()
