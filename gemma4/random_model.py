"""A random Gemma 4 of a real model's architecture, cut and narrowed, written without torch.

What runs a real model's shapes where its weights cannot or need not come: a
smoke test on a fresh TPU VM, one chip of any generation, a benchmark. The
text model of `like` (a config.json, its directory or a Hub id; by default
Gemma 4 31B's config, which ships with the repository) is cut to its first
`layers` layers and narrowed by `width_divisor`: hidden size, MLP width and
every head count divided; head dims, vocabulary, attention windows and RoPE as
the original's. The model is text only (`Gemma4ForCausalLM`) with the embedded
tokenizer (data/tokenizer.py), whose special tokens have Gemma's ids.

Weights are drawn per tensor from (seed, the tensor's name), so any machine
writes the same bytes for the same arguments: a run trained on a TPU VM is
exported and checked elsewhere against the same base without copying it. Norm
scales are 1 + N(0, 0.1^2), layer scalars 1, everything else N(0, 0.02^2), in
bfloat16 (the real checkpoint's dtype) in one safetensors file.

    python -m gemma4.random_model DIR --layers=6 --width_divisor=2
"""

import argparse
import copy
import os
import shutil
import zlib

import ml_dtypes
import numpy as np

from common import cli
from common import storage
from gemma4 import base_model
from gemma4 import gemma4_map

DEFAULT_LIKE = "google/gemma-4-31B-it"
WEIGHTS = "model.safetensors"
_WIDTHS = ("hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads",
           "num_global_key_value_heads")


class RandomModelError(cli.UserError):
    pass


def shrink_config(hf_config, layers=0, width_divisor=1):
    """The text config of `hf_config` (a config.json dict, multimodal or not) cut to
    its first `layers` layers (0: all) and narrowed by `width_divisor`, as a
    `Gemma4ForCausalLM` config.json dict."""
    text = copy.deepcopy(hf_config.get("text_config", hf_config))
    total = len(text["layer_types"])
    if layers:
        if not 0 < layers <= total:
            raise RandomModelError(f"layers={layers}: the model has {total} layers")
        text["layer_types"] = text["layer_types"][:layers]
        text["num_hidden_layers"] = layers
        if "per_layer_config" in text:
            text["per_layer_config"] = {i: o for i, o in text["per_layer_config"].items()
                                        if int(i) < layers}
    if width_divisor > 1:
        widths = {k: text[k] for k in _WIDTHS if text.get(k)}
        for index, overrides in (text.get("per_layer_config") or {}).items():
            if overrides.get("num_key_value_heads"):
                widths[f"per_layer_config[{index}].num_key_value_heads"] = \
                    overrides["num_key_value_heads"]
        uneven = sorted(name for name, width in widths.items() if width % width_divisor)
        if uneven:
            raise RandomModelError(f"width_divisor={width_divisor} does not divide "
                                   f"{', '.join(uneven)} of the model ({widths})")
        for key in _WIDTHS:
            if text.get(key):
                text[key] //= width_divisor
        for overrides in (text.get("per_layer_config") or {}).values():
            if overrides.get("num_key_value_heads"):
                overrides["num_key_value_heads"] //= width_divisor
    text["architectures"] = ["Gemma4ForCausalLM"]
    text["model_type"] = "gemma4_text"
    text.pop("quantization_config", None)
    return text


def tensor(name, shape, seed=0):
    """The random value of HF tensor `name` (float32), the same wherever drawn."""
    if name.endswith("layer_scalar"):
        return np.ones(shape, np.float32)
    rng = np.random.default_rng([seed, zlib.crc32(name.encode())])
    value = rng.standard_normal(shape, np.float32)
    if "norm" in name:
        return np.float32(1.0) + np.float32(0.1) * value
    return value * np.float32(0.02)


def tensors(dims, seed=0):
    """A function from each HF tensor name of `dims` to its random value (float32)."""
    return lambda name: tensor(name, gemma4_map.expected_hf_shape(dims, name), seed)


def spec_config(spec):
    """The config.json dict of `model.random` (like, layers, width_divisor), without
    writing any weights (what the ahead-of-time compile and the planner need)."""
    like = spec.like or DEFAULT_LIKE
    hf_config, _ = base_model.config_only(like)
    return shrink_config(hf_config, spec.layers, spec.width_divisor)


def base_config(model, name=""):
    """(config.json dict, where it came from) of a config's base without its
    weights: `name` (a directory, a file or a Hub id; default `model.name`), or
    for `random-gemma4` the shape `model.random` describes."""
    name = name or model.name
    if name == base_model.RANDOM:
        return spec_config(model.random), f"{name}: {model.random.to_dict()}"
    return base_model.config_only(name)


def write(path, hf_config, seed=0):
    """Writes the model directory of text config `hf_config` at `path` (atomically;
    an existing one is kept); returns path."""
    if os.path.exists(os.path.join(path, "config.json")):
        return path
    from data import tokenizer as tokenizer_lib  # pylint: disable=import-outside-toplevel
    from safetensors.numpy import save_file  # pylint: disable=import-outside-toplevel
    tokenizer = tokenizer_lib.build_tokenizer()
    dims = gemma4_map.Dims.from_hf_config(hf_config)
    if len(tokenizer) > dims.vocab:
        raise RandomModelError(f"the embedded tokenizer's {len(tokenizer)} tokens do not fit "
                               f"the vocabulary of {dims.vocab}")
    config = dict(hf_config, pad_token_id=tokenizer.pad_token_id,
                  bos_token_id=tokenizer.bos_token_id,
                  eos_token_id=tokenizer_lib.end_of_turn_ids(tokenizer), dtype="bfloat16")
    tmp = f"{path}.tmp{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    draw = tensors(dims, seed)
    save_file({name: draw(name).astype(ml_dtypes.bfloat16)
               for name in gemma4_map.base_names(dims)},
              os.path.join(tmp, WEIGHTS), metadata={"format": "pt"})
    storage.write_json(os.path.join(tmp, "config.json"), config)
    storage.write_json(os.path.join(tmp, "generation_config.json"), {
        "bos_token_id": config["bos_token_id"], "eos_token_id": config["eos_token_id"],
        "pad_token_id": config["pad_token_id"]})
    tokenizer.save_pretrained(tmp)
    os.replace(tmp, path)
    return path


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("path", help="the model directory to write")
    parser.add_argument("--like", default=DEFAULT_LIKE,
                        help="config.json, its directory or a Hub id (default: %(default)s)")
    parser.add_argument("--layers", type=int, default=0, help="keep the first N (0: all)")
    parser.add_argument("--width_divisor", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    try:
        hf_config, _ = base_model.config_only(args.like)
        print(write(args.path, shrink_config(hf_config, args.layers, args.width_divisor),
                    args.seed))
    except cli.UserError as e:
        raise SystemExit(f"error: {e}") from None


if __name__ == "__main__":
    main()
