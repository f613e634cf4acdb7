"""Multi-host training simulated on one machine: 2 JAX processes x 4 CPU devices.

The same run as one process with 8 devices must give the same losses (up to
the order of floating-point sums in the cross-process reductions). The two
processes share one gs:// run directory (the GCS emulator on loopback), as the
hosts of a pod slice share a bucket, and resume from it; a local one is refused.
"""

import json
import os
import socket
import subprocess
import time

import numpy as np
from absl.testing import absltest

from common import binaries
from common import gcs_emulator
from common import storage
from gemma4 import orbax_lora

STEPS = 3
_ARGS = (f"--config.max_steps={STEPS}", "--config.checkpoint_every_steps=100")


def _command(workdir, *extra):
    return binaries.command("//training/tpu:sft", f"--workdir={workdir}", *_ARGS, *extra)


def _losses(workdir):
    text = storage.read_text(storage.join(workdir, "metrics.jsonl"))
    return [json.loads(line)["loss"] for line in text.splitlines()]


def _lora(workdir, step):
    lora = f"checkpoints/{step}/lora"
    return orbax_lora.read(os.path.dirname(os.path.join(
        storage.fetch(workdir, only=[lora]), lora)))


def _two_processes(workdir, env, *extra):
    """Runs the two processes of one run; returns their outputs."""
    address = f"127.0.0.1:{_free_port()}"
    processes = [subprocess.Popen(
        _command(workdir, "--config.cpu_devices=4", "--config.distributed.num_processes=2",
                 f"--config.distributed.process_id={i}",
                 f"--config.distributed.coordinator_address={address}", *extra),
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for i in range(2)]
    outputs = [p.communicate(timeout=900)[0] for p in processes]
    for process, output in zip(processes, outputs):
        assert process.returncode == 0, output[-5000:]
    return outputs


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class MultiHostTest(absltest.TestCase):

    def test_two_processes_match_one_and_resume_from_a_bucket(self):
        env = binaries.child_env()
        tmp = self.create_tempdir().full_path
        single = os.path.join(tmp, "single")
        result = subprocess.run(_command(single), env=env, capture_output=True, text=True,
                                timeout=900)
        self.assertEqual(result.returncode, 0, result.stderr[-5000:])

        with gcs_emulator.running("bkt"):
            env = dict(env, STORAGE_EMULATOR_HOST=os.environ["STORAGE_EMULATOR_HOST"],
                       **{storage.CACHE_ENV: os.path.join(tmp, "cache")})
            os.environ[storage.CACHE_ENV] = os.path.join(tmp, "cache")
            multi = "gs://bkt/multi"
            _two_processes(multi, env, "--config.checkpoint_every_steps=2")
            info = storage.read_json(storage.join(multi, "run.json"))
            self.assertEqual((info["processes"], info["devices"]), (2, 8))
            np.testing.assert_allclose(_losses(multi), _losses(single), rtol=1e-5)
            self.assertLen(_losses(multi), STEPS)
            # Both hosts died after the checkpoint of step 2: the rerun resumes there
            # and ends with the same LoRA, bit for bit.
            want = _lora(multi, STEPS)
            storage.remove(storage.join(multi, "checkpoints", str(STEPS)))
            outputs = _two_processes(multi, env, "--config.checkpoint_every_steps=2")
            self.assertIn("resumed from checkpoint at step 2", outputs[0])
            got = _lora(multi, STEPS)
            self.assertEqual(sorted(got), sorted(want))
            for name in want:
                np.testing.assert_array_equal(got[name], want[name], err_msg=name)
            np.testing.assert_allclose(_losses(multi), _losses(single), rtol=1e-5)

    def test_a_local_workdir_on_two_hosts_is_refused_at_once(self):
        env = binaries.child_env()
        workdir = os.path.join(self.create_tempdir().full_path, "run")
        started = time.monotonic()
        result = subprocess.run(
            _command(workdir, "--config.distributed.num_processes=2",
                     "--config.distributed.process_id=0",
                     f"--config.distributed.coordinator_address=127.0.0.1:{_free_port()}"),
            env=env, capture_output=True, text=True, timeout=60)
        seconds = time.monotonic() - started
        self.assertEqual(result.returncode, 1, result.stderr[-3000:])
        errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
        self.assertLen(errors, 1, result.stderr[-3000:])
        self.assertIn(f"--workdir={workdir} is a local folder and this run has 2 hosts",
                      errors[0])
        self.assertIn("--shared_fs", errors[0])
        self.assertNotIn("Traceback", result.stderr)
        self.assertFalse(os.path.exists(workdir))
        # Refused before JAX starts: no wait for the other process (measured ~2 s).
        self.assertLess(seconds, 30, f"refused after {seconds:.1f} s")


if __name__ == "__main__":
    absltest.main()
