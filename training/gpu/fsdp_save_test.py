"""The GPU stack's adapter save under real FSDP2: 2 CPU processes (gloo), `fully_shard`.

The Trainer applies FSDP only on accelerators, so this test shards a PEFT
tiny Gemma 4 itself, as Accelerate does (one unit per decoder layer, then the
root), and runs the project's save path (trainer.save_adapter) on both ranks
with a timeout: a rank-0-only gather waits for the other rank forever. It
checks that only LoRA factors were gathered, that the adapter equals the
unsharded factors, and that PEFT loads it with no missing or unexpected keys.
"""

import json
import os
import socket
import subprocess
import sys

import numpy as np
import torch
from absl.testing import absltest

from training.formats import adapter as adapter_lib

TIMEOUT_S = 300
WORKER = r"""
import json, sys
import torch
import torch.distributed as dist
import transformers
from peft import LoraConfig, get_peft_model
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import DTensor
from training.common import hparams
from training.formats import gemma4_map, tiny_model
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


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class FsdpSaveTest(absltest.TestCase):

    def test_every_rank_saves_only_lora_and_peft_loads_it(self):
        out = self.create_tempdir().full_path
        port = _free_port()
        processes = []
        for rank in range(2):
            env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path), RANK=str(rank),
                       WORLD_SIZE="2", LOCAL_RANK=str(rank), MASTER_ADDR="127.0.0.1",
                       MASTER_PORT=str(port), OMP_NUM_THREADS="1")
            processes.append(subprocess.Popen(
                [sys.executable, "-c", WORKER, out], env=env, stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT, text=True))
        outputs = []
        try:
            for process in processes:
                outputs.append(process.communicate(timeout=TIMEOUT_S)[0])
        except subprocess.TimeoutExpired:
            for process in processes:
                process.kill()
                process.communicate()
            self.fail(f"the save did not finish in {TIMEOUT_S} s: a rank waits for a "
                      "collective the other never joins")
        for process, output in zip(processes, outputs):
            self.assertEqual(process.returncode, 0, output[-4000:])
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

        import transformers  # pylint: disable=import-outside-toplevel
        from peft import LoraConfig  # pylint: disable=import-outside-toplevel
        from peft import get_peft_model  # pylint: disable=import-outside-toplevel
        from peft import set_peft_model_state_dict  # pylint: disable=import-outside-toplevel
        from training.common import hparams  # pylint: disable=import-outside-toplevel
        from training.formats import tiny_model  # pylint: disable=import-outside-toplevel
        from training.gpu import trainer  # pylint: disable=import-outside-toplevel
        fresh = get_peft_model(
            transformers.AutoModelForCausalLM.from_config(tiny_model.tiny_config(64)),
            LoraConfig(r=4, lora_alpha=8,
                       target_modules=trainer.lora_target_regex(hparams.LORA_TARGET_MODULES)))
        result = set_peft_model_state_dict(
            fresh, {k: torch.as_tensor(v) for k, v in factors.items()})
        self.assertEqual(result.unexpected_keys, [])
        self.assertEqual([k for k in result.missing_keys if "lora_" in k], [])

if __name__ == "__main__":
    absltest.main()
