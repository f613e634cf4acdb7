"""The fields every GPU-stack config has; machine configs fill in the values."""

from ml_collections import config_dict

from training.common import hparams


def gpu_config(recipe, *, model, dtype, num_processes, machine):
    """`recipe` (training/common/hparams.py) plus the GPU stack's machine fields."""
    c = recipe
    # transformers' attention. "sdpa" (the default) runs both head dims (256
    # and 512) and packed rows: data/views.py, docs/train-gpu.md.
    c.model = hparams.model(model, dtype, attn_implementation="sdpa")
    # Data-parallel processes (GPUs), launched by the binary through torchrun.
    c.num_processes = num_processes
    # FSDP2 full shard (activation checkpointing follows c.remat). Unset: decided at
    # run time, on when more than one process runs; True/False force it.
    c.fsdp = config_dict.placeholder(bool)
    # A name in common/machines.py: peak FLOP/s per GPU (MFU).
    c.machine = machine
    c.log_every = 1
    c.max_steps = 0  # 0: the whole data set
    return c


def use_fsdp(config, processes):
    """FSDP when several processes run, unless the config forces it on or off."""
    return processes > 1 if config.fsdp is None else bool(config.fsdp)
