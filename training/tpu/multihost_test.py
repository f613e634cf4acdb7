"""Multi-host training refuses a local run directory before JAX starts.

Two JAX processes x 4 CPU devices matching one process with 8, sharing a gs://
run directory and resuming from it, are rehearsed on the JobSet's own pods in
k8s_rehearsal_test.py."""

import os
import socket
import subprocess
import time

from absl.testing import absltest

from common import binaries


def _command(workdir, *extra):
    return binaries.command("//training/tpu:sft", f"--workdir={workdir}", *extra)


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class MultiHostTest(absltest.TestCase):

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
