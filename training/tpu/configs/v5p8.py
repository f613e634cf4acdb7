"""Gemma 4 31B LoRA SFT on one v5p-8 host (4 chips): the reference recipe, packed.

tp=4 is the largest tensor-parallel size Gemma 4 31B allows: its global layers
have 4 KV heads, so tp=8 cannot shard them.

The settings are the fastest that fit, by //training/tpu:compile (XLA's
estimate for v5p:2x2x1; docs/performance.md, "Gemma 4 31B on v5p-8, compiled
without a TPU", holds the measured sweep and the comparison with the reference's
settings):

- packed: the reference pads each row (~922 tokens on average) to 3072, so
  most token positions are padding; packing fills nearly all of them;
- splash attention (segment ids): skips the blocks the causal and 1024-token
  window masks rule out, and keeps no 3072 x 3072 scores;
- no remat: without the scores a layer's activations are small enough to
  keep, and no layer's forward pass runs twice;
- micro-batch 2 x 4 accumulation steps: 2 sequences per pass are faster than
  1; more gain little and cost much more HBM;
- tp=4: pure fsdp (4 x 1) is slower at the same micro-batch;
- all logits at once: chunked logits (loss_chunk) were slower and larger.

The batch stays 8 sequences per optimizer step, as on the GPU stack, which
packs the same way (h100x2.py). Packed, 8 sequences hold ~26 examples
instead of 8 (3,981 trained tokens instead of 1,253), so one epoch takes ~390
steps instead of 1250 and the 100 warmup steps are a quarter of the run: pass
--config.data.packing=False for the reference's schedule exactly.
"""

from training.common import hparams
from training.tpu import config_base


def get_config():
    c = config_base.tpu_config(
        hparams.reference(), model="google/gemma-4-31B-it", dtype="bfloat16",
        fsdp=1, tp=4, machine="tpu-v5p-8")
    c.data.packing = True
    c.attention.kernel = "splash"
    c.attention.block = 512
    c.remat = False
    c.batch.per_device_size = 2  # 2 sequences per pass (fsdp=1), 4 accumulation steps
    # Unrolled: the scan compiles 31B in 0.34x the time (0.20x with
    # --config.scan_runs=True), but on a v5e chip the scanned step ran 1.16x
    # slower without remat (both layouts 9% faster since LoRA's projections
    # return bf16; 1.14x before; 1.25x with the runs scanned; 1.08x without LoRA
    # dropout, whose masks its backward pass draws again; 1.13x at quarter
    # width with 2 and with 4 repeats alike): its loops copy the values kept
    # for the backward pass in and out of their stacks. XLA predicts 1.24x for
    # 31B, which overstates: its estimate grows with the repeats, the chip's
    # gap does not (docs/performance.md).
    # --config.scan_layers=True scans.
    c.scan_layers = False
    return c
