"""Gemma 4 31B LoRA SFT on 2 x H100 80GB (a3-highgpu-2g), FSDP2 full
shard with activation checkpointing: per-device batch 1 x 4 accumulation steps
x 2 GPUs = effective batch 8, as on v5p-8.

Packed, as v5p8.py: a packed row's examples attend only to themselves through
the document masks transformers builds from the restarting position ids
(data/views.py). With sdpa, PyTorch's memory-efficient kernel takes those
masked calls at both head dims, the global layers' 512 included; its flash
kernel takes no mask and stops at 256 (docs/train-gpu.md). --config.data.packing=False pads each row, as the
reference recipe did.
"""

from training.common import hparams
from training.gpu import config_base


MODEL = "google/gemma-4-31B-it"


def get_config():
    c = config_base.gpu_config(hparams.reference(), model=MODEL,
                               dtype="bfloat16", num_processes=2, machine="gpu-h100x2")
    c.model.attn_implementation = "sdpa"
    c.data.packing = True
    return c
