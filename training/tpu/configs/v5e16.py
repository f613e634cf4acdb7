"""Gemma 4 31B LoRA SFT on a v5litepod-16 slice: 4 hosts x 4 chips of 16 GB,
fsdp=4 x tp=4.

Launch the same command on both hosts; JAX finds its peers (`distributed.auto`).
v5p8.py's recipe (packed, splash attention) on the cheapest chips: the weights
are sharded 16 ways, one packed row per fsdp replica per pass (4 per
micro-batch) x 2 accumulation steps keeps the 8 rows of an optimizer step, and
the layers are scanned with remat, to fit 16 GB: compiled ahead of time for
v5e:4x4 (//training/tpu:compile); the figures are in docs/performance.md,
"The cheaper slices: v6e-8 and v5e-16".
"""

from training.tpu.configs import v5p8


def get_config():
    c = v5p8.get_config()
    c.machine = "tpu-v5litepod-16"
    c.mesh.fsdp = 4
    c.batch.per_device_size = 1
    c.distributed.auto = True
    c.scan_layers = True
    c.remat = True
    return c
