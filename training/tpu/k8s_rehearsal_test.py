"""The JobSet //training/tpu:k8s renders, rehearsed here: its two pods as two JAX
processes (4 CPU devices each) with the environment the manifest gives them,
pod host names on loopback, the run directory a bucket (the GCS emulator).
Pod 1 is killed after the checkpoint of step 2; the JobSet restarts both pods
as its failure policy says, the run resumes from that checkpoint and ends with
the LoRA of an uninterrupted run, bit for bit."""

import os
import signal

import numpy as np
from absl.testing import absltest

from common import gcs_emulator
from common import kubernetes_rehearsal
from common import kubernetes_schemas
from common import storage
from gemma4 import orbax_lora

STEPS = 6
IMAGE = "r.io/p/train@sha256:" + "00" * 32


def _jobset(workdir):
    done, documents = kubernetes_schemas.render(
        "//training/tpu:k8s", "--config=cpu.py", f"--workdir={workdir}", f"--image={IMAGE}",
        "--name=rehearsal", "--max_restarts=2", "--config.distributed.num_processes=2",
        "--config.cpu_devices=4", f"--config.max_steps={STEPS}",
        "--config.checkpoint_every_steps=2")
    assert done.returncode == 0, done.stderr
    return documents[0]


def _committed(workdir, step):
    """Orbax's mark of a finished checkpoint in a bucket (its step folder is written
    in place there, then marked)."""
    return storage.exists(storage.join(workdir, "checkpoints", str(step),
                                       "commit_success.txt"))


def _lora(workdir, step):
    lora = f"checkpoints/{step}/lora"
    return orbax_lora.read(os.path.dirname(os.path.join(
        storage.fetch(workdir, only=[lora]), lora)))


class RehearsalTest(absltest.TestCase):

    def _rehearse(self, workdir, watch=None):
        rehearsal = kubernetes_rehearsal.Rehearsal(
            _jobset(workdir), {"training.tpu.sft": "//training/tpu:sft"},
            env={"STORAGE_EMULATOR_HOST": os.environ["STORAGE_EMULATOR_HOST"],
                 storage.CACHE_ENV: self.cache},
            logdir=self.create_tempdir().full_path)
        return rehearsal.run(timeout_s=1200, watch=watch)

    def test_a_lost_pod_restarts_the_jobset_which_resumes_exactly(self):
        tmp = self.create_tempdir().full_path
        self.cache = os.path.join(tmp, "cache")
        os.environ[storage.CACHE_ENV] = self.cache
        with gcs_emulator.running("bkt"):
            whole = self._rehearse("gs://bkt/whole")
            self.assertTrue(whole.succeeded, whole.logs)
            self.assertEqual((whole.restarts, whole.exit_codes), (0, [[0, 0]]))
            self.assertTrue(_committed("gs://bkt/whole", STEPS))

            killed = []

            def kill_pod_1_after_step_2(attempt, pods):
                if attempt == 0 and not killed and _committed("gs://bkt/cut", 2):
                    os.killpg(pods[1].process.pid, signal.SIGKILL)  # the host is gone
                    killed.append(pods[1].host)

            cut = self._rehearse("gs://bkt/cut", watch=kill_pod_1_after_step_2)
            self.assertEqual(killed, ["rehearsal-workers-0-1"])
            self.assertTrue(cut.succeeded, cut.logs)
            self.assertEqual(cut.restarts, 1)
            self.assertEqual(cut.exit_codes[0][1], -signal.SIGKILL)
            self.assertEqual(cut.exit_codes[1], [0, 0])
            resumed = [line for line in cut.logs[1][0].splitlines()
                       if "resumed from checkpoint at step" in line]
            self.assertLen(resumed, 1, cut.logs[1][0][-3000:])
            step = int(resumed[0].rsplit("step", 1)[1].split()[0].strip(",.:"))
            self.assertBetween(step, 2, STEPS - 1)
            print(f"pod 1 killed at attempt 0 (exit codes {cut.exit_codes[0]}); attempt 1 "
                  f"resumed from the checkpoint of step {step}")

            want, got = _lora("gs://bkt/whole", STEPS), _lora("gs://bkt/cut", STEPS)
            self.assertEqual(sorted(got), sorted(want))
            for name in want:
                np.testing.assert_array_equal(got[name], want[name], err_msg=name)


if __name__ == "__main__":
    absltest.main()
