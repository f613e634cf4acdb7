"""The fields every TPU-stack config has; machine configs fill in the values."""

from ml_collections import config_dict



# Per-chip figures of the machines the configs name (public spec sheets).
HARDWARE = {
    "cpu": dict(name="cpu", hbm_gib_per_chip=0.0, peak_tflops_per_chip=0.0,
                dollars_per_hour=0.0),
    "tpu-v5p": dict(name="tpu-v5p", hbm_gib_per_chip=95.74, peak_tflops_per_chip=459.0,
                    dollars_per_hour=0.0),
}


def tpu_config(recipe, *, model, dtype, fsdp, tp, hardware, dollars_per_hour=0.0,
               cpu_devices=0):
    """`recipe` (training/common/hparams.py) plus the TPU stack's machine fields."""
    c = recipe
    c.model = config_dict.ConfigDict({"name": model, "dtype": dtype})
    c.mesh = config_dict.ConfigDict({"fsdp": fsdp, "tp": tp})
    c.hardware = config_dict.ConfigDict(HARDWARE[hardware])
    c.hardware.dollars_per_hour = dollars_per_hour
    # 8 virtual CPU devices make mesh and sharding code paths real on a laptop.
    c.cpu_devices = cpu_devices
    # Multi-host: `auto` on TPU pods; explicit coordinator for local tests.
    c.distributed = config_dict.ConfigDict({
        "auto": False, "coordinator_address": "", "num_processes": 1, "process_id": 0})
    c.log_every = 1
    c.max_steps = 0  # 0: the whole data set (epochs x rows / effective batch)
    return c


