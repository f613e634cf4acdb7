"""LoRA factors: Qwix on Tunix Gemma 4 <-> PEFT on Hugging Face Gemma 4.

Qwix names a factor by the Tunix parameter it adapts (`layers.3.attn.q_einsum.
w_lora_a`); PEFT by the HF module (`base_model.model.model.layers.3.self_attn.
q_proj.lora_A.weight`). Both scale the update by alpha / r. The layouts (see
gemma4_map.py's docstring) only differ by transposes and reshapes, so the maps
here are exact in both directions.

K and V of sliding layers are one Tunix einsum, so Qwix trains one A for both;
the PEFT side mirrors that (the GPU stack ties v_proj's A to k_proj's), and
`peft_to_qwix` refuses an adapter whose k_proj and v_proj A differ rather than
silently averaging them.
"""

import re

import numpy as np

from common import cli

PEFT_PREFIX = "base_model.model."
_QWIX = re.compile(r"^layers\.(\d+)\.(attn|mlp)\.(\w+)\.(w|kernel)_lora_([ab])$")
_PEFT = re.compile(r"^(?P<prefix>.*?)layers\.(?P<layer>\d+)\.(?P<block>self_attn|mlp)\."
                   r"(?P<proj>\w+)\.lora_(?P<which>[AB])\.weight$")
_MLP = ("gate_proj", "up_proj", "down_proj")
# Any PEFT LoRA factor: the adapted module's HF name, and which factor.
_FACTOR = re.compile(rf"^{re.escape(PEFT_PREFIX)}(?P<module>.+)\.lora_(?P<which>[AB])\.weight$")


class LoraMapError(cli.UserError):
    """LoRA factors that do not fit the model or cannot be represented exactly."""


def _peft_name(layer_prefix, layer, proj, which):
    block = "mlp" if proj in _MLP else "self_attn"
    return f"{PEFT_PREFIX}{layer_prefix}layers.{layer}.{block}.{proj}.lora_{which}.weight"


def rank_of(qwix_factors):
    ranks = {v.shape[-1] for k, v in qwix_factors.items() if k.endswith("_lora_a")}
    if len(ranks) != 1:
        raise LoraMapError(f"LoRA factors of several ranks {sorted(ranks)}")
    return ranks.pop()


def qwix_to_peft(dims, qwix_factors, layer_prefix="model."):
    """{Qwix name: array} -> {PEFT name: array}; `layer_prefix` is `model.` for a
    text-only base, `model.language_model.` for the multimodal checkpoint."""
    if not qwix_factors:
        raise LoraMapError("the checkpoint holds no LoRA factor")
    out = {}
    for name in sorted(qwix_factors):
        match = _QWIX.match(name)
        if not match:
            raise LoraMapError(f"unexpected LoRA factor name {name}")
        layer, _, module, _, which = match.groups()
        if which == "b":
            continue
        layer = int(layer)
        a = qwix_factors[name]
        b = qwix_factors.get(name[:-1] + "b")
        if b is None:
            raise LoraMapError(f"{name} has no matching _lora_b")
        rank = a.shape[-1]

        def put(proj, lora_a, lora_b, layer=layer):
            out[_peft_name(layer_prefix, layer, proj, "A")] = np.ascontiguousarray(lora_a)
            out[_peft_name(layer_prefix, layer, proj, "B")] = np.ascontiguousarray(lora_b)

        if module == "q_einsum":
            put("q_proj", a.T, b.reshape(rank, -1).T)
        elif module == "k_einsum":
            put("k_proj", a.T, b.reshape(rank, -1).T)
        elif module == "kv_einsum":
            put("k_proj", a.T, b[:, 0].reshape(rank, -1).T)
            put("v_proj", a.T, b[:, 1].reshape(rank, -1).T)
        elif module == "attn_vec_einsum":
            put("o_proj", a.reshape(-1, rank).T, b.T)
        elif module in _MLP:
            put(module, a.T, b.T)
        else:
            raise LoraMapError(f"no HF module for Tunix module {module} ({name})")
    return out


def peft_layer_prefix(peft_factors):
    prefixes = set()
    for name in peft_factors:
        match = _PEFT.match(name[len(PEFT_PREFIX):] if name.startswith(PEFT_PREFIX) else name)
        if not match:
            raise LoraMapError(f"unexpected PEFT tensor name {name}")
        prefixes.add(match.group("prefix"))
    if len(prefixes) != 1:
        raise LoraMapError(f"PEFT tensors under several prefixes {sorted(prefixes)}")
    return prefixes.pop()


def peft_to_qwix(dims, peft_factors):
    """{PEFT name: array} -> {Qwix name: array}, exactly inverting qwix_to_peft."""
    by_module = {}
    for name, value in peft_factors.items():
        stripped = name[len(PEFT_PREFIX):] if name.startswith(PEFT_PREFIX) else name
        match = _PEFT.match(stripped)
        if not match:
            raise LoraMapError(f"unexpected PEFT tensor name {name}")
        key = (int(match.group("layer")), match.group("proj"))
        by_module.setdefault(key, {})[match.group("which")] = value
    out = {}
    for (layer, proj), factors in sorted(by_module.items()):
        if set(factors) != {"A", "B"}:
            raise LoraMapError(f"layer {layer} {proj}: needs both lora_A and lora_B")
        if layer >= dims.num_layers:
            raise LoraMapError(f"layer {layer} {proj}: the model has {dims.num_layers} layers")
        a, b = factors["A"], factors["B"]
        rank = a.shape[0]
        attention = dims.attention(layer)
        kv_heads, head_dim, k_eq_v = attention.kv_heads, attention.head_dim, attention.k_eq_v
        prefix = f"layers.{layer}"
        if proj == "q_proj":
            out[f"{prefix}.attn.q_einsum.w_lora_a"] = a.T
            out[f"{prefix}.attn.q_einsum.w_lora_b"] = b.T.reshape(rank, dims.heads, head_dim)
        elif proj == "o_proj":
            out[f"{prefix}.attn.attn_vec_einsum.w_lora_a"] = a.T.reshape(dims.heads, head_dim,
                                                                           rank)
            out[f"{prefix}.attn.attn_vec_einsum.w_lora_b"] = b.T
        elif proj in _MLP:
            out[f"{prefix}.mlp.{proj}.kernel_lora_a"] = a.T
            out[f"{prefix}.mlp.{proj}.kernel_lora_b"] = b.T
        elif proj == "k_proj" and k_eq_v:
            out[f"{prefix}.attn.k_einsum.w_lora_a"] = a.T
            out[f"{prefix}.attn.k_einsum.w_lora_b"] = b.T.reshape(rank, kv_heads, head_dim)
        elif proj in ("k_proj", "v_proj"):
            if k_eq_v:
                raise LoraMapError(f"layer {layer} shares K and V (K = V): it has no v_proj")
        else:
            raise LoraMapError(f"layer {layer}: no Tunix module for {proj}")
    for layer in sorted({layer for layer, _ in by_module}):
        attention = dims.attention(layer)
        k, v = by_module.get((layer, "k_proj")), by_module.get((layer, "v_proj"))
        if attention.k_eq_v or (k is None and v is None):
            continue
        if k is None or v is None:
            raise LoraMapError(f"layer {layer}: LoRA on only one of k_proj and v_proj, "
                               "which Tunix fuses into one einsum")
        if not np.array_equal(k["A"], v["A"]):
            raise LoraMapError(
                f"layer {layer}: k_proj and v_proj have different lora_A; Tunix's fused "
                "kv_einsum has one A for both, so this adapter has no exact Qwix form")
        rank = k["A"].shape[0]
        out[f"layers.{layer}.attn.kv_einsum.w_lora_a"] = k["A"].T
        out[f"layers.{layer}.attn.kv_einsum.w_lora_b"] = np.stack(
            [k["B"].T.reshape(rank, attention.kv_heads, attention.head_dim),
             v["B"].T.reshape(rank, attention.kv_heads, attention.head_dim)], axis=1)
    return {k: np.ascontiguousarray(v) for k, v in out.items()}


def weight_factors(peft_factors):
    """{HF weight name: (A, B)} of PEFT factors, for merging into that weight."""
    pairs = {}
    for name, value in peft_factors.items():
        match = _FACTOR.match(name)
        if not match:
            raise LoraMapError(f"unexpected adapter tensor {name}")
        pairs.setdefault(match.group("module") + ".weight", {})[match.group("which")] = value
    for weight, pair in pairs.items():
        if set(pair) != {"A", "B"}:
            raise LoraMapError(f"{weight}: the adapter lacks lora_{({'A', 'B'} - set(pair)).pop()}")
    return {weight: (pair["A"], pair["B"]) for weight, pair in pairs.items()}


def target_modules_of(peft_factors):
    return sorted({_PEFT.match(n[len(PEFT_PREFIX):]).group("proj") for n in peft_factors})
