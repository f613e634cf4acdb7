"""PEFT adapter directories: adapter_config.json + adapter_model.safetensors.

Written through PEFT's own LoraConfig, so the config holds every field PEFT
and vLLM read (r, lora_alpha, target_modules, base model, task type).
"""

import json
import os

import numpy as np
from safetensors.numpy import load_file
from safetensors.numpy import save_file

CONFIG = "adapter_config.json"
WEIGHTS = "adapter_model.safetensors"


class AdapterError(ValueError):
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


def read(adapter_dir):
    """(factors {PEFT name: float32 array}, config dict)."""
    config_path = os.path.join(adapter_dir, CONFIG)
    weights_path = os.path.join(adapter_dir, WEIGHTS)
    for path in (config_path, weights_path):
        if not os.path.exists(path):
            raise AdapterError(f"missing {path}")
    try:
        with open(config_path) as f:
            config = json.load(f)
        factors = load_file(weights_path)
    except Exception as e:  # JSON and safetensors raise their own types
        raise AdapterError(f"cannot read {adapter_dir}: {e}") from e
    if config.get("peft_type", "LORA") != "LORA" or "r" not in config:
        raise AdapterError(f"{config_path} is not a LoRA adapter config")
    ranks = {v.shape[0] for k, v in factors.items() if ".lora_A." in k}
    if ranks != {config["r"]}:
        raise AdapterError(f"{config_path} says r={config['r']} but {WEIGHTS} has "
                           f"lora_A ranks {sorted(ranks)}")
    return {k: v.astype(np.float32) for k, v in factors.items()}, config
