"""Gemma 4 31B LoRA SFT on a v5p-16 slice: 2 hosts x 4 chips, fsdp=2 x tp=4.

Launch the same command on both hosts; JAX finds its peers (`distributed.auto`).
Packed, as v5p8.py (see there): a micro-batch of 4 packed rows (2 per fsdp
replica) x 2 accumulation steps, the same 8 rows per optimizer step.

Scanned, unlike v5p8.py: compiled ahead of time for v5p:2x2x2
(//training/tpu:compile; docs/performance.md, "Scanned and unrolled layers"), the unrolled step needs 92.05 GiB per chip,
over the 90% HBM limit (its temporaries, with fsdp=2's all-gathered weights,
are 83 GiB), and XLA predicts it slower (2.25 s) than the scanned one, which
takes 34.97 GiB and 2.12 s per step and compiles in 86 s instead of 377 s.
"""

from training.tpu.configs import v5p8


def get_config():
    c = v5p8.get_config()
    c.mesh.fsdp = 2
    c.distributed.auto = True
    c.machine = "tpu-v5p-16"
    c.scan_layers = True
    return c
