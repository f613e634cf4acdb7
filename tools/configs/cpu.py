"""Report settings: hourly prices of the machines compared (RECIPE.md)."""

from ml_collections import config_dict


def get_config():
    c = config_dict.ConfigDict()
    c.dollars_per_hour = config_dict.ConfigDict({
        "tpu-v5p-8": 16.80,
        "gpu-h100x2": 22.12,
        "tpu-v6e-8": 21.52,
    })
    return c
