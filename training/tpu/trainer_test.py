"""The CPU run's lifecycle end to end (cpu.py at 2 rows a step on one device):
loss falls, exact resume, preemption, bad input."""

import json
import os
import shutil
import signal
import subprocess
import time

from absl.testing import absltest

from common import binaries
from common import gcs_emulator
from common import storage
from data import testing
from training.common import billing_testing
from training.common import wandb_offline
from training.tpu import compare_runs

STEPS = 4
# An effective batch of 2 rows (the default is 8) on one CPU device (the default
# is a 2 x 4 mesh): the lifecycle under test is the same at a quarter of the
# work per step, and a run of 4 steps takes 32 s instead of 44. The default
# mesh, sharded checkpoints and their exact resume are k8s_rehearsal_test's.
_ARGS = (f"--config.max_steps={STEPS}", "--config.checkpoint_every_steps=2",
         "--config.checkpoints_to_keep=5", "--config.batch.effective_size=2",
         "--config.cpu_devices=1", "--config.mesh.fsdp=1", "--config.mesh.tp=1")


def shared_cache():
    """One compilation cache for the test's runs (each compiles the same step)."""
    return (f"--config.compilation_cache.dir={absltest.get_default_test_tmpdir()}/xla-cache",
            "--config.compilation_cache.min_compile_s=0")

WANDB_OFFLINE = ("--config.tracking.report_to=tensorboard,wandb",
                 "--config.tracking.wandb_mode=offline")


def sft(workdir, *extra, wait=True, cache=shared_cache):
    env = binaries.child_env()
    command = binaries.command("//training/tpu:sft", f"--workdir={workdir}", *_ARGS,
                               *(cache() if cache else ()), *extra)
    process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True)
    if not wait:
        return process
    output, _ = process.communicate(timeout=900)
    return process.returncode, output


def losses(workdir):
    return [json.loads(line)["loss"]
            for line in storage.read_text(storage.join(workdir, "metrics.jsonl")).splitlines()]


def tear_metrics(workdir):
    """What a run killed while appending a line leaves: half of one more line."""
    path = storage.join(workdir, "metrics.jsonl")
    held = storage.read_bytes(path) if storage.exists(path) else b""
    storage.write_bytes(path, held + b'{"step": 3, "loss": 0.12, "learning_ra')


def break_second_metrics_line(workdir):
    path = storage.join(workdir, "metrics.jsonl")
    lines = storage.read_text(path).splitlines(keepends=True)
    storage.write_bytes(path, "".join([lines[0], lines[1][:15] + "\n", *lines[2:]]).encode())
    return path


def wait_for_checkpoint(workdir, step, process, timeout=600):
    """Until Orbax has committed checkpoint `step` (its marker object on GCS)."""
    path = storage.join(workdir, "checkpoints", str(step), "commit_success.txt")
    deadline = time.time() + timeout
    while not storage.exists(path):
        if process.poll() is not None or time.time() > deadline:
            raise AssertionError(f"no checkpoint {step}: {process.communicate()[0][-3000:]}")
        time.sleep(0.5)


class TrainerTest(absltest.TestCase):

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        tmp = absltest.get_default_test_tmpdir()
        cls.reference = os.path.join(tmp, "reference")
        # The reference run also logs to W&B, offline: a local run in reference/wandb/.
        os.environ.update(wandb_offline.env(tmp))
        code, cls.output = sft(cls.reference, *WANDB_OFFLINE)
        assert code == 0, cls.output[-5000:]
        cls.enterClassContext(gcs_emulator.running("bkt"))

    def test_loss_falls_and_outputs_are_in_place(self):
        values = losses(self.reference)
        self.assertLen(values, STEPS)
        self.assertLess(values[-1], values[0])
        for name in ("config.json", "run.json", "tensorboard", "checkpoints", "base_model"):
            self.assertTrue(os.path.exists(os.path.join(self.reference, name)), name)
        with open(os.path.join(self.reference, "metrics.jsonl")) as f:
            record = json.loads(f.readline())
        for name in ("step", "loss", "learning_rate", "grad_norm", "trained_tokens_per_s",
                     "tokens_per_s", "step_time_s"):
            self.assertIn(name, record)

    def test_metrics_carry_the_run_totals_and_run_json_its_segment(self):
        saved = sorted(int(d) for d in os.listdir(os.path.join(self.reference, "checkpoints")))
        billing_testing.assert_one_finished_run(self, self.reference, STEPS, saved)

    def test_wandb_offline_run_holds_the_metrics(self):
        wandb_offline.assert_holds_metrics(self, self.reference, STEPS)

    def test_sigkill_then_rerun_resumes_bit_for_bit_from_a_bucket(self):
        """The run lives in gs://bkt (the emulator on loopback); the reference is local."""
        os.environ[storage.CACHE_ENV] = self.create_tempdir().full_path
        workdir = "gs://bkt/sigkill"
        started = time.time()
        # The run's own cache, in the bucket: the rerun must find it there.
        process = sft(workdir, "--config.heartbeat_s=0.5", wait=False, cache=None)
        wait_for_checkpoint(workdir, 2, process)
        process.send_signal(signal.SIGKILL)
        process.wait()
        killed_s = time.time() - started
        tear_metrics(workdir)  # killed mid-line: the resume must cut it, not crash on it
        started = time.time()
        code, output = sft(workdir, "--config.heartbeat_s=0.5", cache=None)
        resumed_s = time.time() - started
        self.assertEqual(code, 0, output[-5000:])
        self.assertIn("resumed from checkpoint at step", output)
        self.assertIn("dropped a torn last line", output)
        # The rerun loads the compiled step from the bucket's compilation cache,
        # which the killed run filled; a fresh run compiles it.
        self.assertRegex(output, r"first step in [0-9.]+s: [1-9][0-9]* program\(s\) loaded "
                         r"from the compilation cache")
        self.assertRegex(self.output, r"first step in [0-9.]+s: 0 program\(s\) loaded from "
                         r"the compilation cache, [1-9][0-9]* compiled and stored")
        self.assertNotEmpty(storage.listdir(storage.join(workdir, "compilation_cache")))
        # The same final LoRA, bit for bit, and the same losses and gradient norms
        # as the run that was never stopped (what //training/tpu:compare_runs says).
        self.assertEqual(compare_runs.compare(self.reference, workdir), (STEPS, 72, STEPS))
        local = storage.fetch(workdir, only=[f"checkpoints/{STEPS}/lora", "metrics.jsonl"])
        self.assertEqual(losses(workdir), losses(self.reference))
        # One loss changed in a copy is a difference it names.
        changed = os.path.join(self.create_tempdir().full_path, "run")
        shutil.copytree(local, changed)
        path = os.path.join(changed, "metrics.jsonl")
        with open(path) as f:
            records = [json.loads(line) for line in f]
        with open(path, "w") as f:
            for record in records:
                record["loss"] += record["step"] == 3
                f.write(json.dumps(record) + "\n")
        with self.assertRaisesRegex(compare_runs.DifferentRuns, r"differ at steps \[3\]"):
            compare_runs.compare(self.reference, changed)
        billing_testing.assert_killed_then_resumed(self, workdir, 2, STEPS,
                                                   killed_s + resumed_s)
        # Every part of the run is an object in the bucket; no local "gs:" folder.
        for name in ("config.json", "run.json", "metrics.jsonl", "base_model/config.json",
                     f"checkpoints/{STEPS}/commit_success.txt"):
            self.assertTrue(storage.exists(storage.join(workdir, name)), name)
        events = os.path.join(storage.fetch(workdir, only=["tensorboard"]), "tensorboard")
        self.assertNotEmpty([f for f in os.listdir(events) if f.startswith("events.out")])
        for where in (os.getcwd(), absltest.get_default_test_tmpdir()):
            self.assertFalse(os.path.exists(os.path.join(where, "gs:")), where)
        # A broken line before the last is damage, not a torn tail: one error line.
        path = break_second_metrics_line(workdir)
        code, output = sft(workdir)
        self.assertEqual(code, 1, output[-5000:])
        errors = [line for line in output.splitlines() if line.startswith("error: ")]
        self.assertLen(errors, 1, output[-3000:])
        self.assertIn(f"{path}:2: not a JSON line", errors[0])
        self.assertNotIn("Traceback", output)

    def test_sigterm_saves_and_exits_cleanly(self):
        workdir = self.create_tempdir().full_path
        process = sft(workdir, "--config.checkpoint_every_steps=100", "--config.log_every=2",
                      wait=False)
        deadline = time.time() + 600
        while not os.path.exists(os.path.join(workdir, "metrics.jsonl")):
            self.assertIsNone(process.poll())
            self.assertLess(time.time(), deadline)
            time.sleep(0.5)
        process.send_signal(signal.SIGTERM)
        output, _ = process.communicate(timeout=300)
        self.assertEqual(process.returncode, 0, output[-5000:])
        self.assertIn("SIGTERM: saved a checkpoint at step", output)
        saved = [int(d) for d in os.listdir(os.path.join(workdir, "checkpoints")) if d.isdigit()]
        self.assertLen(saved, 1)
        self.assertLess(saved[0], STEPS)
        billing_testing.assert_preempted_logging_every(self, workdir, self.reference,
                                                       saved[0], 2)

    def test_checkpoint_of_another_lora_rank_is_refused_before_loading(self):
        started = time.time()
        code, output = sft(self.reference, "--config.lora.rank=4")
        self.assertNotEqual(code, 0)
        self.assertIn("was made with lora_rank=8, this run has 4", output)
        self.assertNotIn("base model loaded", output)
        self.assertLess(time.time() - started, 120)

    def test_a_data_set_past_the_reference_cap_is_read_whole(self):
        testing.check_read_whole(self, sft)

    def test_unwritable_workdir(self):
        code, output = sft("/proc/no-such-run")
        self.assertNotEqual(code, 0)
        self.assertIn("cannot write to the run directory /proc/no-such-run", output)

    def test_a_bucket_that_does_not_exist_is_one_error_line(self):
        code, output = sft("gs://no-such-bucket/run")
        self.assertEqual(code, 1, output[-3000:])
        errors = [line for line in output.splitlines() if line.startswith("error: ")]
        self.assertEqual(errors, ["error: cannot write to the run directory "
                                  "gs://no-such-bucket/run: the bucket gs://no-such-bucket "
                                  "does not exist (or this account cannot see it)"])
        self.assertNotIn("Traceback", output)
        self.assertNotIn("base model loaded", output)

    def test_corrupt_base_checkpoint(self):
        base = os.path.join(self.create_tempdir().full_path, "base")
        shutil.copytree(os.path.join(self.reference, "base_model"), base)
        shard = sorted(f for f in os.listdir(base) if f.endswith(".safetensors"))[-1]
        with open(os.path.join(base, shard), "r+b") as f:
            f.truncate(1000)
        code, output = sft(self.create_tempdir().full_path, f"--config.model.name={base}")
        self.assertNotEqual(code, 0)
        self.assertIn(shard, output)
        self.assertIn("truncated or corrupt", output)
        self.assertNotIn("base model loaded", output)


if __name__ == "__main__":
    absltest.main()
