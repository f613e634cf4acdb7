"""Test helpers of the conversion package: a TPU run directory made without training."""

import json
import os

from common import config_cli
from common import run_dir as run_dir_lib
from common import storage
from gemma4 import orbax_lora


def fake_run(run_dir, base_dir, config, factors, step=10):
    """A run directory as //training/tpu:sft leaves it, holding `factors` at `step`."""
    run_dir_lib.prepare(run_dir)
    config_cli.write_resolved_config(config, run_dir)
    storage.write_json(os.path.join(run_dir, run_dir_lib.RUN_INFO), {
        "stack": "tpu", "base_model": base_dir, "model_name": base_dir,
        "lora": {"lora_rank": config.lora.rank, "lora_alpha": float(config.lora.alpha)}})
    orbax_lora.write(os.path.join(run_dir, "checkpoints", str(step)), factors)
    return run_dir


def random_run(run_dir, base_dir, seed=0, scale=0.05):
    """A fake run on `base_dir` with random LoRA factors (non-zero B) of the CPU config.

    Returns (run_dir, dims, factors, config).
    """
    from gemma4 import base_model  # pylint: disable=import-outside-toplevel
    from gemma4 import gemma4_map  # pylint: disable=import-outside-toplevel
    from training.tpu import testing as tpu_testing  # pylint: disable=import-outside-toplevel
    dims = gemma4_map.Dims.from_hf_config(base_model.read_config(base_dir))
    config = tpu_testing.cpu_config()
    factors = tpu_testing.random_factors(dims, config.lora, seed=seed, scale=scale)
    return fake_run(run_dir, base_dir, config, factors), dims, factors, config


def read_json(path):
    with open(path) as f:
        return json.load(f)
