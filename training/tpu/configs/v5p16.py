"""Gemma 4 31B LoRA SFT on a v5p-16 slice: 2 hosts x 4 chips, fsdp=2 x tp=4.

Launch the same command on both hosts; JAX finds its peers (`distributed.auto`).
Packed, as v5p8.py (see there): a micro-batch of 4 packed rows (2 per fsdp
replica) x 2 accumulation steps, the same 8 rows per optimizer step. Unrolled,
as v5p8.py; a 24 GiB host compiles its 60 layers for //training/tpu:compile
only scanned (README).
"""

from training.tpu.configs import v5p8


def get_config():
    c = v5p8.get_config()
    c.mesh.fsdp = 2
    c.distributed.auto = True
    c.machine = "tpu-v5p-16"
    return c
