"""Streaming merge of a LoRA adapter into a sharded Hugging Face checkpoint.

For each weight W with factors A, B: W' = W + (alpha / r) * B @ A, computed in
float32 and cast back to W's dtype. Shards are processed one at a time and
keep the base's file names and index, so peak memory is about one shard plus
the LoRA factors, whatever the model size (the reference loaded all 62 GB).
Config, generation config, tokenizer and chat template are copied alongside.
"""

import json
import os
import re
import shutil

import torch
from safetensors import safe_open
from safetensors.torch import save_file

from training.common import base_model

INDEX = "model.safetensors.index.json"
_PEFT = re.compile(r"^base_model\.model\.(?P<module>.+)\.lora_(?P<which>[AB])\.weight$")


class MergeError(ValueError):
    """Factors that do not fit the base checkpoint, named by tensor."""


def weight_deltas(peft_factors):
    """{HF weight name: (A, B)} from PEFT factor names."""
    pairs = {}
    for name, value in peft_factors.items():
        match = _PEFT.match(name)
        if not match:
            raise MergeError(f"unexpected adapter tensor {name}")
        pairs.setdefault(match.group("module") + ".weight", {})[match.group("which")] = value
    for weight, pair in pairs.items():
        if set(pair) != {"A", "B"}:
            raise MergeError(f"{weight}: the adapter lacks lora_{({'A', 'B'} - set(pair)).pop()}")
    return {weight: (pair["A"], pair["B"]) for weight, pair in pairs.items()}


def merge(base_dir, out_dir, peft_factors, alpha, progress=None):
    """Writes the merged checkpoint into `out_dir` (an existing, empty directory)."""
    files = base_model.safetensors_files(base_dir)
    deltas = weight_deltas(peft_factors)
    absent = sorted(set(deltas) - set(files))
    if absent:
        raise MergeError(f"the base checkpoint has no tensor {absent[0]} "
                         f"(and {len(absent) - 1} more) for the adapter's factors")
    by_file = {}
    for name, path in files.items():
        by_file.setdefault(path, []).append(name)
    for path in sorted(by_file):
        merged = {}
        with safe_open(path, "pt") as shard:
            metadata = shard.metadata()
            for name in by_file[path]:
                tensor = shard.get_tensor(name)
                if name in deltas:
                    a, b = (torch.as_tensor(x, dtype=torch.float32) for x in deltas[name])
                    if (b.shape[0], a.shape[1]) != tuple(tensor.shape):
                        raise MergeError(
                            f"{name}: B @ A is {(b.shape[0], a.shape[1])}, the base tensor "
                            f"is {tuple(tensor.shape)}")
                    update = (alpha / a.shape[0]) * (b @ a)
                    tensor = (tensor.to(torch.float32) + update).to(tensor.dtype)
                merged[name] = tensor.contiguous()
                if progress is not None:
                    progress.update(tensor.numel() * tensor.element_size())
        save_file(merged, os.path.join(out_dir, os.path.basename(path)), metadata=metadata)
        del merged
    for name in sorted(os.listdir(base_dir)):
        source = os.path.join(base_dir, name)
        if os.path.isfile(source) and not name.endswith(".safetensors") and name != INDEX:
            shutil.copy2(source, os.path.join(out_dir, name))
    if os.path.exists(os.path.join(base_dir, INDEX)):
        shutil.copy2(os.path.join(base_dir, INDEX), os.path.join(out_dir, INDEX))


def total_bytes(base_dir):
    return sum(os.path.getsize(p) for p in set(base_model.safetensors_files(base_dir).values()))


def fingerprint(base_dir):
    """sha256 of the base's index (or tensor names) and config: which base this is."""
    import hashlib  # pylint: disable=import-outside-toplevel
    digest = hashlib.sha256()
    index = os.path.join(base_dir, INDEX)
    if os.path.exists(index):
        with open(index, "rb") as f:
            digest.update(f.read())
    else:
        digest.update(json.dumps(sorted(base_model.safetensors_files(base_dir))).encode())
    with open(os.path.join(base_dir, "config.json"), "rb") as f:
        digest.update(f.read())
    return digest.hexdigest()
