"""Streaming merge of a LoRA adapter into a sharded Hugging Face checkpoint.

For each weight W with factors A, B: W' = W + (alpha / r) * B @ A, computed in
float32 and cast back to W's dtype. Shards are processed one at a time and
keep the base's file names and index, whatever the model size (the reference
loaded all 62 GB into one file).
Config, generation config, tokenizer and chat template are copied alongside.
Tensors are read and written one at a time (conversion/safetensors_stream.py),
so peak memory is about the largest tensor (in fp32) plus the LoRA factors.
"""

import json
import os
import re
import shutil

import torch

from conversion import safetensors_stream
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
    for path in sorted(set(files.values())):
        header, metadata, data_start = safetensors_stream.read_header(path)
        order = sorted(header, key=lambda n: header[n]["data_offsets"][0])
        writer = safetensors_stream.Writer(
            os.path.join(out_dir, os.path.basename(path)),
            {n: (header[n]["dtype"], header[n]["shape"]) for n in order}, metadata)
        fd = os.open(path, os.O_RDONLY)
        try:
            for name in order:
                tensor = safetensors_stream.read_tensor(fd, header[name], data_start)
                if name in deltas:
                    tensor = _merged(name, tensor, deltas[name], alpha)
                writer.write(name, tensor)
                if progress is not None:
                    progress.update(tensor.numel() * tensor.element_size())
                del tensor
        finally:
            os.close(fd)
        writer.close()
    for name in sorted(os.listdir(base_dir)):
        source = os.path.join(base_dir, name)
        if os.path.isfile(source) and not name.endswith(".safetensors") and name != INDEX:
            shutil.copy2(source, os.path.join(out_dir, name))
    if os.path.exists(os.path.join(base_dir, INDEX)):
        shutil.copy2(os.path.join(base_dir, INDEX), os.path.join(out_dir, INDEX))


def _merged(name, weight, factors, alpha):
    a, b = (torch.as_tensor(x, dtype=torch.float32) for x in factors)
    if (b.shape[0], a.shape[1]) != tuple(weight.shape):
        raise MergeError(f"{name}: B @ A is {(b.shape[0], a.shape[1])}, the base tensor "
                         f"is {tuple(weight.shape)}")
    # One fp32 copy of W, updated in place by the fused B @ A.
    merged = weight.to(torch.float32)
    merged.addmm_(b, a, alpha=alpha / a.shape[0])
    return merged.to(weight.dtype)


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
