"""vLLM TPU on a v6e-8 host (8 chips x 32 GB), the reference's serving setup."""

from ml_collections import config_dict


def get_config():
    c = config_dict.ConfigDict()
    c.hardware = "tpu-v6e-8"
    c.tensor_parallel_size = 8
    c.max_model_len = 16384
    c.dollars_per_hour = 21.52
    return c
