"""Test helpers of the TPU stack: tiny HF checkpoints and 8 virtual CPU devices."""

import json
import os

import jax

# Tests run on 8 virtual CPU devices, set before JAX initializes its backend.
jax.config.update("jax_num_cpu_devices", 8)

# pylint: disable=wrong-import-position
from conversion import gemma4_map
from data import tokenizer as tokenizer_lib
from training.common import tiny_model

_TOKENIZER = []


def tokenizer():
    if not _TOKENIZER:
        _TOKENIZER.append(tokenizer_lib.build_tokenizer())
    return _TOKENIZER[0]


def tiny_checkpoint(directory, seed=0, **overrides):
    """A tiny random Gemma 4 HF directory; returns (path, Dims)."""
    path = tiny_model.save_tiny_model(os.path.join(directory, "base"), tokenizer(), seed=seed,
                                      **overrides)
    with open(os.path.join(path, "config.json")) as f:
        return path, gemma4_map.Dims.from_hf_config(json.load(f))


def mesh(fsdp, tp):
    devices = jax.devices()[:fsdp * tp]
    import numpy as np  # pylint: disable=import-outside-toplevel
    return jax.sharding.Mesh(np.asarray(devices).reshape(fsdp, tp), ("fsdp", "tp"),
                             axis_types=(jax.sharding.AxisType.Auto,) * 2)
