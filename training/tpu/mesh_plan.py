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


class MeshError(ValueError):
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


def parameter_count(dims):
    """Parameters of the text model (tied embeddings counted once)."""
    total = dims.vocab * dims.embed + dims.embed
    for layer in range(dims.num_layers):
        kv_heads, head_dim, k_eq_v = dims.attention(layer)
        q = o = dims.heads * head_dim * dims.embed
        kv = kv_heads * head_dim * dims.embed * (1 if k_eq_v else 2)
        total += q + o + kv + 3 * dims.mlp * dims.embed + 4 * dims.embed + 2 * head_dim + 1
    return total


def lora_parameter_count(dims, rank, tunix_modules):
    """Parameters of the LoRA factors Qwix creates on `tunix_modules`."""
    total = 0
    for layer in range(dims.num_layers):
        kv_heads, head_dim, k_eq_v = dims.attention(layer)
        sizes = {  # (contracted size, output size) of each einsum / kernel
            "q_einsum": (dims.embed, dims.heads * head_dim),
            "kv_einsum": None if k_eq_v else (dims.embed, 2 * kv_heads * head_dim),
            "k_einsum": (dims.embed, kv_heads * head_dim) if k_eq_v else None,
            "attn_vec_einsum": (dims.heads * head_dim, dims.embed),
            "gate_proj": (dims.embed, dims.mlp), "up_proj": (dims.embed, dims.mlp),
            "down_proj": (dims.mlp, dims.embed),
        }
        total += sum(rank * sum(sizes[m]) for m in tunix_modules if sizes.get(m))
    return total


GIB = 1024**3


def hbm_estimate(dims, mesh, *, seq_len, micro_batch, base_bytes, lora_rank, tunix_modules,
                 remat=True):
    """Bytes per chip by component: base weights, LoRA, optimizer state, activations.

    A planning figure, not a measurement: weights and LoRA are split over all
    chips (LoRA factors in float32); Adam keeps two float32 moments and the
    gradients one copy of the LoRA factors; with remat every layer keeps its input (B x T x D) and one
    layer at a time holds its attention scores (fp32, heads split over tp)
    and MLP activations; the fp32 logits are split over tp. Plus 10% for
    XLA's workspace.
    """
    chips = mesh.devices
    local_batch = micro_batch / mesh.fsdp
    tokens = local_batch * seq_len
    lora = lora_parameter_count(dims, lora_rank, tunix_modules)
    kept_per_layer = tokens * dims.embed * base_bytes / mesh.tp
    attention_scores = tokens * seq_len * dims.heads * 4 / mesh.tp
    mlp = 3 * tokens * dims.mlp * base_bytes / mesh.tp
    layer_live = attention_scores + mlp + 8 * kept_per_layer
    activations = (dims.num_layers * kept_per_layer + layer_live if remat
                   else dims.num_layers * layer_live)
    logits = 2 * tokens * dims.vocab * 4 / mesh.tp
    parts = {
        "base_weights": parameter_count(dims) * base_bytes / chips,
        "lora": lora * 4 / chips,  # float32 factors
        "gradients": lora * 4 / chips,
        "optimizer_state": 2 * lora * 4 / chips,
        "activations": activations + logits,
    }
    parts["xla_workspace"] = 0.1 * sum(parts.values())
    parts["total"] = sum(parts.values())
    return parts


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


def flops_per_token(dims, seq_len, lora_rank, tunix_modules):
    """Model FLOPs per trained-on token of a LoRA step (the MFU numerator).

    Matmuls: forward 2P plus the backward pass's input gradients 2P; the
    frozen base needs no weight gradients, LoRA factors need forward, input
    and weight gradients (6 per parameter). Attention: forward 4 x heads x
    head_dim x attended keys per layer (QK^T and AV), backward twice that;
    attended keys are (T+1)/2 for causal layers and at most the window for
    sliding ones. Rematerialization is not counted (it is overhead, not
    model work), so MFU stays comparable across remat settings.
    """
    matmul_params = parameter_count(dims) - dims.vocab * dims.embed  # embedding lookup is free
    matmul_params += dims.vocab * dims.embed  # ...but the tied output projection is not
    flops = 4 * matmul_params + 6 * lora_parameter_count(dims, lora_rank, tunix_modules)
    causal_keys = (seq_len + 1) / 2
    for layer in range(dims.num_layers):
        _, head_dim, _ = dims.attention(layer)
        keys = (min(dims.sliding_window, causal_keys)
                if dims.layer_types[layer] != "full_attention" else causal_keys)
        flops += 3 * 4 * dims.heads * head_dim * keys
    return flops


def mfu(tokens_per_second, flops_per_token_value, chips, peak_flops_per_chip):
    if not peak_flops_per_chip:
        return None
    return tokens_per_second * flops_per_token_value / (chips * peak_flops_per_chip)

