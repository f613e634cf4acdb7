"""The GPU stack's CPU default run: loss, outputs, resume, preemption, bad input."""

import json
import os
import signal
import subprocess
import time

import numpy as np
import safetensors.numpy
from absl.testing import absltest

from common import binaries
from common import gcs_emulator
from common import storage
from data import testing
from training.common import billing_testing
from training.common import wandb_offline

STEPS = 4
# An effective batch of 2 rows (the default is 8): the lifecycle under test is the
# same at a quarter of the work per step.
_ARGS = (f"--config.max_steps={STEPS}", "--config.checkpoint_every_steps=2",
         "--config.checkpoints_to_keep=5", "--config.batch.effective_size=2")

WANDB_OFFLINE = ("--config.tracking.report_to=tensorboard,wandb",
                 "--config.tracking.wandb_mode=offline")


def sft(workdir, *extra, wait=True):
    env = binaries.child_env()
    command = binaries.command("//training/gpu:sft", f"--workdir={workdir}", *_ARGS, *extra)
    process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True)
    if not wait:
        return process
    output, _ = process.communicate(timeout=900)
    return process.returncode, output


def metrics(workdir):
    text = storage.read_text(storage.join(workdir, "metrics.jsonl"))
    return [json.loads(line) for line in text.splitlines()]


class GpuTrainerTest(absltest.TestCase):

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        tmp = absltest.get_default_test_tmpdir()
        cls.reference = os.path.join(tmp, "reference")
        # The reference run also logs to W&B, offline: a local run in reference/wandb/.
        os.environ.update(wandb_offline.env(tmp))
        code, output = sft(cls.reference, *WANDB_OFFLINE)
        assert code == 0, output[-5000:]
        cls.enterClassContext(gcs_emulator.running("bkt"))

    def test_outputs_and_metric_names(self):
        records = metrics(self.reference)
        self.assertEqual([r["step"] for r in records], list(range(1, STEPS + 1)))
        self.assertLess(records[-1]["loss"], records[0]["loss"])
        for name in ("loss", "learning_rate", "grad_norm", "trained_tokens_per_s",
                     "tokens_per_s", "step_time_s", "mfu"):
            self.assertIn(name, records[0])
        with open(os.path.join(self.reference, "run.json")) as f:
            info = json.load(f)
        self.assertEqual((info["stack"], info["effective_batch"], info["accumulation_steps"]),
                         ("gpu", 2, 2))
        for name in ("config.json", "tensorboard", "adapter/adapter_config.json",
                     "checkpoints/checkpoint-2", "checkpoints/checkpoint-4"):
            self.assertTrue(os.path.exists(os.path.join(self.reference, name)), name)

    def test_metrics_carry_the_run_totals_and_run_json_its_segment(self):
        billing_testing.assert_one_finished_run(self, self.reference, STEPS, [2, 4])

    def test_wandb_offline_run_holds_the_metrics(self):
        wandb_offline.assert_holds_metrics(self, self.reference, STEPS)

    def test_sigkill_then_rerun_resumes_from_a_bucket(self):
        """The run lives in gs://bkt (the emulator on loopback); the reference is local."""
        os.environ[storage.CACHE_ENV] = self.create_tempdir().full_path
        workdir = "gs://bkt/gpu-sigkill"
        started = time.time()
        process = sft(workdir, "--config.heartbeat_s=0.5", wait=False)
        checkpoint = storage.join(workdir, "checkpoints", "checkpoint-2", storage.COMMIT_MARKER)
        deadline = time.time() + 600
        while not storage.exists(checkpoint):
            self.assertIsNone(process.poll(), process.stdout.read()[-3000:]
                              if process.poll() is not None else "")
            self.assertLess(time.time(), deadline)
            time.sleep(0.5)
        time.sleep(1)
        process.send_signal(signal.SIGKILL)
        process.wait()
        killed_s = time.time() - started
        # Two resumes of the killed run: a local copy of it as it was, and the run in
        # the bucket with a torn last line in metrics.jsonl (killed mid-line), which
        # the resume must cut, not crash on.
        untorn = os.path.join(self.create_tempdir().full_path, "untorn")
        storage.fetch(workdir, untorn)
        os.remove(os.path.join(untorn, ".g4_fetched.json"))
        path = storage.join(workdir, "metrics.jsonl")
        storage.write_bytes(path, storage.read_bytes(path) +
                            b'{"step": 3, "loss": 0.12, "learning_ra')
        started = time.time()
        code, output = sft(workdir, "--config.heartbeat_s=0.5")
        resumed_s = time.time() - started
        self.assertEqual(code, 0, output[-5000:])
        self.assertIn("resuming from", output)
        self.assertIn("dropped a torn last line", output)
        code, untorn_output = sft(untorn)
        self.assertEqual(code, 0, untorn_output[-5000:])
        records = metrics(workdir)
        self.assertEqual([r["step"] for r in records], list(range(1, STEPS + 1)))
        for got, want in zip(records, metrics(self.reference)):
            self.assertAlmostEqual(got["loss"], want["loss"], delta=1e-5 * abs(want["loss"]))
        self.assertEqual([r["loss"] for r in records], [r["loss"] for r in metrics(untorn)])
        adapters = [safetensors.numpy.load_file(os.path.join(
                        storage.fetch(d, require_complete=True), "adapter_model.safetensors"))
                    for d in (storage.join(workdir, "adapter"), os.path.join(untorn, "adapter"))]
        for where in (os.getcwd(), absltest.get_default_test_tmpdir()):
            self.assertFalse(os.path.exists(os.path.join(where, "gs:")), where)
        self.assertEqual(sorted(adapters[0]), sorted(adapters[1]))
        for name, value in adapters[0].items():
            np.testing.assert_array_equal(value, adapters[1][name], err_msg=name)
        billing_testing.assert_killed_then_resumed(self, workdir, 2, STEPS,
                                                   killed_s + resumed_s)
        # A broken line before the last: the TPU stack's trainer_test runs that case
        # (the same MetricsWriter, training/common/metrics.py).

    def test_sigterm_saves_and_exits_cleanly(self):
        workdir = self.create_tempdir().full_path
        process = sft(workdir, "--config.checkpoint_every_steps=100", "--config.log_every=2",
                      wait=False)
        deadline = time.time() + 600
        while not os.path.exists(os.path.join(workdir, "metrics.jsonl")):
            self.assertIsNone(process.poll())
            self.assertLess(time.time(), deadline)
            time.sleep(0.2)
        process.send_signal(signal.SIGTERM)
        output, _ = process.communicate(timeout=300)
        self.assertEqual(process.returncode, 0, output[-5000:])
        self.assertIn("SIGTERM: saved a checkpoint at step", output)
        saved = [d for d in os.listdir(os.path.join(workdir, "checkpoints"))
                 if d.startswith("checkpoint-")]
        self.assertLen(saved, 1)
        billing_testing.assert_preempted_logging_every(
            self, workdir, self.reference, int(saved[0].split("-")[1]), 2)

    def test_checkpoint_of_another_rank_is_refused(self):
        code, output = sft(self.reference, "--config.lora.rank=4")
        self.assertNotEqual(code, 0)
        self.assertIn("was made with lora_rank=8, this run has 4", output)

    def test_a_data_set_past_the_reference_cap_is_read_whole(self):
        testing.check_read_whole(self, sft)

    def test_unwritable_workdir(self):
        code, output = sft("/proc/no-such-run")
        self.assertNotEqual(code, 0)
        self.assertIn("cannot write to the run directory /proc/no-such-run", output)


if __name__ == "__main__":
    absltest.main()
