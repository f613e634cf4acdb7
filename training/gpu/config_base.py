"""The fields every GPU-stack config has; machine configs fill in the values."""

from ml_collections import config_dict

# Per-device figures of the machines the configs name (public spec sheets).
HARDWARE = {
    "cpu": dict(name="cpu", peak_tflops_per_device=0.0),
    "h100": dict(name="gpu-h100", peak_tflops_per_device=989.0),  # dense bf16
    "h200": dict(name="gpu-h200", peak_tflops_per_device=989.0),
}


def gpu_config(recipe, *, model, dtype, num_processes, hardware, dollars_per_hour=0.0):
    """`recipe` (training/common/hparams.py) plus the GPU stack's machine fields."""
    c = recipe
    c.model = config_dict.ConfigDict({
        "name": model, "dtype": dtype,
        # Packing needs attention that reads per-segment position_ids (varlen).
        "attn_implementation": "sdpa"})
    # Data-parallel processes (GPUs), launched by the binary through torchrun.
    c.num_processes = num_processes
    # FSDP full shard with activation checkpointing (c.remat) when > 1 process.
    c.fsdp = num_processes > 1
    c.hardware = config_dict.ConfigDict(HARDWARE[hardware])
    c.hardware.dollars_per_hour = dollars_per_hour
    c.log_every = 1
    c.max_steps = 0  # 0: the whole data set
    return c
