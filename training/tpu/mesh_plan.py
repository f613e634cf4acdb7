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

from common import cli
from gemma4 import gemma4_map
from training.common import hparams
from training.common import memory
from training.common.flops import lora_parameter_count
from training.common.flops import parameter_count
from training.common.memory import BYTES


class MeshError(cli.UserError):
    """A mesh that cannot shard the model, or a run that cannot fit."""


@dataclasses.dataclass(frozen=True)
class Mesh:
    fsdp: int
    tp: int

    @property
    def devices(self):
        return self.fsdp * self.tp

    @classmethod
    def from_config(cls, config):
        return cls(config.mesh.fsdp, config.mesh.tp)


def batch_shape(config):
    """(accumulation steps, micro-batch, sequence length) of one optimizer step's
    batch; a micro-batch is the per-device batch on each of the fsdp replicas."""
    micro_batch = config.batch.per_device_size * config.mesh.fsdp
    return (hparams.gradient_accumulation_steps(config.batch, config.mesh.fsdp), micro_batch,
            config.data.max_seq_len)


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


# The activation terms, calibrated on XLA's buffer assignment for the 31B widths
# on v5p-8 (docs/performance.md, "Gemma 4 31B on v5p-8, compiled without a TPU",
# holds the fit): how many tensors of each
# kind a layer keeps for its backward pass, and the bytes per logit.
STREAM_TENSORS = 2  # [tokens, D] in the base dtype; D is not split over tp
MLP_TENSORS = 3  # [tokens, F / tp] in the base dtype: gate, up and their product
LOGIT_BYTES = 3  # per [token, vocab / tp] entry: between bf16 logits and an fp32 copy
# With fsdp > 1: all-gathered copies of the embedding and a layer.
GATHERED_COPIES = 3
# Unrolled, without remat, XLA also keeps attention's q, k and v twice (their
# norms' inputs, and normed and rotated: what attention reads); the output and
# down projections' outputs scattered to the chip's D / tp, for the norms
# after them; and each LoRA dropout mask drawn by XLA's generator (`rbg`;
# threefry's are hashed again in the backward pass): a byte per element of
# the projection's input (an input of model width counts D / tp per chip).
# Read off the optimized HLO of v5p8.py's unrolled step: the values live at
# its peak, at 2 and 12 layers (docs/performance.md).
QKV_COPIES = 2
MASK_BYTES = 1


def _layer_widths(dims, layer, tp, tunix_modules):
    """(q width, k and v width) per token on a chip, and the LoRA modules `layer`
    has (a K = V layer has no kv_einsum, the others no k_einsum)."""
    attn = dims.attention(layer)
    query = dims.heads * attn.head_dim / tp
    key_value = (1 if attn.k_eq_v else 2) * attn.kv_heads * attn.head_dim / tp
    absent = "kv_einsum" if attn.k_eq_v else "k_einsum"
    return query, key_value, [module for module in tunix_modules if module != absent]


def _scanned_kept(dims, layers, tokens, tp, base_bytes, scores, lora_rank, tunix_modules):
    """Bytes `layers` keep for the backward pass when scanned without remat
    (`forward.scanned_saves`): each layer's input, each projection's base matmul
    output (q, kv or k, o, gate, up, down; heads and the MLP hidden size split
    over tp), what attention returns (its output, plus dense attention's scores)
    and each LoRA projection's x @ A (rank wide, not split)."""
    kept = 0
    for layer in layers:
        query, key_value, modules = _layer_widths(dims, layer, tp, tunix_modules)
        lora = lora_rank * len(modules)
        kept += (3 * dims.embed + 2 * query + key_value + 2 * dims.mlp / tp + lora
                 ) * tokens * base_bytes
    return kept + len(layers) * scores


def _unrolled_kept(dims, layer, tokens, tp, base_bytes, tunix_modules, dropout_masks):
    """Bytes an unrolled layer keeps besides `STREAM_TENSORS` and `MLP_TENSORS`:
    q, k and v twice, attention's output, the output and down projections'
    outputs (the chip's part) and each LoRA projection's dropout mask."""
    query, key_value, modules = _layer_widths(dims, layer, tp, tunix_modules)
    kept = ((QKV_COPIES * (query + key_value) + query + 2 * dims.embed / tp)
            * base_bytes)
    if dropout_masks:
        inputs = {"attn_vec_einsum": query, "down_proj": dims.mlp / tp}  # else model-wide
        kept += MASK_BYTES * sum(inputs.get(module, dims.embed / tp) for module in modules)
    return kept * tokens


def hbm_estimate(dims, mesh, *, seq_len, micro_batch, base_bytes, lora_rank, tunix_modules,
                 remat=True, attention="dense", scanned_layers=0, dropout_masks=False):
    """Bytes per chip by component: base weights, LoRA, optimizer state, activations.

    A planning figure, checked against XLA's own buffer assignment for the
    real 31B widths (training/tpu/compile_test.py, //training/tpu:compile):
    weights and LoRA are split over all chips (LoRA factors in float32); Adam
    keeps two float32 moments and the gradients one copy of the LoRA factors.
    A layer's backward pass needs `STREAM_TENSORS` D-wide tensors,
    `MLP_TENSORS` MLP hidden tensors and, with dense attention, one fp32 copy
    of its T x T scores (heads split over tp; splash attention keeps none),
    and what XLA keeps of attention and LoRA (`_unrolled_kept`; dropout's
    masks with `dropout_masks`). Without remat every layer keeps that (the
    first `scanned_layers`, run by the scan's loop: what it keeps instead,
    `_scanned_kept`); with remat every layer keeps only its input and one
    layer at a time is recomputed, holding what an unrolled layer keeps (the
    largest: a global layer's; assumed, not read off a remat step). The
    output projection adds `LOGIT_BYTES` per logit. With fsdp > 1, weights are
    all-gathered before use: `GATHERED_COPIES` of the embedding and one layer,
    split over tp.
    """
    chips = mesh.devices
    tokens = micro_batch / mesh.fsdp * seq_len  # token positions per chip
    lora = lora_parameter_count(dims, lora_rank, tunix_modules)
    scores = tokens * seq_len * dims.heads * 4 / mesh.tp if attention == "dense" else 0
    layer = (STREAM_TENSORS * tokens * dims.embed * base_bytes
             + MLP_TENSORS * tokens * dims.mlp * base_bytes / mesh.tp + scores)
    unrolled_kept = [_unrolled_kept(dims, i, tokens, mesh.tp, base_bytes, tunix_modules,
                                    dropout_masks) for i in range(dims.num_layers)]
    if remat:
        activations = (dims.num_layers * tokens * dims.embed * base_bytes + layer
                       + max(unrolled_kept, default=0))
    else:
        activations = (_scanned_kept(dims, range(scanned_layers), tokens, mesh.tp, base_bytes,
                                     scores, lora_rank, tunix_modules)
                       + (dims.num_layers - scanned_layers) * layer
                       + sum(unrolled_kept[scanned_layers:]))
    logits = LOGIT_BYTES * tokens * dims.vocab / mesh.tp
    one_layer = (parameter_count(dims) - dims.vocab * dims.embed) / dims.num_layers
    gathered = (GATHERED_COPIES * (dims.vocab * dims.embed + one_layer) * base_bytes / mesh.tp
                if mesh.fsdp > 1 else 0)
    parts = {
        "base_weights": parameter_count(dims) * base_bytes / chips,
        "lora": lora * 4 / chips,  # float32 factors
        "gradients": lora * 4 / chips,
        "optimizer_state": 2 * lora * 4 / chips,
        "activations": activations + logits,
        "gathered_weights": gathered,
    }
    parts["total"] = sum(parts.values())
    return parts


def config_estimate(dims, config, scanned_layers=0):
    """hbm_estimate for a TPU training config (its mesh, batch, dtype, LoRA, remat
    and attention kernel) whose first `scanned_layers` run scanned
    (`layer_scan.Plan.scanned`)."""
    _, micro_batch, seq_len = batch_shape(config)
    return hbm_estimate(
        dims, Mesh.from_config(config), seq_len=seq_len, micro_batch=micro_batch,
        base_bytes=BYTES[config.model.dtype], lora_rank=config.lora.rank,
        tunix_modules=gemma4_map.tunix_lora_modules(config.lora.target_modules),
        remat=bool(config.remat), attention=config.attention.kernel,
        scanned_layers=scanned_layers,
        dropout_masks=config.lora.dropout > 0 and config.dropout_rng != "threefry2x32")


def format_estimate(parts, hbm_bytes=None):
    return memory.format_parts(parts, hbm_bytes, "HBM per chip", width=16)


def check_fits(parts, hbm_bytes):
    if hbm_bytes and parts["total"] > hbm_bytes:
        raise MeshError("the run does not fit in HBM: estimated per chip\n" +
                        format_estimate(parts, hbm_bytes) +
                        "\nLower the sequence length or micro-batch, enable remat, use splash "
                        "attention (--config.attention.kernel=splash), or use "
                        "more chips.")

