"""Default export settings."""

from ml_collections import config_dict


def get_config():
    c = config_dict.ConfigDict()
    c.format = "both"
    c.max_shard_bytes = 2 * 1024**3
    return c
