"""Test helpers of the TPU stack: tiny HF checkpoints and 8 virtual CPU devices."""

import json
import os

import jax

# Tests run on 8 virtual CPU devices, set before JAX initializes its backend.
jax.config.update("jax_num_cpu_devices", 8)

# pylint: disable=wrong-import-position
from data import tokenizer as tokenizer_lib
from gemma4 import gemma4_map
from gemma4 import tiny_model

_TOKENIZER = []


def tokenizer():
    if not _TOKENIZER:
        _TOKENIZER.append(tokenizer_lib.build_tokenizer())
    return _TOKENIZER[0]


def tiny_checkpoint(directory, seed=0, **overrides):
    """A tiny random Gemma 4 HF directory (multimodal unless multimodal=False); returns
    (path, Dims)."""
    path = tiny_model.save_tiny_model(os.path.join(directory, "base"), tokenizer(), seed=seed,
                                      **overrides)
    with open(os.path.join(path, "config.json")) as f:
        return path, gemma4_map.Dims.from_hf_config(json.load(f))


def mesh(fsdp, tp):
    from training.tpu import sharding  # pylint: disable=import-outside-toplevel
    return sharding.make_mesh(fsdp, tp)


def cpu_config(**overrides):
    """The default CPU config (training/tpu/configs/cpu.py), with overrides."""
    from training.tpu.configs import cpu  # pylint: disable=import-outside-toplevel
    config = cpu.get_config()
    config.update_from_flattened_dict(overrides)
    return config


def batch(rng, accumulation, micro_batch, seq_len, vocab, segments_per_row=2):
    """Random packed micro-batches [accumulation, micro_batch, seq_len] (numpy)."""
    import numpy as np  # pylint: disable=import-outside-toplevel
    shape = (accumulation, micro_batch, seq_len)
    segment_ids = np.zeros(shape, np.int32)
    positions = np.zeros(shape, np.int32)
    bounds = np.linspace(0, seq_len - 4, segments_per_row + 1).astype(int)
    for s in range(segments_per_row):
        start, end = bounds[s], bounds[s + 1]
        segment_ids[..., start:end] = s + 1
        positions[..., start:end] = np.arange(end - start)
    loss_mask = (rng.random(shape) < 0.5).astype(np.int32) * (segment_ids > 0)
    loss_mask[..., bounds[:-1]] = 0
    return {"input_ids": rng.integers(5, vocab, shape).astype(np.int32),
            "loss_mask": loss_mask.astype(np.int32), "segment_ids": segment_ids,
            "positions": positions}


def random_factors(dims, lora_config, seed=0, scale=0.05):
    """Qwix LoRA factors for `dims` with non-zero B, shaped as the TPU stack makes them."""
    from training.tpu import model as model_lib  # pylint: disable=import-outside-toplevel
    import numpy as np  # pylint: disable=import-outside-toplevel
    shapes = {name: variable.shape for name, variable in
              model_lib.lora_names(model_lib.abstract_model(dims, "float32", lora_config)).items()}
    rng = np.random.default_rng(seed)
    return {name: (scale * rng.standard_normal(shape)).astype(np.float32)
            for name, shape in sorted(shapes.items())}
