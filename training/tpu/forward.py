"""The training forward pass over packed rows: Tunix's Gemma 4 weights, our attention and loss.

Tunix's `Gemma4.__call__` takes a dense [B, T, T] mask, and its flash path
(Pallas splash attention) drops `segment_ids`: packed rows would attend across
examples. Training therefore runs its own forward pass over Tunix's modules
(`Gemma4` below): the same embedder, projections, norms, RoPE (Tunix's
`apply_rope`), MLP and layer scalar, composed as Tunix's decoder layer composes
them, with attention restricted to each token's own segment by one of two
kernels:

- `dense`: logits for every (query, key) pair and a [B, T, T] mask built from
  the segment ids. Runs anywhere; memory grows with T^2 per head.
- `splash`: Pallas splash attention with `SegmentIds`, under `shard_map` over
  the mesh (batch over fsdp, heads over tp). Blocks that the causal or
  sliding-window mask rules out entirely are skipped, and no T x T array is
  kept. On CPU it runs in Pallas interpret mode (tests); on TPU it compiles to
  a Mosaic kernel, whose FLOPs XLA's cost model cannot see (`kernel_flops`).

Both follow one definition: a token attends to itself and earlier tokens of
its segment (within the sliding window on local layers); padding, segment 0,
is one more segment (its outputs are never trained).

The loss (`loss_sum`) is computed from the final hidden states, optionally
chunk by chunk along the sequence with each chunk's logits recomputed in the
backward pass, so the [B, T, vocab] float32 logits (262,144 entries per token
at 31B) never exist at once.

LoRA: Qwix intercepts the model's `__call__`, so the packed path runs inside
it (`segment_ids=`) and the Einsum/Linear modules it calls get their factors.
"""

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_kernel as splash
from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_mask as masks
from jax.sharding import PartitionSpec as P
from tunix.models.gemma4 import model as gemma4

from common import cli
from gemma4 import gemma4_map
from training.tpu import layer_scan

KERNELS = ("dense", "splash")
_MASKED = -2.3819763e38  # Tunix's mask value (a large negative finite float32)


class ForwardError(cli.UserError):
    """A model or setting the packed training forward pass does not support."""


@dataclasses.dataclass(frozen=True)
class Attention:
    """How the packed forward pass computes attention (static: part of the graph)."""
    kernel: str = "dense"
    block: int = 512  # splash: query and key block size (multiples of 128 on TPU)
    interpret: bool = False  # splash: Pallas interpret mode (CPU)
    mesh: jax.sharding.Mesh | None = None  # splash: shard_map over ("fsdp", "tp")

    @classmethod
    def on_mesh(cls, kernel, block, mesh):
        """`kernel` on `mesh`, interpreted unless the mesh's devices are TPUs (compile-only
        TPU devices included)."""
        return cls(kernel=kernel, block=block, mesh=mesh,
                   interpret=mesh.devices.flat[0].platform != "tpu")

    def __post_init__(self):
        if self.kernel not in KERNELS:
            raise ForwardError(f"attention kernel {self.kernel!r}: one of {', '.join(KERNELS)}")
        if self.block <= 0:
            raise ForwardError(f"attention block {self.block}: must be positive")


def segment_mask(segment_ids, window=None):
    """[B, T] segment ids -> [B, T, T]: causal, same segment, within `window` keys."""
    length = segment_ids.shape[-1]
    query = jnp.arange(length)[:, None]
    key = jnp.arange(length)[None, :]
    allowed = key <= query
    if window:
        allowed &= key > query - window
    return allowed[None] & (segment_ids[:, :, None] == segment_ids[:, None, :])


def _dense(q, k, v, segment_ids, window, attention):
    del attention
    batch, length, heads, head_dim = q.shape
    kv_heads = k.shape[2]
    grouped = q.reshape(batch, length, kv_heads, heads // kv_heads, head_dim)
    logits = _kept(jnp.einsum("btkgh,bskh->btkgs", grouped, k))
    mask = segment_mask(segment_ids, window)[:, :, None, None, :]
    probs = jax.nn.softmax(jnp.where(mask, logits, _MASKED).astype(jnp.float32), axis=-1)
    encoded = _kept(jnp.einsum("btkgs,bskh->btkgh", probs.astype(v.dtype), v))
    return encoded.reshape(batch, length, heads, head_dim)


def _splash_kernel(heads, length, window, attention):
    if window:
        mask = masks.LocalMask((length, length), window_size=(window - 1, 0), offset=0)
    else:
        mask = masks.CausalMask((length, length))
    block = min(attention.block, length)
    if length % block:
        raise ForwardError(f"splash attention: sequence length {length} is not a multiple of "
                           f"the block size {block} (--config.attention.block)")
    sizes = splash.BlockSizes(block_q=block, block_kv=block, block_kv_compute=block,
                              block_q_dkv=block, block_kv_dkv=block,
                              block_kv_dkv_compute=block, use_fused_bwd_kernel=True)
    return splash.make_splash_mha(masks.MultiHeadMask([mask] * heads), block_sizes=sizes,
                                  head_shards=1, q_seq_shards=1,
                                  interpret=attention.interpret)


def _splash(q, k, v, segment_ids, window, attention):
    def local(q, k, v, segment_ids):
        # [B, T, N, H] -> [B, N, T, H], the kernel's layout; one kernel per example.
        q, k, v = (x.transpose(0, 2, 1, 3) for x in (q, k, v))
        kernel = _splash_kernel(q.shape[1], q.shape[2], window, attention)
        out = jax.vmap(lambda q, k, v, s: kernel(q, k, v, segment_ids=splash.SegmentIds(s, s)))(
            q, k, v, segment_ids)
        return out.transpose(0, 2, 1, 3)

    if attention.mesh is None:
        return local(q, k, v, segment_ids)
    heads = P("fsdp", None, "tp", None)
    return jax.shard_map(local, mesh=attention.mesh, in_specs=(heads, heads, heads,
                                                               P("fsdp", None)),
                         out_specs=heads, check_vma=False)(q, k, v, segment_ids)


def attend(query, key, value, segment_ids, window, attention):
    """Attention of query [B, T, N, H] over key and value [B, T, K, H] (N a multiple
    of K: grouped heads) within segments, by `attention.kernel`; -> [B, T, N, H]."""
    kernel = _splash if attention.kernel == "splash" else _dense
    return kernel(query, key, value, segment_ids, window, attention)


def _attention(attn, x, positions, segment_ids, attention):
    """Tunix's attention block without a cache, over packed segments."""
    x = x.astype(attn.config.dtype)
    rope = functools.partial(gemma4.apply_rope, positions=positions,
                             base_frequency=attn.rope_base_frequency,
                             scale_factor=attn.rope_scale_factor,
                             rope_proportion=attn.rope_proportion)
    query = rope(attn._query_norm(attn.q_einsum(x)))  # pylint: disable=protected-access
    if hasattr(attn, "k_einsum"):  # K = V global layers: one projection for both
        key = value = attn.k_einsum(x)
    else:
        key, value = attn.kv_einsum(x)
    value = value * jax.lax.rsqrt(jnp.mean(jnp.square(value), axis=-1, keepdims=True) + 1e-6)
    key = rope(attn._key_norm(key))  # pylint: disable=protected-access
    window = (attn.config.sliding_window_size
              if attn.attn_type == gemma4.AttentionType.LOCAL_SLIDING else None)
    encoded = attend(query, key, value, segment_ids, window, attention)
    return attn.attn_vec_einsum(encoded)


def _kept(y):
    """Names dense attention's logits or output, which `scanned_saves` keeps."""
    return jax.ad_checkpoint.checkpoint_name(y, "kept")


def _remat_scope(remat_config):
    """Tunix's remat setting (an enum or its value) -> None, DECODER (every decoder
    layer) or BLOCK (every scanned block, layer by layer elsewhere)."""
    for scope in (gemma4.RematConfig.DECODER, gemma4.RematConfig.BLOCK):
        if remat_config in (scope, scope.value):
            return scope
    return None


def _kernel_outputs(primitive, *_, **__):
    """A checkpoint policy: keep what Pallas kernels (splash attention) return."""
    return primitive.name == "pallas_call"


def _projection_products(lora_rank):
    """A checkpoint policy: keep the projections' matmul outputs (a dot_general
    without batch dims: Tunix's einsums), the base's and LoRA's first product
    x @ A, but not LoRA's second, (x @ A) @ B (contracted over the rank)."""
    def policy(primitive, *operands, **params):
        if primitive.name != "dot_general":
            return False
        (contracted, _), (batch, _) = params["dimension_numbers"]
        return not batch and tuple(operands[0].shape[i] for i in contracted) != (lora_rank,)
    return policy


# What scanned layers without remat keep for the backward pass. A scan stores
# every value it keeps as a loop output of all repeats, where XLA, seeing the
# unrolled layers, fuses element-wise work (norms, up-casts, LoRA's sums) into
# the matmuls around it instead of storing it. So the scan keeps each
# projection's base matmul output (in the model's dtype: bf16 on TPU) and LoRA's
# first product x @ A (rank wide: recomputing it would cost a matmul as long as
# the projection's contraction), and what attention returns (dense: its logits
# and output; splash: its output and the softmax statistics its backward pass
# needs, without which the backward pass would run the forward kernel again).
# It recomputes the rest, LoRA's rank-deep second product and the sum with the
# base among it (float32, as LoRA's factors are, until the projection rounds
# it to the base's dtype: model._LoraProvider); keeping that float32 sum, twice
# the base output's bytes, made the scanned step 1.23x slower than the
# unrolled one on a v5e chip.
def scanned_saves(lora_rank):
    """What scanned layers without remat keep (the comment above), as a policy."""
    return functools.reduce(jax.checkpoint_policies.save_from_both_policies, [
        jax.checkpoint_policies.save_only_these_names("kept"), _kernel_outputs,
        _projection_products(lora_rank)])


def _lora_rank(model):
    """The rank of `model`'s LoRA factors (the last dim of any `*_lora_a`); None
    without LoRA."""
    for path, factor in nnx.to_flat_state(nnx.state(model, nnx.LoRAParam)):
        if str(path[-1]).endswith("_lora_a"):
            return factor.get_value().shape[-1]
    return None


def _layer(layer, x, positions, segment_ids, attention):
    """Tunix's decoder layer (dense MLP, no per-layer inputs) over packed segments."""
    attended = layer.post_attention_norm(
        _attention(layer.attn, layer.pre_attention_norm(x), positions, segment_ids, attention))
    x = x + attended
    x = x + layer.post_ffw_norm(layer.mlp(layer.pre_ffw_norm(x)))
    return x * layer.skip_scale.value


class Gemma4(gemma4.Gemma4):
    """Tunix's Gemma 4 plus the packed training forward pass (module docstring)."""

    attention = Attention()
    # The scanned layout (training/tpu/layer_scan.py): the block's stacked runs, and
    # the plan that maps them to layers; None until `layer_scan.stack_module`.
    blocks = None
    layer_plan = None
    # Each run of the block's layers under a scan of its own (`layer_scan.run`).
    scan_runs = False
    # Repeats of the block per iteration of the scan's loop; >1 only for cost
    # analysis (training/tpu/aot.py counts the block from two of them).
    scan_unroll = 1

    def __call__(self, tokens, positions=None, cache=None, attention_mask=None,
                 decode_only_last_token=False, segment_ids=None):
        """Tunix's forward pass; with `segment_ids` ([B, T]), the packed training pass,
        which returns (final hidden states [B, T, D], None): logits come from `logits`."""
        if segment_ids is None:
            if self.blocks is not None:
                raise ForwardError("a model in the scanned layout runs the packed training "
                                   "pass only (segment_ids=)")
            return super().__call__(tokens, positions, cache, attention_mask,
                                    decode_only_last_token)
        if cache is not None or attention_mask is not None:
            raise ForwardError("the packed forward pass takes segment ids, not a cache or mask")
        config = self.config
        if config.enable_moe or config.per_layer_input_dim or any(
                shared != i for i, shared in enumerate(self.kv_cache_sharing_patterns)):
            raise ForwardError("the packed forward pass covers dense Gemma 4 (31B's "
                               "architecture), not MoE, per-layer inputs or shared KV layers")
        scope = _remat_scope(config.remat_config)

        def layer_fn(remat):
            run = nnx.remat(_layer, static_argnums=(4,), graph_updates=False) if remat else _layer
            return lambda layer, x: run(layer, x, positions, segment_ids, self.attention)

        x = self.embedder.encode(tokens)
        if self.blocks is not None:
            policy = scanned_saves(_lora_rank(self)) if scope is None else None
            remat = (None if scope == gemma4.RematConfig.BLOCK
                     else functools.partial(jax.checkpoint, policy=policy))
            x = layer_scan.run(self.blocks, x, layer_fn(False), remat=remat,
                               remat_block=scope == gemma4.RematConfig.BLOCK,
                               unroll=self.scan_unroll, scan_runs=self.scan_runs)
        unscanned = layer_fn(scope is not None)
        for layer in self.layers:
            x = unscanned(layer, x)
        return self.final_norm(x), None

    def logits(self, hidden):
        """Final hidden states -> float32 logits, soft-capped as Tunix's forward pass."""
        logits = self.embedder.decode(hidden).astype(jnp.float32)
        cap = self.config.final_logit_softcap
        return logits if cap is None else jnp.tanh(logits / cap) * cap


def configure(model, attention, scan_runs=False):
    """Sets the packed forward pass's attention, and whether the scanned layout scans
    each run of the block's layers, on a `Gemma4` (also a Qwix-wrapped one)."""
    if not isinstance(model, Gemma4):
        raise ForwardError(f"{type(model).__name__} is not training.tpu.forward.Gemma4")
    model.attention = attention
    model.scan_runs = scan_runs


def packed_logits(model, tokens, positions, segment_ids):
    """The packed training pass's float32 logits [B, T, vocab] (verification, tests)."""
    hidden, _ = model(tokens, positions, segment_ids=segment_ids)
    return model.logits(hidden)


def _summed_cross_entropy(model, hidden, targets, mask):
    logits = model.logits(hidden)
    log_z = jax.nn.logsumexp(logits, axis=-1)
    # A compare-and-sum picks the target's logit: a gather would differentiate to
    # a scatter, which XLA offloads to v5p's SparseCores, outside its cost model.
    vocab = jax.lax.broadcasted_iota(targets.dtype, logits.shape, logits.ndim - 1)
    picked = jnp.sum(jnp.where(vocab == targets[..., None], logits, 0.0), axis=-1)
    return jnp.sum((log_z - picked) * mask)


def loss_sum(model, batch, chunk=0):
    """Summed cross-entropy over the trained tokens of one packed micro-batch.

    chunk > 0: logits are made `chunk` positions at a time and recomputed in the
    backward pass (module docstring); the sum is the same up to float rounding.
    """
    hidden, _ = model(batch["input_ids"], batch["positions"],
                      segment_ids=batch["segment_ids"])
    hidden = hidden[:, :-1]
    targets = batch["input_ids"][:, 1:]
    mask = batch["loss_mask"][:, 1:].astype(jnp.float32)
    length = hidden.shape[1]
    if not chunk or chunk >= length:
        return _summed_cross_entropy(model, hidden, targets, mask)
    # Equal chunks (the last one padded, its mask 0) in a Python loop: a handful
    # of pieces, each a plain computation XLA's cost model counts.
    pad = [(0, 0), (0, -length % chunk)]
    hidden = jnp.pad(hidden, pad + [(0, 0)])
    targets, mask = jnp.pad(targets, pad), jnp.pad(mask, pad)
    piece_loss = jax.checkpoint(functools.partial(_summed_cross_entropy, model))
    total = jnp.zeros((), jnp.float32)
    for start in range(0, hidden.shape[1], chunk):
        piece = slice(start, start + chunk)
        total += piece_loss(hidden[:, piece], targets[:, piece], mask[:, piece])
    return total


def kernel_flops(dims, seq_len, block, *, remat):
    """Matmul FLOPs per sequence of the splash kernels (forward, backward and, with
    remat, the recomputed forward), counting only the blocks the masks visit.

    Forward: Q K^T and P V, 2 matmuls per visited block; fused backward: Q K^T
    again, dP = dO V^T, dV, dK and dQ, 5 matmuls. Each matmul of a block is
    2 x block^2 x head_dim FLOPs per query head.
    """
    block = min(block, seq_len)
    blocks = seq_len // block
    query = np.arange(blocks)[:, None]
    key = np.arange(blocks)[None, :]
    total = 0.0
    for layer_type in dims.layer_types:
        visited = key <= query
        head_dim = dims.head_dim
        if layer_type != gemma4_map.GLOBAL:
            # Blocks holding any key within the window of any of their queries.
            visited &= (query - key) * block < dims.sliding_window + block - 1
        else:
            head_dim = dims.global_head_dim
        matmuls = 2 + 5 + (2 if remat else 0)
        total += matmuls * 2 * block * block * head_dim * dims.heads * int(visited.sum())
    return total
