"""Gemma 4 31B LoRA SFT on a v5p-16 slice: 2 hosts x 4 chips, fsdp=2 x tp=4.

Launch the same command on both hosts; JAX finds its peers (`distributed.auto`).
Packed, as v5p8.py (see there): a micro-batch of 2 packed rows (one per fsdp
replica) x 4 accumulation steps.
"""

from training.tpu.configs import v5p8


def get_config():
    c = v5p8.get_config()
    c.mesh.fsdp = 2
    c.distributed.auto = True
    c.machine = "tpu-v5p-16"
    return c
