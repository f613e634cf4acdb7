"""Gemma 4 31B LoRA SFT on one v6e-8 host (8 chips of 32 GB): fsdp=2 x tp=4.

v5p8.py's recipe and settings (packed, splash attention), over twice the chips
with a third of the HBM each: the weights are sharded 8 ways, one packed row
per fsdp replica per pass (2 per micro-batch) x 4 accumulation steps keeps the
8 rows of an optimizer step, and the layers are scanned, as on v5p-16 (the
same mesh): compiled ahead of time for v6e:2x4 (//training/tpu:compile); the
figures are in docs/performance.md, "The cheaper slices: v6e-8 and v5e-16".
"""

from training.tpu.configs import v5p8


def get_config():
    c = v5p8.get_config()
    c.machine = "tpu-v6e-8"
    c.mesh.fsdp = 2
    c.batch.per_device_size = 1
    c.scan_layers = True
    return c
