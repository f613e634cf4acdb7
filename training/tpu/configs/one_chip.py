"""One TPU chip of any generation: Gemma 4 31B's first block at half width, random
weights, synthetic data of CodeV-R1's lengths. What a single chip runs, and the
smoke test of a fresh TPU VM (nothing is downloaded):

    bazel run //training/tpu:sft -- --config=one_chip.py --workdir=runs/chip
    ... --config.machine=tpu-v6e-1      # on a v6e chip: its HBM and peak

The model is 31B's first six layers (five sliding-window, one global) with the
hidden size, MLP width and head counts halved (hidden 2688, MLP 10752, 16
heads), its vocabulary and head dims (gemma4/random_model.py: the
weights `//training/tpu:scan_benchmark --config=one_chip.py` times). The
recipe is v5p8.py's (packed, splash, no remat, rbg masks) on a 1 x 1 mesh:
micro-batch 1 x 8 accumulation steps of 3072 tokens. Data: 1,000 rows of
`synthetic:N` (data/synthetic.py), about 40 optimizer steps; warmup 4 steps,
so that the adapter moves within a short run; a checkpoint every 10 steps.
"""

from gemma4 import base_model
from training.tpu.configs import v5p8


def get_config():
    c = v5p8.get_config()
    c.machine = "tpu-v5litepod-1"
    c.model.name = base_model.RANDOM
    c.model.random.layers = 6
    c.model.random.width_divisor = 2
    c.mesh.tp = 1
    c.batch.per_device_size = 1
    c.data.source = "synthetic:1000"
    c.data.max_rows = 0
    c.optimizer.warmup_steps = 4
    c.checkpoint_every_steps = 10
    return c
