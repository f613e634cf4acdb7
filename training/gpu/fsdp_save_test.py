"""The GPU stack's checkpoints under real FSDP2: 2 CPU processes (gloo), `fully_shard`.

1. The adapter save: this test shards a PEFT tiny Gemma 4 itself, as
   Accelerate does (one unit per decoder layer, then the root), and runs the
   project's save path (trainer.save_adapter) on both ranks with a timeout: a
   rank-0-only gather waits for the other rank forever. It checks that only
   LoRA factors were gathered, that the adapter equals the unsharded factors,
   and that PEFT loads it with no missing or unexpected keys.
2. Resume: the Trainer's own FSDP2 path (Accelerate's fully_shard, sharded
   DCP checkpoints and their load) run by trainer.train; resuming from the
   step-2 checkpoint must give the uninterrupted run's losses and gradient
   norms, the final adapter must load into PEFT, and every rank must leave
   its process group before exiting.
3. Preemption: a SIGTERM that reaches one rank only stops both at the same
   step, with one checkpoint saved by both (no rank left waiting in a
   collective the other never joins).
"""

import json
import os
import re
import shutil
import socket
import subprocess
import sys

import numpy as np
import torch
import transformers
from absl.testing import absltest
from peft import LoraConfig
from peft import get_peft_model
from peft import set_peft_model_state_dict

from common import binaries
from gemma4 import adapter as adapter_lib
from gemma4 import tiny_model
from training.common import hparams
from training.gpu import trainer

TIMEOUT_S = 300
STEPS = 4
WORKER = r"""
import json, sys
import torch
import torch.distributed as dist
import transformers
from peft import LoraConfig, get_peft_model
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import DTensor
from gemma4 import gemma4_map, tiny_model
from training.common import hparams
from training.gpu import trainer

out = sys.argv[1]
dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
config = tiny_model.tiny_config(64)
model = transformers.AutoModelForCausalLM.from_config(config)
model = get_peft_model(model, LoraConfig(
    r=4, lora_alpha=8, target_modules=trainer.lora_target_regex(hparams.LORA_TARGET_MODULES)))
trainer.tie_fused_kv(model, gemma4_map.Dims.from_hf_config(config.to_dict()))
with torch.no_grad():  # the same non-zero factors on both ranks
    for name, param in model.named_parameters():
        if "lora_" in name:
            param.copy_(torch.linspace(-1, 1, param.numel()).reshape(param.shape))
if rank == 0:
    torch.save({n: p.detach().clone() for n, p in model.named_parameters(remove_duplicate=False)
                if "lora_" in n}, out + "/unsharded.pt")
mesh = init_device_mesh("cpu", (2,))
for layer in model.base_model.model.model.layers:
    fully_shard(layer, mesh=mesh)
fully_shard(model, mesh=mesh)
sharded = [n for n, p in model.named_parameters() if isinstance(p, DTensor)]
gathered = []
full_tensor = DTensor.full_tensor
def counting(self, *args, **kwargs):
    gathered.append(self.shape)
    return full_tensor(self, *args, **kwargs)
DTensor.full_tensor = counting
trainer.save_adapter(model, out + "/adapter", is_main=rank == 0)
dist.barrier()
print(json.dumps({"rank": rank, "sharded": len(sharded), "gathered": len(gathered),
                  "lora": sum("lora_" in n for n, _ in
                              model.named_parameters(remove_duplicate=False))}))
dist.destroy_process_group()
"""


TRAIN_WORKER = r"""
import logging, os, signal, sys, threading, time
import accelerate.state
import torch.distributed
from accelerate.utils import DistributedType

# Accelerate applies its FSDP plugin only on accelerator device types: a CPU
# run stays MULTI_CPU, plain data parallel. Lifting that one check runs the
# Trainer's own FSDP2 path on gloo: fully_shard per decoder layer, sharded
# (DCP) checkpoints and their load on resume.
_init = accelerate.state.AcceleratorState.__init__
def _fsdp_on_cpu(self, *args, fsdp_plugin=None, **kwargs):
    _init(self, *args, fsdp_plugin=fsdp_plugin, **kwargs)
    if fsdp_plugin is not None and self.distributed_type == DistributedType.MULTI_CPU:
        self.distributed_type, self.fsdp_plugin = DistributedType.FSDP, fsdp_plugin
accelerate.state.AcceleratorState.__init__ = _fsdp_on_cpu

logging.basicConfig(level=logging.INFO)
from training.gpu import trainer
from training.gpu.configs import cpu
config = cpu.get_config()  # remat on, LoRA dropout 0.05: both must resume exactly
config.num_processes, config.fsdp = 2, True
config.max_steps, config.checkpoint_every_steps = int(sys.argv[2]), 2
# 4 rows of 256 tokens a step (cpu.py: 8 of 512): sharded saves and their exact
# resume are the same at a quarter of the work.
config.batch.effective_size, config.data.max_seq_len = 4, 256
if sys.argv[3:] == ["sigterm_rank_1"] and os.environ["RANK"] == "1":
    def preempt():  # rank 1 alone, once the run has logged a step
        while not os.path.exists(os.path.join(sys.argv[1], "metrics.jsonl")):
            time.sleep(0.05)
        os.kill(os.getpid(), signal.SIGTERM)
    threading.Thread(target=preempt, daemon=True).start()
trainer.train(config, sys.argv[1])
print("process group left:", not torch.distributed.is_initialized())
"""


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(test, worker, *args):
    """Runs `worker` (Python source) on 2 gloo ranks; returns each rank's output."""
    port = _free_port()
    processes = []
    for rank in range(2):
        env = binaries.this_interpreter_env(RANK=str(rank),
                   WORLD_SIZE="2", LOCAL_RANK=str(rank), MASTER_ADDR="127.0.0.1",
                   MASTER_PORT=str(port), OMP_NUM_THREADS="1")
        processes.append(subprocess.Popen(
            [sys.executable, "-c", worker, *args], env=env, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, text=True))
    outputs = []
    try:
        for process in processes:
            outputs.append(process.communicate(timeout=TIMEOUT_S)[0])
    except subprocess.TimeoutExpired:
        for process in processes:
            process.kill()
            process.communicate()
        test.fail(f"the ranks did not finish in {TIMEOUT_S} s: a rank waits for a "
                  "collective the other never joins")
    codes = [process.returncode for process in processes]
    # Every rank's output: a rank that dies takes the other down with it (gloo), so
    # one rank's output alone may show only the consequence.
    test.assertEqual(codes, [0, 0], "\n".join(
        f"--- rank {rank}, exit {code}:\n{output[-3000:]}"
        for rank, (code, output) in enumerate(zip(codes, outputs))))
    return outputs


def peft_load(test, factors, saved, base):
    """Loads adapter `factors` into a fresh PEFT model of `base`: no stray or missing key."""
    fresh = get_peft_model(base, LoraConfig(
        r=saved["r"], lora_alpha=saved["lora_alpha"],
        target_modules=trainer.lora_target_regex(hparams.LORA_TARGET_MODULES)))
    result = set_peft_model_state_dict(fresh, {k: torch.as_tensor(v) for k, v in factors.items()})
    test.assertEqual(result.unexpected_keys, [])
    test.assertEqual([k for k in result.missing_keys if "lora_" in k], [])


class FsdpSaveTest(absltest.TestCase):

    def test_every_rank_saves_only_lora_and_peft_loads_it(self):
        out = self.create_tempdir().full_path
        outputs = launch(self, WORKER, out)
        reports = [json.loads(o.strip().splitlines()[-1]) for o in outputs]
        for report in reports:
            self.assertGreater(report["sharded"], 0)  # FSDP2 really sharded the model
            self.assertEqual(report["gathered"], report["lora"])  # nothing but LoRA

        unsharded = torch.load(os.path.join(out, "unsharded.pt"))
        factors, saved = adapter_lib.read(os.path.join(out, "adapter"))
        self.assertEqual(saved["r"], 4)
        self.assertEqual(sorted(factors), sorted(n.replace(".default", "") for n in unsharded))
        for name, value in unsharded.items():
            np.testing.assert_array_equal(np.asarray(factors[name.replace(".default", "")]),
                                          value.numpy(), err_msg=name)

        peft_load(self, factors, saved,
                  transformers.AutoModelForCausalLM.from_config(tiny_model.tiny_config(64)))

    def test_resume_from_an_fsdp2_checkpoint_gives_the_same_losses(self):
        tmp = self.create_tempdir().full_path
        whole, resumed = os.path.join(tmp, "whole"), os.path.join(tmp, "resumed")
        launch(self, TRAIN_WORKER, whole, str(STEPS))
        with open(os.path.join(whole, "run.json")) as f:  # the Trainer's is_fsdp_enabled
            self.assertTrue(json.load(f)["parallelism"]["fsdp"])
        step_2 = os.path.join(whole, "checkpoints", "checkpoint-2")
        self.assertTrue(os.path.isdir(os.path.join(step_2, "pytorch_model_fsdp_0")))
        # The run as it was when stopped after checkpoint-2.
        shutil.copytree(whole, resumed)
        shutil.rmtree(os.path.join(resumed, "checkpoints", "checkpoint-4"))
        shutil.rmtree(os.path.join(resumed, trainer.ADAPTER))
        outputs = launch(self, TRAIN_WORKER, resumed, str(STEPS))
        for output in outputs:  # each rank ends its process group itself
            self.assertIn("process group left: True", output)
        self.assertIn("resuming from", outputs[0])
        self.assertIn("Loading model from", outputs[0])  # Accelerate's sharded load
        want, got = metrics(whole), metrics(resumed)
        self.assertEqual([r["step"] for r in got], list(range(1, STEPS + 1)))
        for name in ("loss", "grad_norm"):
            for a, b in zip(got, want):
                self.assertAlmostEqual(a[name], b[name], delta=1e-6 * abs(b[name]),
                                       msg=f"{name} after resuming at step 2: "
                                       f"{[r[name] for r in got]} vs {[r[name] for r in want]}")

        adapters = [adapter_lib.read(os.path.join(run, trainer.ADAPTER)) for run in (whole, resumed)]
        (factors, saved), (resumed_factors, _) = adapters
        self.assertEqual(sorted(factors), sorted(resumed_factors))
        for name, value in factors.items():
            np.testing.assert_allclose(resumed_factors[name], value, rtol=0, atol=1e-7,
                                       err_msg=name)
        peft_load(self, factors, saved,
                  transformers.AutoModelForCausalLM.from_pretrained(os.path.join(whole, "base_model")))

    def test_a_sigterm_on_one_rank_stops_every_rank_at_one_checkpoint(self):
        workdir = os.path.join(self.create_tempdir().full_path, "run")
        outputs = launch(self, TRAIN_WORKER, workdir, "40", "sigterm_rank_1")
        stopped = [re.findall(r"SIGTERM: saved a checkpoint at step (\d+)", o) for o in outputs]
        self.assertLen(stopped[0], 1, outputs[0][-3000:])
        self.assertEqual(stopped[0], stopped[1])  # the same step on both ranks
        step = int(stopped[0][0])
        self.assertLess(step, 40)
        self.assertIn(f"checkpoint-{step}", os.listdir(os.path.join(workdir, "checkpoints")))
        self.assertFalse(os.path.exists(os.path.join(workdir, trainer.ADAPTER)))
        for output in outputs:
            self.assertIn("process group left: True", output)


def metrics(workdir):
    with open(os.path.join(workdir, "metrics.jsonl")) as f:
        return [json.loads(line) for line in f]


if __name__ == "__main__":
    absltest.main()
