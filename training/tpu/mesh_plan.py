"""Mesh planning before any weight is loaded: divisibility and an HBM estimate.

The TPU stack shards Gemma 4 over a 2-D mesh (`fsdp`, `tp`) with Tunix's
default layout: `tp` splits attention heads (query, KV and the global layers'
KV heads), the MLP hidden size, the vocabulary and the norm vectors; `fsdp`
splits the model dimension and the batch. An axis that does not divide a
dimension it splits fails deep inside XLA after minutes of loading (the
reference's tp=8 on 31B, whose global layers have 4 KV heads); here it fails
at once, naming the dimension and listing the meshes that would work.
"""

import dataclasses

from tools.common import cli
from training.formats import gemma4_map
from training.common.flops import lora_parameter_count
from training.common.flops import parameter_count


class MeshError(cli.UserError):
    """A mesh that cannot shard the model, or a run that cannot fit."""


@dataclasses.dataclass(frozen=True)
class Mesh:
    fsdp: int
    tp: int

    @property
    def devices(self):
        return self.fsdp * self.tp


def sharded_dimensions(dims):
    """(mesh axis, dimension name, size) for every dimension an axis splits."""
    return [
        ("tp", "query heads", dims.heads),
        ("tp", "KV heads", dims.kv_heads),
        ("tp", "global KV heads", dims.global_kv_heads),
        ("tp", "MLP hidden size", dims.mlp),
        ("tp", "vocabulary size", dims.vocab),
        ("tp", "model dimension (norm scales)", dims.embed),
        ("tp", "head dim (q/k norm scales)", dims.head_dim),
        ("tp", "global head dim (q/k norm scales)", dims.global_head_dim),
        ("fsdp", "model dimension", dims.embed),
    ]


def problems(mesh, dims, num_devices, batch_per_step=None):
    """Every reason `mesh` cannot work, as sentences; empty if it can."""
    found = []
    if mesh.fsdp < 1 or mesh.tp < 1:
        return [f"mesh axes must be >= 1, got fsdp={mesh.fsdp}, tp={mesh.tp}"]
    if mesh.devices != num_devices:
        found.append(f"fsdp x tp = {mesh.fsdp} x {mesh.tp} = {mesh.devices} "
                     f"but there are {num_devices} devices")
    size = {"fsdp": mesh.fsdp, "tp": mesh.tp}
    for axis, name, value in sharded_dimensions(dims):
        if value % size[axis]:
            found.append(f"{axis}={size[axis]} does not divide the {name} ({value})")
    if batch_per_step is not None and batch_per_step % mesh.fsdp:
        found.append(f"fsdp={mesh.fsdp} does not divide the {batch_per_step} sequences "
                     "of a micro-batch")
    return found


def valid_meshes(dims, num_devices):
    return [Mesh(f, num_devices // f) for f in range(1, num_devices + 1)
            if num_devices % f == 0 and not problems(Mesh(f, num_devices // f), dims, num_devices)]


def check(mesh, dims, num_devices, batch_per_step=None):
    """Raises MeshError naming what does not divide and listing valid meshes."""
    found = problems(mesh, dims, num_devices, batch_per_step)
    if found:
        valid = ", ".join(f"(fsdp={m.fsdp}, tp={m.tp})" for m in valid_meshes(dims, num_devices))
        raise MeshError(f"invalid mesh (fsdp={mesh.fsdp}, tp={mesh.tp}): " + "; ".join(found) +
                        f". Valid meshes for {num_devices} devices: {valid or 'none'}.")


GIB = 1024**3


def hbm_estimate(dims, mesh, *, seq_len, micro_batch, base_bytes, lora_rank, tunix_modules,
                 remat=True):
    """Bytes per chip by component: base weights, LoRA, optimizer state, activations.

    A planning figure, checked against XLA's own buffer assignment for the
    real 31B widths (training/tpu/compile_test.py, //training/tpu:compile):
    weights and LoRA are split over all chips (LoRA factors in float32); Adam
    keeps two float32 moments and the gradients one copy of the LoRA factors.
    With remat every layer keeps two B x T x D tensors (its input and the
    residual stream) and one layer at a time holds its live activations: six
    fp32 copies of the attention scores (scores, masked scores, probabilities
    and their gradients; heads split over tp, dense T x T as the step computes
    them) and the MLP's three hidden tensors. The output projection holds its
    logits and their gradient in fp32, split over tp.
    """
    chips = mesh.devices
    local_batch = micro_batch / mesh.fsdp
    tokens = local_batch * seq_len
    lora = lora_parameter_count(dims, lora_rank, tunix_modules)
    kept_per_layer = tokens * dims.embed * base_bytes / mesh.tp
    attention_scores = 6 * tokens * seq_len * dims.heads * 4 / mesh.tp
    mlp = 3 * tokens * dims.mlp * base_bytes / mesh.tp
    layer_live = attention_scores + mlp + 8 * kept_per_layer
    activations = (2 * dims.num_layers * kept_per_layer + layer_live if remat
                   else dims.num_layers * layer_live)
    logits = 2 * tokens * dims.vocab * 4 / mesh.tp
    parts = {
        "base_weights": parameter_count(dims) * base_bytes / chips,
        "lora": lora * 4 / chips,  # float32 factors
        "gradients": lora * 4 / chips,
        "optimizer_state": 2 * lora * 4 / chips,
        "activations": activations + logits,
    }
    parts["total"] = sum(parts.values())
    return parts


BYTES = {"bfloat16": 2, "float32": 4}


def config_estimate(dims, config, mesh, *, seq_len, micro_batch, remat):
    """hbm_estimate for a TPU training config's dtype and LoRA."""
    return hbm_estimate(
        dims, mesh, seq_len=seq_len, micro_batch=micro_batch,
        base_bytes=BYTES[config.model.dtype], lora_rank=config.lora.rank,
        tunix_modules=gemma4_map.tunix_lora_modules(config.lora.target_modules), remat=remat)


def format_estimate(parts, hbm_bytes=None):
    lines = [f"  {name:<16} {value / GIB:8.2f} GiB" for name, value in parts.items()]
    if hbm_bytes:
        lines.append(f"  {'HBM per chip':<16} {hbm_bytes / GIB:8.2f} GiB "
                     f"({100 * parts['total'] / hbm_bytes:.0f}% used)")
    return "\n".join(lines)


def check_fits(parts, hbm_bytes):
    if hbm_bytes and parts["total"] > hbm_bytes:
        raise MeshError("the run does not fit in HBM: estimated per chip\n" +
                        format_estimate(parts, hbm_bytes) +
                        "\nLower the sequence length or micro-batch, enable remat, or use "
                        "more chips.")

