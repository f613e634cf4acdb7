"""PEFT adapter directories: adapter_config.json + adapter_model.safetensors.

Written through PEFT's own LoraConfig, so the config holds every field PEFT
and vLLM read (r, lora_alpha, target_modules, base model, task type).
"""

import json
import os
import re

import numpy as np
from safetensors.numpy import load_file
from safetensors.numpy import save_file

from common import cli

CONFIG = "adapter_config.json"
WEIGHTS = "adapter_model.safetensors"


class AdapterError(cli.UserError):
    """An adapter directory that cannot be read, named by its file."""


def target_modules_for(modules, layer_prefix):
    """PEFT target_modules: plain names for a text model; for the multimodal
    checkpoint a regex that keeps LoRA out of the vision tower."""
    if layer_prefix == "model.":
        return sorted(modules)
    return rf".*language_model.*\.({'|'.join(sorted(modules))})"


def write(out_dir, factors, *, rank, alpha, dropout, modules, base_model, layer_prefix):
    from peft import LoraConfig  # pylint: disable=import-outside-toplevel
    config = LoraConfig(r=rank, lora_alpha=alpha, lora_dropout=dropout,
                        target_modules=target_modules_for(modules, layer_prefix),
                        bias="none", task_type="CAUSAL_LM", base_model_name_or_path=base_model,
                        inference_mode=True)
    config.save_pretrained(out_dir)
    save_file({k: np.ascontiguousarray(v, np.float32) for k, v in factors.items()},
              os.path.join(out_dir, WEIGHTS), metadata={"format": "pt"})


def read_config(adapter_dir):
    """adapter_config.json of a LoRA adapter, as a dict (no tensor is read)."""
    path = os.path.join(adapter_dir, CONFIG)
    try:
        with open(path) as f:
            config = json.load(f)
    except FileNotFoundError:
        raise AdapterError(f"{adapter_dir} is not an adapter directory (no {CONFIG})") from None
    except (OSError, ValueError) as e:
        raise AdapterError(f"cannot read {path}: {e}") from None
    if not isinstance(config, dict) or config.get("peft_type", "LORA") != "LORA" \
            or not isinstance(config.get("r"), int):
        raise AdapterError(f"{path} is not a LoRA adapter config (needs peft_type LORA and r)")
    return config


def read(adapter_dir):
    """(factors {PEFT name: float32 array}, config dict)."""
    config = read_config(adapter_dir)
    weights_path = os.path.join(adapter_dir, WEIGHTS)
    if not os.path.exists(weights_path):
        raise AdapterError(f"missing {weights_path}")
    try:
        factors = load_file(weights_path)
    except Exception as e:  # safetensors raises its own types
        raise AdapterError(f"cannot read {weights_path}: {e}") from e
    ranks = {v.shape[0] for k, v in factors.items() if ".lora_A." in k}
    if ranks != {config["r"]}:
        raise AdapterError(f"{os.path.join(adapter_dir, CONFIG)} says r={config['r']} but "
                           f"{WEIGHTS} has lora_A ranks {sorted(ranks)}")
    return {k: v.astype(np.float32) for k, v in factors.items()}, config


_K_PROJ = re.compile(r"^(?P<head>.*\.layers\.(?P<layer>\d+)\.self_attn\.)k_proj\."
                     r"(?P<tail>lora_[AB]\.weight)$")


def kv_shared_copies(factors, dims):
    """v_proj factors equal to k_proj's on the layers where V is K (K = V global layers).

    In transformers these layers have no v_proj: V is K's projection, so a
    k_proj LoRA changes both. vLLM packs q/k/v into one qkv_proj and copies K's
    weight into V's slot, but applies LoRA slice by slice: without a v_proj
    factor its V misses the delta and it serves another model than was trained.
    """
    copies = {}
    for name, value in factors.items():
        match = _K_PROJ.match(name)
        if not match or not dims.attention(int(match["layer"])).k_eq_v:
            continue
        v_name = f"{match['head']}v_proj.{match['tail']}"
        if v_name not in factors:
            copies[v_name] = value
    return copies


def write_for_vllm(adapter_dir, out_dir, dims):
    """The adapter as vLLM must load it (kv_shared_copies added), in `out_dir`; returns
    the directory to serve: `adapter_dir` itself when nothing needs adding.

    The adapter written by export and the trainers stays PEFT's: PEFT refuses
    factors for modules the model does not have.
    """
    factors, config = read(adapter_dir)
    copies = kv_shared_copies(factors, dims)
    if not copies:
        return adapter_dir
    targets = config.get("target_modules")
    if isinstance(targets, list) and "v_proj" not in targets:
        config["target_modules"] = sorted(targets + ["v_proj"])
    elif isinstance(targets, str) and "v_proj" not in targets:
        config["target_modules"] = targets.replace("k_proj", "k_proj|v_proj")
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, CONFIG), "w") as f:
        json.dump(config, f, indent=2)
    save_file({k: np.ascontiguousarray(v) for k, v in {**factors, **copies}.items()},
              os.path.join(out_dir, WEIGHTS), metadata={"format": "pt"})
    return out_dir
