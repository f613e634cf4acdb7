"""The GPU memory plan: printed before any download, refusing what cannot fit, and
held to what a step allocates (measured on CPU, memory_calibration.py)."""

import os
import subprocess

from absl.testing import absltest

from common import binaries
from gemma4 import base_model
from gemma4 import gemma4_map
from training.gpu import memory_calibration
from training.gpu import memory_plan
from training.gpu.configs import h100x2

GIB = 2**30


def sft(workdir, *flags):
    env = binaries.child_env(HF_HUB_OFFLINE="1",
               HF_HOME=os.path.join(workdir, "hf"))
    return subprocess.run(binaries.command("//training/gpu:sft", "--config=h100x2.py",
                           f"--workdir={workdir}", *flags), env=env, capture_output=True,
                          text=True, timeout=300, check=False)


class MemoryPlanTest(absltest.TestCase):

    def test_h100x2_plans_before_it_needs_a_gpu_or_a_download(self):
        workdir = self.create_tempdir().full_path
        done = sft(workdir)
        self.assertNotEqual(done.returncode, 0)
        out = done.stdout + done.stderr
        self.assertIn("memory plan per GPU (2 processes, FSDP, micro-batch 1 x 3072 tokens, "
                      "remat on)", out)
        self.assertLess(out.index("memory plan per GPU"), out.index("error: "))
        self.assertIn("needs 2 GPUs", out)
        self.assertFalse(os.path.exists(os.path.join(workdir, "hf", "hub")))  # no download

    def test_an_oversized_micro_batch_is_refused_with_the_plan(self):
        done = sft(self.create_tempdir().full_path, "--config.batch.per_device_size=16")
        self.assertNotEqual(done.returncode, 0)
        errors = [line for line in done.stderr.splitlines() if line.startswith("error: ")]
        self.assertEqual(errors, ["error: the run does not fit in GPU memory: planned per GPU"],
                         done.stderr[-3000:])
        self.assertIn("logits", done.stderr)
        self.assertIn("a smaller micro-batch (--config.batch.per_device_size", done.stderr)
        self.assertNotIn("needs 2 GPUs", done.stderr)  # refused before the device check

    def test_the_31b_plan_by_component(self):
        dims = gemma4_map.Dims.from_hf_config(base_model.config_only(h100x2.MODEL)[0])
        config = h100x2.get_config()
        two = memory_plan.config_estimate(dims, config, processes=2, fsdp=True)
        one = memory_plan.config_estimate(dims, config, processes=1, fsdp=False)
        self.assertAlmostEqual(two["base_weights"] * 2, one["base_weights"])
        self.assertAlmostEqual(two["optimizer_state"], 2 * two["gradients"])
        self.assertEqual(one["gathered_weights"], 0)
        self.assertEqual(two["activations"], one["activations"])
        self.assertLess(two["total"], 74.51 * GIB)  # fits an H100's 80 GB
        self.assertGreater(one["total"], 74.51 * GIB)  # the 31B base alone is 57 GiB in bf16
        config.remat = False
        self.assertGreater(memory_plan.config_estimate(dims, config, 2, True)["activations"],
                           10 * two["activations"])

    def test_the_plan_bounds_a_measured_step(self):
        # A shape the coefficients were not taken from (memory_calibration.SHAPES), small
        # enough for CI (45 s here; the plan was 1.12x the measured peak).
        measured, planned, _ = memory_calibration.measure(384, 1536, 8, 24576, 384, remat=True)
        print(f"\nmeasured {measured / 2**20:.1f} MiB, planned {planned / 2**20:.1f} MiB "
              f"({planned / measured:.3f}x)")
        self.assertGreaterEqual(planned, measured)
        self.assertLess(planned, 1.4 * measured)


if __name__ == "__main__":
    absltest.main()
