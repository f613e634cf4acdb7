"""The run directory's refusals say what to use instead, per stack."""

from absl.testing import absltest

from common import run_dir


class CheckSharedTest(absltest.TestCase):

    def test_one_host_or_a_bucket_is_fine(self):
        run_dir.check_shared("runs/x", 1)
        run_dir.check_shared("gs://b/x", 4)

    def test_a_local_folder_on_several_hosts(self):
        with self.assertRaisesRegex(run_dir.RunDirError,
                                    r"runs/x is a local folder and this run has 2 hosts.*"
                                    r"Use a gs://BUCKET/\.\.\. URL, or pass --shared_fs"):
            run_dir.check_shared("runs/x", 2)
        # The GPU stack cannot share a bucket: it is not offered.
        with self.assertRaises(run_dir.RunDirError) as raised:
            run_dir.check_shared("runs/x", 2, bucket_ok=False)
        self.assertNotIn("gs://", str(raised.exception))
        self.assertIn("Pass --shared_fs", str(raised.exception))


if __name__ == "__main__":
    absltest.main()
