"""Gemma 4 31B LoRA SFT on 2 x H100 80GB (a3-highgpu-2g), FSDP full shard."""

from ml_collections import config_dict

from training.common import hparams


def get_config():
    c = hparams.reference()
    c.model = config_dict.ConfigDict()
    c.model.name = "google/gemma-4-31B-it"
    c.model.dtype = "bfloat16"
    c.num_processes = 2
    return c
