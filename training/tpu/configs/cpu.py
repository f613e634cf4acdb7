"""Default TPU-stack config: runs on a laptop CPU in minutes.

A tiny random Gemma 4 (same architecture as 31B: sliding and global layers,
K = V global attention, distinct global head dim and KV heads), the embedded
tokenizer and sample data, JAX on 8 virtual CPU devices with a (2, 4) mesh.
"""

from training.common import hparams
from training.tpu import config_base


def get_config():
    return config_base.tpu_config(
        hparams.tiny(hparams.reference()), model="tiny-random-gemma4", dtype="float32",
        fsdp=2, tp=4, machine="cpu", cpu_devices=8)
