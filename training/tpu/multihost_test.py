"""Multi-host training simulated on one machine: 2 JAX processes x 4 CPU devices.

The same run as one process with 8 devices must give the same losses (up to
the order of floating-point sums in the cross-process reductions).
"""

import json
import os
import socket
import subprocess
import sys

import numpy as np
from absl.testing import absltest

STEPS = 3
_ARGS = (f"--config.max_steps={STEPS}", "--config.checkpoint_every_steps=100")


def _command(workdir, *extra):
    return [sys.executable, "-m", "training.tpu.sft", f"--workdir={workdir}", *_ARGS, *extra]


def _losses(workdir):
    with open(os.path.join(workdir, "metrics.jsonl")) as f:
        return [json.loads(line)["loss"] for line in f]


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class MultiHostTest(absltest.TestCase):

    def test_two_processes_match_one(self):
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
        tmp = self.create_tempdir().full_path
        single = os.path.join(tmp, "single")
        result = subprocess.run(_command(single), env=env, capture_output=True, text=True,
                                timeout=900)
        self.assertEqual(result.returncode, 0, result.stderr[-5000:])

        multi = os.path.join(tmp, "multi")
        address = f"127.0.0.1:{_free_port()}"
        processes = [subprocess.Popen(
            _command(multi, "--config.cpu_devices=4", "--config.distributed.num_processes=2",
                     f"--config.distributed.process_id={i}",
                     f"--config.distributed.coordinator_address={address}"),
            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            for i in range(2)]
        outputs = [p.communicate(timeout=900)[0] for p in processes]
        for process, output in zip(processes, outputs):
            self.assertEqual(process.returncode, 0, output[-5000:])
        with open(os.path.join(multi, "run.json")) as f:
            info = json.load(f)
        self.assertEqual((info["processes"], info["devices"]), (2, 8))
        np.testing.assert_allclose(_losses(multi), _losses(single), rtol=1e-5)
        self.assertLen(_losses(multi), STEPS)


if __name__ == "__main__":
    absltest.main()
