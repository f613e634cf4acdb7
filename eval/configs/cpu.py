"""The reference's VerilogEval settings: n=5, temperature 0.8, top_p 0.95."""

from ml_collections import config_dict


def get_config():
    c = config_dict.ConfigDict()
    c.n = 5
    c.temperature = 0.8
    c.top_p = 0.95
    c.max_tokens = 1024
    return c
