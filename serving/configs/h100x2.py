"""vLLM on 2 x H100 80GB (a3-highgpu-2g), the reference's GPU serving setup."""

from ml_collections import config_dict


def get_config():
    c = config_dict.ConfigDict()
    c.hardware = "gpu-h100x2"
    c.tensor_parallel_size = 2
    c.max_model_len = 16384
    c.dollars_per_hour = 22.12
    return c
