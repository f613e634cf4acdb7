"""Distributed GPU-stack training, as far as a CPU machine allows.

torch FSDP2 itself runs on CPU (gloo), but the HF Trainer applies FSDP through
Accelerate, which enables its FSDP plugin only for accelerator device types;
with CPU processes the same run is data parallel. So this test (1) runs the
binary's real 2-process launch (torchrun, gloo) and checks it trains exactly
like one process, that a SIGTERM to that launch (a preempted VM, a stopped GKE
pod) has every rank save and the launcher exit with the preempted status, and
(2) checks the FSDP configuration the h100x2 config
generates: FSDP2, one unit per Gemma 4 decoder layer, transformers' activation
checkpointing. fsdp_save_test runs the Trainer's FSDP2 path itself, resume included.
"""

import json
import os
import signal
import subprocess
import sys
import time

from absl.testing import absltest

from common import binaries

STEPS = 3
# An effective batch of 4 rows of 256 tokens (cpu.py's is 8 of 512): two processes
# accumulating as one does the same at a quarter of the work per step.
SMALL = ("--config.batch.effective_size=4", "--config.data.max_seq_len=256")


def _command(workdir, *extra):
    return binaries.command("//training/gpu:sft", f"--workdir={workdir}",
                            "--config.checkpoint_every_steps=100", *SMALL, *extra)


def run(workdir, *extra):
    return subprocess.run(_command(workdir, f"--config.max_steps={STEPS}", *extra),
                          env=binaries.child_env(), capture_output=True, text=True, timeout=900)


def losses(workdir):
    with open(os.path.join(workdir, "metrics.jsonl")) as f:
        return [json.loads(line)["loss"] for line in f]


class FsdpTest(absltest.TestCase):

    def test_two_process_launch_matches_one_process(self):
        tmp = self.create_tempdir().full_path
        # Without LoRA dropout: torch draws each rank's dropout masks from that rank's
        # generator, so with dropout the two layouts differ by chance, not by a bug.
        single = run(os.path.join(tmp, "single"), "--config.lora.dropout=0.0")
        self.assertEqual(single.returncode, 0, single.stderr[-5000:])
        # --nnodes=1 (the default, given): torchrun's multi-machine flags on one machine.
        fsdp = run(os.path.join(tmp, "fsdp"), "--config.num_processes=2", "--config.fsdp=True",
                   "--config.lora.dropout=0.0", "--nnodes=1", "--node_rank=0")
        self.assertEqual(fsdp.returncode, 0, fsdp.stderr[-5000:])
        with open(os.path.join(tmp, "fsdp", "run.json")) as f:
            info = json.load(f)
        self.assertEqual((info["processes"], info["effective_batch"],
                          info["accumulation_steps"]), (2, 4, 2))
        got, want = losses(os.path.join(tmp, "fsdp")), losses(os.path.join(tmp, "single"))
        self.assertLen(got, STEPS)
        for a, b in zip(got, want):
            self.assertAlmostEqual(a, b, delta=1e-5 * abs(b),
                                   msg=f"2 processes {got} vs 1 process {want}; log of the "
                                   f"2-process run:\n{fsdp.stdout[-3000:]}\n{fsdp.stderr[-6000:]}")


    def test_a_sigterm_to_the_launcher_saves_on_every_rank_then_exits_preempted(self):
        # On GKE the pod's first process, torchrun's launcher, is the one signalled.
        workdir = self.create_tempdir().full_path
        with subprocess.Popen(_command(workdir, "--config.max_steps=40", "--config.num_processes=2",
                                       "--config.preempted_exit_code=143"),
                              env=binaries.child_env(), stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True) as launcher:
            deadline = time.time() + 600
            while not os.path.exists(os.path.join(workdir, "metrics.jsonl")):
                self.assertIsNone(launcher.poll())
                self.assertLess(time.time(), deadline)
                time.sleep(0.2)
            launcher.send_signal(signal.SIGTERM)  # this process alone, not its workers
            output, _ = launcher.communicate(timeout=600)
        self.assertEqual(launcher.returncode, 143, output[-5000:])
        self.assertIn("SIGTERM: saved a checkpoint at step", output)
        self.assertRegex(output, r"SIGTERM: every training process saved the checkpoint of "
                                 r"step \d+ and stopped")
        saved = [d for d in os.listdir(os.path.join(workdir, "checkpoints"))
                 if d.startswith("checkpoint-")]
        self.assertLen(saved, 1)
        self.assertLess(int(saved[0].split("-")[1]), 40)
        self.assertNotIn("Traceback", output)
        # The billed segment ends preempted, not failed, though the workers exited 143.
        with open(os.path.join(workdir, "run.json")) as f:
            self.assertEqual(json.load(f)["segments"][-1]["end"][2], "preempted")

    def test_buffer_order_does_not_depend_on_the_hash_seed(self):
        # DDP copies rank 0's buffers to the others by position. transformers'
        # Gemma 4 registers rotary buffers in `set` order: hash seeds 0 and 1
        # give different raw orders, which trainer.order_buffers removes.
        code = ("import json, transformers\n"
                "from gemma4 import tiny_model\n"
                "from training.gpu import trainer\n"
                "model = transformers.AutoModelForCausalLM.from_config("
                "tiny_model.tiny_config(64))\n"
                "raw = [n for n, _ in model.named_buffers()]\n"
                "ordered = [n for n, _ in trainer.order_buffers(model).named_buffers()]\n"
                "print(json.dumps([raw, ordered]))\n")
        orders = []
        for seed in ("0", "1"):
            env = binaries.this_interpreter_env(PYTHONHASHSEED=seed)
            result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                                    text=True, timeout=300)
            self.assertEqual(result.returncode, 0, result.stderr[-3000:])
            orders.append(json.loads(result.stdout.strip().splitlines()[-1]))
        (raw_0, ordered_0), (raw_1, ordered_1) = orders
        self.assertNotEqual(raw_0, raw_1)  # the hazard (if this fails, upstream fixed it)
        self.assertEqual(sorted(raw_0), sorted(raw_1))
        self.assertEqual(ordered_0, ordered_1)

    def test_h100x2_generates_fsdp2_with_transformers_activation_checkpointing(self):
        from training.gpu import config_base  # pylint: disable=import-outside-toplevel
        from training.gpu import trainer  # pylint: disable=import-outside-toplevel
        from training.gpu.configs import h100x2  # pylint: disable=import-outside-toplevel
        config = h100x2.get_config()
        config.model.dtype = "float32"  # bf16 arguments are refused without a GPU
        args = trainer.training_args(config, self.create_tempdir().full_path, processes=2,
                                     accumulation=4, total_steps=1244, on_gpu=True)
        plugin = args.fsdp_plugin_args
        self.assertEqual(plugin["fsdp_version"], 2)
        self.assertEqual(plugin["transformer_cls_names_to_wrap"], "Gemma4TextDecoderLayer")
        self.assertTrue(plugin["reshard_after_forward"])
        # transformers' checkpointing, not Accelerate's wrapper (trainer.training_args)
        self.assertFalse(plugin["activation_checkpointing"])
        self.assertTrue(args.gradient_checkpointing)
        # Decided at run time: one process runs without FSDP, unless forced.
        self.assertFalse(config_base.use_fsdp(config, 1))
        config.fsdp = False
        self.assertFalse(config_base.use_fsdp(config, 2))
        self.assertEqual((args.per_device_train_batch_size, args.gradient_accumulation_steps,
                          args.learning_rate, args.warmup_steps, args.weight_decay),
                         (1, 4, 1e-4, 100, 0.001))
        # The class name FSDP wraps is the decoder layer transformers defines.
        from transformers.models.gemma4 import modeling_gemma4  # pylint: disable=import-outside-toplevel
        self.assertTrue(hasattr(modeling_gemma4, plugin["transformer_cls_names_to_wrap"]))


if __name__ == "__main__":
    absltest.main()
