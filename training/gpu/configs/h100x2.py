"""Gemma 4 31B LoRA SFT on 2 x H100 80GB (a3-highgpu-2g), FSDP2 full
shard with activation checkpointing, the reference recipe: per-device batch 1
x 4 accumulation steps x 2 GPUs = effective batch 8, as on v5p-8."""

from training.common import hparams
from training.gpu import config_base


def get_config():
    c = config_base.gpu_config(hparams.reference(), model="google/gemma-4-31B-it",
                               dtype="bfloat16", num_processes=2, machine="gpu-h100x2")
    c.model.attn_implementation = "sdpa"
    return c
