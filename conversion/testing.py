"""Test helpers of the conversion package: a TPU run directory made without training."""

import json
import os

from tools.common import config_cli
from training.common import run_dir as run_dir_lib
from training.formats import orbax_lora


def fake_run(run_dir, base_dir, config, factors, step=10):
    """A run directory as //training/tpu:sft leaves it, holding `factors` at `step`."""
    run_dir_lib.prepare(run_dir)
    config_cli.write_resolved_config(config, run_dir)
    run_dir_lib.write_json(os.path.join(run_dir, run_dir_lib.RUN_INFO), {
        "stack": "tpu", "base_model": base_dir, "model_name": base_dir,
        "lora": {"lora_rank": config.lora.rank, "lora_alpha": float(config.lora.alpha)}})
    orbax_lora.write(os.path.join(run_dir, "checkpoints", str(step)), factors)
    return run_dir


def read_json(path):
    with open(path) as f:
        return json.load(f)
