"""The JobSet //training/tpu:k8s renders, rehearsed here: its two pods as two JAX
processes (4 CPU devices each) with the environment the manifest gives them,
pod host names on loopback, the run directory a bucket (the GCS emulator).

Attempt 0: pod 1 gets SIGTERM (its node is preempted or drained) after the
checkpoint of step 2: both processes save a checkpoint and exit 143, so their
Job fails and the JobSet restarts them. Attempt 1 resumes from that checkpoint;
pod 1 is killed outright (its host is lost) after the next checkpoint: the JobSet
restarts again. Attempt 2 resumes and finishes with the LoRA of an
uninterrupted run, bit for bit.

The uninterrupted two-pod run (the 2 x 4 mesh over two processes, 2
micro-batches accumulated per step on each data-parallel replica) has the
losses of one process on one CPU device accumulating 4 (up to the order of
floating-point sums): the proof that sharding, accumulation and several hosts
compute what one device does, on the manifest's own environment.
"""

import json
import os
import re
import signal
import subprocess
import time

import numpy as np
from absl.testing import absltest

from common import binaries
from common import gcs_emulator
from common import kubernetes_rehearsal
from common import kubernetes_schemas
from common import run_dir as run_dir_lib
from common import storage
from gemma4 import orbax_lora

STEPS = 6
IMAGE = "r.io/p/train@sha256:" + "00" * 32
# An effective batch of 4 rows (cpu.py's is 8): what is rehearsed (the
# manifest's environment, restarts, exact resume, two processes training as
# one, accumulation on the sharded mesh) is the same at half the work per step.
# (Gloo, JAX's CPU collectives, gives up on a peer after 30 s; the trainer
# waits for every process to compile the step before any runs it.) LoRA
# dropout off: its masks depend on the mesh, so with it the one-device run's
# gradients differ (0.8% in step 1's gradient norm, measured). Resuming with
# dropout bit for bit is trainer_test's.
_RUN = (f"--config.max_steps={STEPS}", "--config.checkpoint_every_steps=2",
        "--config.batch.effective_size=4", "--config.lora.dropout=0.0")
# One compilation cache in the bucket for both two-pod runs: what the
# uninterrupted run's process 0 stores (JAX writes from process 0 only), every
# attempt of the interrupted one loads instead of compiling it again.
_SHARED_CACHE = ("--config.compilation_cache.dir=gs://bkt/xla-cache",
                 "--config.compilation_cache.min_compile_s=0")
# The reference: one process, one CPU device, no mesh to shard over.
_ONE_DEVICE = ("--config.cpu_devices=1", "--config.mesh.fsdp=1", "--config.mesh.tp=1")


def _jobset(workdir):
    done, documents = kubernetes_schemas.render(
        "//training/tpu:k8s", "--config=cpu.py", f"--workdir={workdir}", f"--image={IMAGE}",
        "--name=rehearsal", "--max_restarts=2", "--config.distributed.num_processes=2",
        "--config.cpu_devices=4", *_RUN, *_SHARED_CACHE)
    assert done.returncode == 0, done.stderr
    return documents[0]


def _metrics(workdir):
    """{name: [value per step]} of a run's metrics.jsonl."""
    records = [json.loads(line) for line in
               storage.read_text(storage.join(workdir, "metrics.jsonl")).splitlines()]
    return {name: [r[name] for r in records] for name in ("loss", "grad_norm")}


def _committed_steps(workdir):
    return {int(name) for name in storage.listdir(storage.join(workdir, "checkpoints"))
            if name.isdigit() and _committed(workdir, int(name))}


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
        started = time.monotonic()
        result = rehearsal.run(timeout_s=1200, watch=watch)
        print(f"{workdir}: {time.monotonic() - started:.0f} s, exit codes {result.exit_codes}")
        for attempt in result.logs:
            print("  attempt:", re.findall(r"first step in [0-9.]+s: .*|resumed from checkpoint"
                                           r" at step \d+|trained to step \d+", attempt[0]))
        return result

    def test_preempted_and_lost_pods_restart_the_jobset_which_resumes_exactly(self):
        tmp = self.create_tempdir().full_path
        self.cache = os.path.join(tmp, "cache")
        os.environ[storage.CACHE_ENV] = self.cache
        single = os.path.join(tmp, "single")  # one process, one CPU device
        done = subprocess.run(
            binaries.command("//training/tpu:sft", "--config=cpu.py", f"--workdir={single}",
                             *_RUN, *_ONE_DEVICE),
            env=binaries.child_env(), capture_output=True, text=True, timeout=900)
        self.assertEqual(done.returncode, 0, done.stderr[-5000:])
        with gcs_emulator.running("bkt"):
            whole = self._rehearse("gs://bkt/whole")
            self.assertTrue(whole.succeeded, whole.logs)
            self.assertEqual((whole.restarts, whole.exit_codes), (0, [[0, 0]]))
            self.assertTrue(_committed("gs://bkt/whole", STEPS))
            info = storage.read_json(storage.join("gs://bkt/whole", "run.json"))
            self.assertEqual((info["processes"], info["devices"], info["accumulation_steps"]),
                             (2, 8, 2))
            self.assertEqual(run_dir_lib.read_run_info(single)["accumulation_steps"], 4)
            got, want = _metrics("gs://bkt/whole"), _metrics(single)
            self.assertLen(got["loss"], STEPS)
            # The same rows, gradients and updates. Step 1's rate is 0 (warmup): the
            # losses and gradient norms of steps 1 and 2 agree to float32's sum order
            # (gradient norms 6e-7 and 1.1e-5 apart, measured; a reduction gone wrong
            # is off by far more), which Adam's normalised updates amplify from step
            # 2's update on.
            for name in ("loss", "grad_norm"):
                np.testing.assert_allclose(got[name][:2], want[name][:2], rtol=1e-4,
                                           err_msg=name)
            np.testing.assert_allclose(got["loss"], want["loss"], rtol=5e-3)

            signalled, resumed_from = [], []

            def stop_pod_1(attempt, pods):
                if len(signalled) > attempt:
                    return
                if attempt == 0 and _committed("gs://bkt/cut", 2):
                    os.killpg(pods[1].process.pid, signal.SIGTERM)  # a preempted node
                    signalled.append(("SIGTERM", 2))
                elif attempt == 1:
                    # The checkpoints committed as attempt 1 starts are where it resumes;
                    # the next one it commits is the moment to lose a host.
                    steps = _committed_steps("gs://bkt/cut")
                    if not resumed_from:
                        resumed_from.append(max(steps))
                    later = [s for s in steps if resumed_from[0] < s < STEPS]
                    if later:
                        os.killpg(pods[1].process.pid, signal.SIGKILL)  # a lost host
                        signalled.append(("SIGKILL", min(later)))

            cut = self._rehearse("gs://bkt/cut", watch=stop_pod_1)
            for attempt in cut.logs:  # programs the uninterrupted run stored, loaded
                self.assertRegex(attempt[0], r"first step in [0-9.]+s: [1-9][0-9]* program\(s\)"
                                 r" loaded from the compilation cache")
            self.assertEqual([kind for kind, _ in signalled], ["SIGTERM", "SIGKILL"])
            self.assertTrue(cut.succeeded, cut.logs)
            self.assertEqual(cut.restarts, 2)
            # SIGTERM: both processes saved and exited 143, failing their Job.
            self.assertEqual(cut.exit_codes[0], [143, 143], cut.logs[0])
            self.assertEqual(cut.exit_codes[1][1], -signal.SIGKILL)
            self.assertEqual(cut.exit_codes[2], [0, 0])
            first, second = (_resumed_step(cut.logs[i][0]) for i in (1, 2))
            self.assertIsNotNone(first, cut.logs[1][0][-3000:])
            self.assertBetween(first, 3, STEPS - 1)  # the SIGTERM's own checkpoint
            self.assertBetween(second, first + 1, STEPS - 1)
            print(f"attempt 0: SIGTERM after step 2's checkpoint, exits {cut.exit_codes[0]}; "
                  f"attempt 1 resumed at step {first}, SIGKILL after step "
                  f"{signalled[1][1]}'s checkpoint; attempt 2 resumed at step {second}")

            want, got = _lora("gs://bkt/whole", STEPS), _lora("gs://bkt/cut", STEPS)
            self.assertEqual(sorted(got), sorted(want))
            for name in want:
                np.testing.assert_array_equal(got[name], want[name], err_msg=name)


def _resumed_step(log):
    """The step process 0 says it resumed from, or None."""
    found = re.findall(r"resumed from checkpoint at step (\d+)", log)
    return int(found[-1]) if found else None

if __name__ == "__main__":
    absltest.main()
