"""Gemma 4 31B LoRA SFT on one v5p-8 host (4 chips), the reference recipe.

tp=4 is the largest tensor-parallel size Gemma 4 31B allows: its global layers
have 4 KV heads, so tp=8 cannot shard them.
"""

from training.common import hparams
from training.tpu import config_base


def get_config():
    return config_base.tpu_config(
        hparams.reference(), model="google/gemma-4-31B-it", dtype="bfloat16",
        fsdp=1, tp=4, machine="tpu-v5p-8")
