import os
from unittest import mock

from absl.testing import absltest

from tools import accelerator


class DetectTest(absltest.TestCase):

    def machine(self, *paths):
        """A file system root holding `paths` (device nodes stand as empty files)."""
        root = self.create_tempdir().full_path
        for path in paths:
            os.makedirs(os.path.join(root, os.path.dirname(path)), exist_ok=True)
            open(os.path.join(root, path), "w").close()
        return root

    def detect(self, root, override=None):
        environ = {k: v for k, v in os.environ.items() if k != accelerator.ENV}
        if override is not None:
            environ[accelerator.ENV] = override
        with mock.patch.dict(os.environ, environ, clear=True):
            return accelerator.detect(root)

    def test_each_machine(self):
        self.assertEqual(self.detect(self.machine("dev/null")), "cpu")
        self.assertEqual(self.detect(self.machine("dev/accel0", "dev/accel1")), "tpu")  # v4
        self.assertEqual(self.detect(self.machine("dev/vfio/vfio", "dev/vfio/0")), "tpu")  # v5p
        self.assertEqual(self.detect(self.machine("dev/nvidiactl", "dev/nvidia0")), "gpu")
        self.assertEqual(self.detect(self.machine("proc/driver/nvidia/version")), "gpu")
        # The VFIO control node alone (the module loaded, no device bound) is no TPU.
        self.assertEqual(self.detect(self.machine("dev/vfio/vfio")), "cpu")

    def test_the_environment_overrides_it(self):
        gpu = self.machine("dev/nvidiactl")
        self.assertEqual(self.detect(gpu, override="cpu"), "cpu")
        self.assertEqual(self.detect(gpu, override="TPU "), "tpu")
        with self.assertRaisesRegex(SystemExit, "G4_ACCELERATOR='h100'; use one of cpu, tpu, "
                                    "gpu"):
            self.detect(gpu, override="h100")


if __name__ == "__main__":
    absltest.main()
