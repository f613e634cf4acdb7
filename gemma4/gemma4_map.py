"""The one name and shape map between Hugging Face Gemma 4 and Tunix Gemma 4.

Every direction goes through here: loading an HF checkpoint into the TPU stack,
exporting LoRA factors as a PEFT adapter (with lora_map.py), merging, the
reverse PEFT -> Orbax conversion and the cross-stack parity test.

Base weights (HF `[out, in]` matrices; Tunix einsum layouts):
  embed_tokens [V, D]                  embedder.input_embedding [V, D]
  q_proj [N*H, D]                      attn.q_einsum.w [N, D, H]
  k_proj, v_proj [K*H, D] (sliding)    attn.kv_einsum.w [2, K, D, H] (K and V fused)
  k_proj [K*H, D] (global, K = V)      attn.k_einsum.w [K, D, H] (no v_proj at all)
  o_proj [D, N*H]                      attn.attn_vec_einsum.w [N, H, D]
  gate_proj, up_proj [F, D]            mlp.{gate,up}_proj.kernel [D, F]
  down_proj [D, F]                     mlp.down_proj.kernel [F, D]
  q_norm, k_norm, the four layer norms, model.norm: same vectors, renamed
  layer_scalar [1]                     skip_scale [1]

LoRA factors (PEFT: delta W = B @ A * alpha / r, A [r, in], B [out, r]; Qwix:
`w_lora_a` over the contracted axes, `w_lora_b` over the output axes):
  q_einsum     a [D, r]     b [r, N, H]      A = a.T, B = b -> [N*H, r]
  kv_einsum    a [D, r]     b [r, 2, K, H]   one A shared by k_proj and v_proj
  k_einsum     a [D, r]     b [r, K, H]
  attn_vec     a [N, H, r]  b [r, D]         A = a -> [r, N*H], B = b.T
  mlp kernels  a [in, r]    b [r, out]       A = a.T, B = b.T
Tunix fuses K and V of sliding layers into one einsum, so Qwix trains one A
for both while PEFT has one per projection; `lora_map.qwix_to_peft` writes the
shared A under both names, and `lora_map.peft_to_qwix` needs them equal.
"""

import dataclasses
import re

import numpy as np

from common import cli

HF_PREFIXES = ("model.language_model.", "model.")
SLIDING, GLOBAL = "sliding_attention", "full_attention"
# HF LoRA target module names -> the Tunix modules that hold those weights.
TUNIX_LORA_TARGETS = {
    "q_proj": ("q_einsum",),
    "k_proj": ("kv_einsum", "k_einsum"),
    "v_proj": ("kv_einsum",),
    "o_proj": ("attn_vec_einsum",),
    "gate_proj": ("gate_proj",),
    "up_proj": ("up_proj",),
    "down_proj": ("down_proj",),
}


class MappingError(cli.UserError):
    """A checkpoint that does not fit the model it is mapped onto."""


@dataclasses.dataclass(frozen=True)
class LayerAttention:
    """The attention shape of one layer: sliding layers and global layers differ."""
    kv_heads: int
    head_dim: int
    k_eq_v: bool  # one projection gives K and V (Gemma 4's global layers)


@dataclasses.dataclass(frozen=True)
class Dims:
    """The sizes of a Gemma 4 text model that the map needs (from HF config.json)."""
    vocab: int
    embed: int  # D
    mlp: int  # F
    heads: int  # N
    head_dim: int  # H (sliding layers)
    kv_heads: int  # K (sliding layers)
    global_kv_heads: int
    global_head_dim: int
    k_eq_v_global: bool
    layer_types: tuple
    sliding_window: int
    final_logit_softcap: float | None
    local_rope_theta: float
    global_rope_theta: float
    global_rope_proportion: float

    @property
    def num_layers(self):
        return len(self.layer_types)

    def attention(self, layer):
        """The LayerAttention of `layer`."""
        if self.layer_types[layer] == GLOBAL:
            return LayerAttention(self.global_kv_heads, self.global_head_dim,
                                  self.k_eq_v_global)
        return LayerAttention(self.kv_heads, self.head_dim, False)

    @classmethod
    def from_hf_config(cls, config):
        """From a config.json dict (a text config or a multimodal one's `text_config`)."""
        config = config.get("text_config", config)
        for unsupported in ("enable_moe_block", "hidden_size_per_layer_input",
                            "num_kv_shared_layers"):
            if config.get(unsupported):
                raise MappingError(f"Gemma 4 variants with {unsupported} are not supported")
        rope = config.get("rope_parameters") or {}
        layer_types = tuple(config["layer_types"])
        unknown = set(layer_types) - {SLIDING, GLOBAL}
        if unknown:
            raise MappingError(f"unknown layer types {sorted(unknown)}")
        k_eq_v = bool(config.get("attention_k_eq_v"))
        global_layer = _global_overrides(config, layer_types)
        # transformers gives global layers their own KV-head count only with K = V.
        global_kv_heads = global_layer.get("num_key_value_heads") if k_eq_v else None
        return cls(
            vocab=config["vocab_size"], embed=config["hidden_size"],
            mlp=config["intermediate_size"], heads=config["num_attention_heads"],
            head_dim=config["head_dim"], kv_heads=config["num_key_value_heads"],
            global_kv_heads=global_kv_heads or config["num_key_value_heads"],
            global_head_dim=global_layer.get("head_dim") or config["head_dim"],
            k_eq_v_global=k_eq_v,
            layer_types=layer_types, sliding_window=config["sliding_window"],
            final_logit_softcap=config.get("final_logit_softcapping"),
            local_rope_theta=rope.get(SLIDING, {}).get("rope_theta", 10_000.0),
            global_rope_theta=rope.get(GLOBAL, {}).get("rope_theta", 1_000_000.0),
            global_rope_proportion=rope.get(GLOBAL, {}).get("partial_rotary_factor", 0.25),
        )


# What a global layer may set apart from the sliding layers' sizes.
_GLOBAL_FIELDS = ("head_dim", "num_key_value_heads")


def _global_overrides(config, layer_types):
    """The global layers' head_dim and KV-head count, in either layout of config.json:
    `global_head_dim` and `num_global_key_value_heads` (transformers up to 5.15), or
    `per_layer_config`, {layer index: overrides} for each global layer (5.16 and
    later write it instead; JSON makes the indices strings). The model here has one
    global layer shape, so every global layer must set the same overrides and the
    sliding layers none."""
    if "per_layer_config" not in config:
        return {"head_dim": config.get("global_head_dim"),
                "num_key_value_heads": config.get("num_global_key_value_heads")}
    per_layer = {int(index): overrides for index, overrides in
                 (config["per_layer_config"] or {}).items()}
    sliding = sorted(i for i in per_layer if layer_types[i] != GLOBAL and per_layer[i])
    if sliding:
        raise MappingError(f"per_layer_config overrides sliding layers {sliding}: only Gemma 4's "
                           "global layers may differ from the others")
    shapes = {tuple(per_layer.get(i, {}).get(k) for k in _GLOBAL_FIELDS)
              for i, kind in enumerate(layer_types) if kind == GLOBAL}
    if len(shapes) > 1:
        raise MappingError(f"per_layer_config gives the global layers different shapes "
                           f"({', '.join(_GLOBAL_FIELDS)}: {sorted(shapes, key=str)}): not a "
                           "Gemma 4 layout this stack runs")
    unknown = {k for overrides in per_layer.values() for k in overrides} - set(_GLOBAL_FIELDS)
    if unknown:
        raise MappingError(f"per_layer_config sets {sorted(unknown)}, which this stack does not "
                           f"read (it reads {', '.join(_GLOBAL_FIELDS)})")
    return dict(zip(_GLOBAL_FIELDS, shapes.pop())) if shapes else {}


def strip_prefix(name):
    for prefix in HF_PREFIXES:
        if name.startswith(prefix):
            return name[len(prefix):]
    return name


def _hf_layer(layer, leaf):
    return f"model.layers.{layer}.{leaf}"


def base_names(dims):
    """HF tensor name -> Tunix parameter path, one entry per HF tensor.

    The fused kv_einsum appears twice (for k_proj and for v_proj); use
    `hf_to_tunix` to build it.
    """
    names = {"model.embed_tokens.weight": "embedder.input_embedding",
             "model.norm.weight": "final_norm.scale"}
    norms = {"input_layernorm": "pre_attention_norm", "post_attention_layernorm":
             "post_attention_norm", "pre_feedforward_layernorm": "pre_ffw_norm",
             "post_feedforward_layernorm": "post_ffw_norm"}
    for layer in range(dims.num_layers):
        tunix = f"layers.{layer}"
        k_eq_v = dims.attention(layer).k_eq_v
        names[_hf_layer(layer, "self_attn.q_proj.weight")] = f"{tunix}.attn.q_einsum.w"
        names[_hf_layer(layer, "self_attn.o_proj.weight")] = f"{tunix}.attn.attn_vec_einsum.w"
        if k_eq_v:
            names[_hf_layer(layer, "self_attn.k_proj.weight")] = f"{tunix}.attn.k_einsum.w"
        else:
            for proj in ("k_proj", "v_proj"):
                names[_hf_layer(layer, f"self_attn.{proj}.weight")] = f"{tunix}.attn.kv_einsum.w"
        names[_hf_layer(layer, "self_attn.q_norm.weight")] = f"{tunix}.attn._query_norm.scale"
        names[_hf_layer(layer, "self_attn.k_norm.weight")] = f"{tunix}.attn._key_norm.scale"
        for proj in ("gate_proj", "up_proj", "down_proj"):
            names[_hf_layer(layer, f"mlp.{proj}.weight")] = f"{tunix}.mlp.{proj}.kernel"
        for hf_norm, tunix_norm in norms.items():
            names[_hf_layer(layer, f"{hf_norm}.weight")] = f"{tunix}.{tunix_norm}.scale"
        names[_hf_layer(layer, "layer_scalar")] = f"{tunix}.skip_scale"
    return names


def _layer_of(name):
    match = re.match(r"model\.layers\.(\d+)\.", name)
    return int(match.group(1)) if match else None


def _heads_matrix_to_tunix(w, heads, head_dim):
    """[heads*head_dim, D] -> [heads, D, head_dim]."""
    return w.reshape(heads, head_dim, w.shape[-1]).transpose(0, 2, 1)


def _heads_matrix_to_hf(w):
    """[heads, D, head_dim] -> [heads*head_dim, D]."""
    heads, embed, head_dim = w.shape
    return w.transpose(0, 2, 1).reshape(heads * head_dim, embed)


def expected_hf_shape(dims, name):
    layer = _layer_of(name)
    leaf = name.rsplit(".", 2)[-2] if name.endswith(".weight") else name.rsplit(".", 1)[-1]
    if layer is None:
        return (dims.vocab, dims.embed) if "embed_tokens" in name else (dims.embed,)
    attention = dims.attention(layer)
    kv_heads, head_dim = attention.kv_heads, attention.head_dim
    return {
        "q_proj": (dims.heads * head_dim, dims.embed),
        "k_proj": (kv_heads * head_dim, dims.embed),
        "v_proj": (kv_heads * head_dim, dims.embed),
        "o_proj": (dims.embed, dims.heads * head_dim),
        "q_norm": (head_dim,), "k_norm": (head_dim,),
        "gate_proj": (dims.mlp, dims.embed), "up_proj": (dims.mlp, dims.embed),
        "down_proj": (dims.embed, dims.mlp),
        "layer_scalar": (1,),
    }.get(leaf, (dims.embed,))


def hf_to_tunix(dims, name, tensors):
    """The Tunix array for HF tensor(s): `tensors` maps HF names to arrays.

    For the fused kv_einsum pass both k_proj and v_proj (either name works).
    """
    for hf_name, value in tensors.items():
        want = expected_hf_shape(dims, hf_name)
        if tuple(value.shape) != want:
            raise MappingError(f"{hf_name}: shape {tuple(value.shape)}, expected {want} "
                               "for this model config")
    layer = _layer_of(name)
    value = tensors[name]
    if name.endswith("q_proj.weight"):
        return _heads_matrix_to_tunix(value, dims.heads, dims.attention(layer).head_dim)
    if name.endswith(("k_proj.weight", "v_proj.weight")):
        attention = dims.attention(layer)
        kv_heads, head_dim = attention.kv_heads, attention.head_dim
        if attention.k_eq_v:
            return _heads_matrix_to_tunix(value, kv_heads, head_dim)
        k, v = (tensors[name.replace(name.rsplit(".", 2)[-2], proj)] for proj in ("k_proj", "v_proj"))
        return np.stack([_heads_matrix_to_tunix(k, kv_heads, head_dim),
                         _heads_matrix_to_tunix(v, kv_heads, head_dim)])
    if name.endswith("o_proj.weight"):
        return value.T.reshape(dims.heads, dims.attention(layer).head_dim, dims.embed)
    if name.endswith(("gate_proj.weight", "up_proj.weight", "down_proj.weight")):
        return value.T
    return value


def hf_lora_modules(tunix_modules):
    """The HF target modules whose weights the Tunix modules hold (inverse of the below)."""
    return sorted({hf for hf, tunix in TUNIX_LORA_TARGETS.items()
                   if any(t in tunix_modules for t in tunix)})


def tunix_lora_modules(target_modules):
    """Tunix module names (Qwix `module_path` regex parts) for HF target modules."""
    unknown = sorted(set(target_modules) - set(TUNIX_LORA_TARGETS))
    if unknown:
        raise MappingError(f"unknown LoRA target modules {unknown}; known: "
                           f"{sorted(TUNIX_LORA_TARGETS)}")
    return sorted({t for m in target_modules for t in TUNIX_LORA_TARGETS[m]})
