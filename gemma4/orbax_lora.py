"""The Orbax LoRA state on disk: what TPU checkpoints hold under `STEP/lora`.

Readable on any host without the model or the devices that wrote it, as
{`layers.0.attn.q_einsum.w_lora_a`: numpy array}, and writable from such a
dict (the reverse conversion), in the layout the TPU stack's checkpoints and
`--config.lora.init_from` read.
"""

import os

import jax
import numpy as np
import orbax.checkpoint as ocp

from common import cli


class NoLoraError(cli.UserError):
    """A checkpoint (or directory) without LoRA factors."""


def _key_name(key):
    for attribute in ("key", "name", "idx"):
        if hasattr(key, attribute):
            return str(getattr(key, attribute))
    return str(key)


def read(step_dir):
    path = os.path.join(step_dir, "lora")
    if not os.path.isdir(path):
        raise NoLoraError(f"{step_dir} holds no LoRA state (no {path})")
    checkpointer = ocp.PyTreeCheckpointer()
    metadata = checkpointer.metadata(path).item_metadata.tree
    restore_args = jax.tree.map(lambda _: ocp.RestoreArgs(restore_type=np.ndarray), metadata)
    tree = checkpointer.restore(path, args=ocp.args.PyTreeRestore(restore_args=restore_args))
    flat = {}
    for key_path, value in jax.tree_util.tree_leaves_with_path(tree):
        # nnx State leaves are Variables saved as {"value": array}.
        names = [_key_name(k) for k in key_path]
        flat[".".join(n for n in names if n != "value")] = np.asarray(value)
    if not flat:
        raise NoLoraError(f"{path} holds no LoRA factor")
    return flat


def write(step_dir, factors):
    """Writes {flat name: array} as `step_dir/lora` (nested by the name's parts)."""
    tree = {}
    for name, value in factors.items():
        node = tree
        *parents, leaf = name.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = {"value": np.asarray(value)}
    os.makedirs(step_dir, exist_ok=True)
    ocp.PyTreeCheckpointer().save(os.path.join(step_dir, "lora"), tree)
