"""Gemma 4 31B LoRA SFT on one v5p-8 host (4 chips), the reference recipe.

tp=4 is the largest tensor-parallel size Gemma 4 31B allows: the global layers
have 4 KV heads, so tp=8 cannot shard them.
"""

from ml_collections import config_dict

from training.common import hparams


def get_config():
    c = hparams.reference()
    c.model = config_dict.ConfigDict()
    c.model.name = "google/gemma-4-31B-it"
    c.model.dtype = "bfloat16"
    c.mesh = config_dict.ConfigDict()
    c.mesh.fsdp = 1
    c.mesh.tp = 4
    c.cpu_devices = 0
    return c
