"""Default TPU-stack config: runs on a laptop CPU in minutes.

A tiny random Gemma 4 (same architecture as 31B: sliding and global layers,
K = V global attention, distinct global head dim and KV heads), the embedded
tokenizer and sample data, JAX on 8 virtual CPU devices with a (2, 4) mesh.
"""

from ml_collections import config_dict

from training.common import hparams


def get_config():
    c = hparams.tiny(hparams.reference())
    c.model = config_dict.ConfigDict()
    c.model.name = "tiny-random-gemma4"
    c.model.dtype = "float32"
    c.mesh = config_dict.ConfigDict()
    c.mesh.fsdp = 2
    c.mesh.tp = 4
    c.cpu_devices = 8
    return c
