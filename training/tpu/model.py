"""Tunix Gemma 4 from a Hugging Face checkpoint, sharded on the mesh, with Qwix LoRA.

The model is built abstractly (shapes and shardings only, Qwix's LoRA factors
included), then every array is created directly in its final sharding: base
weights stream tensor by tensor from the safetensors shards through the one
name/shape map (gemma4/gemma4_map.py), so a host never holds more than one
tensor beyond its own shards. Every Tunix parameter must be filled and every
text-model tensor used; vision-tower tensors of multimodal checkpoints are
skipped.

LoRA: Qwix adds `*_lora_a` / `*_lora_b` factors to the target einsums and
kernels. Its dropout draws keys from an `nnx.Rngs` stream, which the
per-layer remat (nnx.remat without graph updates) forbids from advancing; each
LoRA module therefore gets its own stream that returns a fixed key, and the
trainer sets those keys from (seed, step, micro-step) before every forward pass.
Dropout is thus deterministic, identical in remat's recomputation, and needs
no RNG state in checkpoints.
"""

import dataclasses
import re

import jax
import jax.numpy as jnp
import numpy as np
import qwix
from flax import nnx
from safetensors import safe_open
from tunix.models.gemma4 import model as gemma4

from gemma4 import base_model
from gemma4 import gemma4_map
from training.tpu import forward
from training.tpu import layer_scan
from training.tpu import sharding as sharding_lib

_SKIPPED_PREFIXES = ("model.vision_tower.", "model.multi_modal_projector.", "model.embed_vision.",
                     "model.audio_tower.", "model.embed_audio.")
DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16}
REMAT_SCOPES = {"layer": gemma4.RematConfig.DECODER, "block": gemma4.RematConfig.BLOCK}


def tunix_config(dims, dtype="bfloat16"):
    types = tuple(gemma4.AttentionType.GLOBAL if t == gemma4_map.GLOBAL
                  else gemma4.AttentionType.LOCAL_SLIDING for t in dims.layer_types)
    return gemma4.ModelConfig(
        num_layers=dims.num_layers, num_embed=dims.vocab, embed_dim=dims.embed,
        hidden_dim=dims.mlp, num_heads=dims.heads, head_dim=dims.head_dim,
        num_kv_heads=dims.kv_heads, num_global_kv_heads=dims.global_kv_heads,
        global_key_size=dims.global_head_dim, k_eq_v_global=dims.k_eq_v_global,
        attention_pattern=types, sliding_window_size=dims.sliding_window,
        final_logit_softcap=dims.final_logit_softcap,
        local_base_frequency=dims.local_rope_theta, global_base_frequency=dims.global_rope_theta,
        global_rope_proportion=dims.global_rope_proportion,
        use_sliding_window_kv_cache=False,
        # Remat is switched on after Qwix has created the LoRA factors: factors
        # created inside nnx.remat would not survive it (see enable_remat).
        remat_config=gemma4.RematConfig.NONE,
        param_dtype=DTYPES[dtype], dtype=DTYPES[dtype])


def _flat_path(path):
    return tuple(int(p) if p.isdigit() else p for p in path.split("."))


def _skipped(name):
    return name.startswith(_SKIPPED_PREFIXES)


def _normalize(name):
    """HF names of multimodal checkpoints (model.language_model.*) -> text names."""
    stripped = gemma4_map.strip_prefix(name)
    return name if stripped == name else "model." + stripped


def _checkpoint_tensors(model_dir, dims):
    """{HF name: (name in the file, file)}, checked against the map both ways."""
    files = {}
    for name, path in base_model.safetensors_files(model_dir).items():
        if not _skipped(name):
            files[_normalize(name)] = (name, path)
    names = gemma4_map.base_names(dims)
    unknown = sorted(set(files) - set(names))
    if unknown:
        raise gemma4_map.MappingError(
            f"{len(unknown)} checkpoint tensors have no place in the model, e.g. {unknown[:3]}: "
            "is config.json the checkpoint's own?")
    missing = sorted(set(names) - set(files))
    if missing:
        raise gemma4_map.MappingError(f"the checkpoint lacks {len(missing)} tensors, e.g. "
                                      f"{missing[:3]}")
    return files


class _FixedKeyStream(nnx.RngStream):
    """An RNG stream that returns its key without advancing (see module docstring)."""

    def __call__(self):
        return self.key[...]


def _shape_only_rngs(*streams):
    """Rngs for building a model under nnx.eval_shape, whose values are never used:
    streams that do not advance. An advancing stream stores a traced counter at
    every draw, and in this JAX each such store walks the whole trace so far
    (Tracer.sharding builds an error message): 31B's ~1,800 draws took minutes."""
    rngs = nnx.Rngs(**{stream: 0 for stream in streams})
    for stream in streams:
        setattr(rngs, stream, _FixedKeyStream(jax.random.key(0), tag=stream))
    return rngs


def lora_module_regex(target_modules):
    modules = gemma4_map.tunix_lora_modules(target_modules)
    return r".*\b(" + "|".join(modules) + r")$"


class _LoraProvider(qwix.LoraProvider):
    """Qwix's LoRA, each adapted projection returning its base output's dtype, as
    PEFT's LoRA layers do on the GPU stack. Qwix returns the base output plus
    LoRA's term, float32 like the factors; this rounds that sum to the base's
    dtype, so a bf16 layer stays bf16 after it (docs/performance.md,
    "Gemma 4 31B on v5p-8")."""

    def dot_general(self, lhs, rhs, dimension_numbers, precision=None,
                    preferred_element_type=None, out_sharding=None):
        out = super().dot_general(lhs, rhs, dimension_numbers, precision,
                                  preferred_element_type, out_sharding=out_sharding)
        return _as_base(out, (lhs, rhs), preferred_element_type)

    def einsum(self, einsum_str, *operands, **kwargs):
        out = super().einsum(einsum_str, *operands, **kwargs)
        return _as_base(out, operands, kwargs.get("preferred_element_type"))


def _as_base(out, operands, preferred_element_type):
    """`out` in the dtype the base op gives: `preferred_element_type`, else the
    operands' result type."""
    if preferred_element_type is None:
        return out.astype(jnp.result_type(*operands))
    return out.astype(preferred_element_type)


def _lora_provider(lora_config):
    return _LoraProvider(
        module_path=lora_module_regex(lora_config.target_modules),
        rank=lora_config.rank, alpha=float(lora_config.alpha), dropout=lora_config.dropout)


def abstract_model(dims, dtype, lora_config=None, scan=False):
    """The model's structure and shapes, with Qwix's LoRA factors, allocating nothing.

    Qwix creates LoRA factors by running the model once; under nnx.eval_shape
    that run is only traced, so even 31B costs no memory or compute, and the
    same code works with several JAX processes. With LoRA dropout, each LoRA
    module gets its fixed-key stream (concrete keys, made on the host:
    compile-only devices hold no arrays). `scan`: in the scanned layout
    (training/tpu/layer_scan.py), when the layers repeat a block; then the
    model is built with one repeat of the block (its layers are shaped alike in
    every repeat), and each run's shapes stacked for all of them: 31B's 6 layers
    instead of 60 (tracing a layer under eval_shape takes ~0.4 s at 31B).
    """
    plan = layer_scan.Plan.of(dims.layer_types, scan)
    if plan.repeats:
        types = dims.layer_types
        dims = dataclasses.replace(dims, layer_types=types[:plan.period] + types[plan.scanned:])
    config = tunix_config(dims, dtype)

    def create():
        model = forward.Gemma4(config, rngs=_shape_only_rngs("default"))
        if lora_config is None:
            return model
        return qwix.apply_lora_to_model(model, _lora_provider(lora_config),
                                        **model.get_model_input(),
                                        rngs=_shape_only_rngs("params", "dropout"))

    model = nnx.eval_shape(create)
    _float32_factors(model)
    if lora_config is not None and lora_config.dropout > 0:
        use_fixed_dropout_keys(model)
    return layer_scan.stack_module(model, plan)


def _float32_factors(model):
    """Declares `model`'s LoRA factors float32, as `load` makes them (PEFT keeps them
    so on a bf16 base too: bf16 would round away updates of lr ~1e-4). Qwix gives
    them the base's dtype, so without this the ahead-of-time compile (aot.py)
    would compile a step with bf16 factors and Adam moments, not the one `sft`
    runs."""
    for _, node in nnx.iter_graph(model):
        if isinstance(node, nnx.LoRAParam):
            value = node.get_value()
            node.set_value(jax.ShapeDtypeStruct(value.shape, jnp.float32,
                                                sharding=value.sharding))


def load(model_dir, dims, mesh, dtype="bfloat16", lora_config=None, seed=0, scan=False,
         tensors=None):
    """The Tunix model with the checkpoint's weights and fresh LoRA factors.

    Every array is created directly in its sharding: base weights from the
    safetensors shards, LoRA A with Qwix's initializer (He uniform) from keys
    derived from `seed`, LoRA B zero, so the model starts equal to the base.
    `scan`: in the scanned layout, the layers of each run of the block read and
    stacked together (one stacked tensor on the host at a time); the LoRA
    factors are the same in either layout. `tensors`: instead of the checkpoint
    in `model_dir`, a function from a Hugging Face tensor name to its value
    (random weights for benchmarks).
    """
    files = {} if tensors else _checkpoint_tensors(model_dir, dims)
    with jax.set_mesh(mesh):
        model = abstract_model(dims, dtype, lora_config, scan)
        graphdef, state = nnx.split(model)
        shardings = dict(nnx.to_flat_state(nnx.get_named_sharding(state, mesh)))
    plan = model.layer_plan
    flat = dict(nnx.to_flat_state(state))
    handles = {}

    def read(name):
        if tensors:
            return tensors(name)
        original, path = files[name]
        if path not in handles:
            handles[path] = safe_open(path, "np")
        return handles[path].get_tensor(original)

    def convert(name, tunix_path):
        tensors = {name: read(name)}
        if tunix_path.endswith("kv_einsum.w"):
            for proj in ("k_proj", "v_proj"):
                other = re.sub(r"[kv]_proj", proj, name)
                tensors.setdefault(other, read(other))
        return gemma4_map.hf_to_tunix(dims, name, tensors).astype(DTYPES[dtype])

    def place(path, value, sharding):
        if tuple(value.shape) != tuple(flat[path].shape):
            raise gemma4_map.MappingError(f"{'.'.join(map(str, path))}: shape {value.shape}, "
                                          f"the model expects {flat[path].shape}")
        flat[path].set_value(jax.make_array_from_callback(
            value.shape, sharding, lambda index: np.asarray(value[index])))

    # Every parameter's per-layer sources, by its path in the model's layout.
    sources = {}
    for name, tunix_path in gemma4_map.base_names(dims).items():
        path, index = plan.locate(_flat_path(tunix_path))
        sources.setdefault(path, {}).setdefault(index, (name, tunix_path))
    for path, members in sources.items():
        value = (convert(*members[None]) if None in members else
                 layer_scan.stack({index: convert(*m) for index, m in members.items()}))
        place(path, value, shardings[path].get_value())
    done = set(sources)

    # LoRA factors made layer by layer, in the per-layer order, whatever the layout.
    lora_init = qwix.LoraRule(module_path=".*", rank=1, alpha=1.0).lora_a_initializer
    key = jax.random.key(seed)
    factors = layer_scan.unstack_flat(plan, {p: v for p, v in flat.items()
                                             if isinstance(v, nnx.LoRAParam)})
    values = {}
    for index, (path, variable) in enumerate(sorted(factors.items(), key=lambda kv: str(kv[0]))):
        # Factors are float32 on a bf16 base (`_float32_factors`).
        shape = variable.shape
        if str(path[-1]).endswith("_lora_a"):
            values[path] = np.asarray(lora_init(jax.random.fold_in(key, index), shape,
                                                jnp.float32))
        else:
            values[path] = np.zeros(shape, np.float32)
    for path, value in layer_scan.stack_flat(plan, values).items():
        spec = sharding_lib.fit_spec(sharding_lib.declared_spec(flat[path]), value.shape, mesh)
        place(path, value, jax.sharding.NamedSharding(mesh, spec))
        done.add(path)

    unfilled = [".".join(map(str, p)) for p, v in flat.items()
                if p not in done and isinstance(v, nnx.Param)]
    if unfilled:
        raise gemma4_map.MappingError(f"no value for parameters {unfilled[:5]}")
    return nnx.merge(graphdef, nnx.from_flat_state(flat))


def load_base(model_dir, dims, mesh, dtype="bfloat16"):
    """The Tunix model with the checkpoint's weights and no LoRA."""
    return load(model_dir, dims, mesh, dtype)


def use_fixed_dropout_keys(model):
    for _, module in model.iter_modules():
        if any(hasattr(module, f"{w}_lora_a") for w in ("w", "kernel")):
            rngs = nnx.Rngs(dropout=0)
            rngs.dropout = _FixedKeyStream(jax.random.key(0), tag="dropout")
            module.qwix_rngs = rngs


def enable_remat(model, remat, scope="layer"):
    """Rematerializes every decoder layer in the backward pass (Tunix's DECODER setting,
    which the packed forward pass of training/tpu/forward.py follows), or with
    `scope="block"` every scanned block as a whole (Tunix's BLOCK; unscanned
    layers one by one)."""
    if scope not in REMAT_SCOPES:
        raise gemma4_map.MappingError(f"remat scope {scope!r}: one of {', '.join(REMAT_SCOPES)}")
    model.config.remat_config = (REMAT_SCOPES[scope] if remat else gemma4.RematConfig.NONE)


def dropout_keys(rng_state, key):
    """`rng_state` with every dropout key replaced by a distinct fold of `key` (a stacked
    key of the scanned layout by one per layer)."""
    leaves, treedef = jax.tree.flatten(rng_state)
    new = []
    for i, leaf in enumerate(leaves):
        if not jax.dtypes.issubdtype(leaf.dtype, jax.dtypes.prng_key):
            new.append(leaf)
        elif leaf.ndim:
            new.append(jax.random.split(jax.random.fold_in(key, i), leaf.shape))
        else:
            new.append(jax.random.fold_in(key, i))
    return jax.tree.unflatten(treedef, new)


def lora_names(model):
    """{flat name: variable} of the model's LoRA factors in its own layout
    (`layers.0.attn.q_einsum.w_lora_a`; stacked `blocks.0...` when scanned)."""
    return {".".join(map(str, path)): variable
            for path, variable in nnx.to_flat_state(nnx.state(model, nnx.LoRAParam))}


def set_lora(model, factors):
    """Replaces the model's LoRA factors by `factors` ({per-layer flat name: array}), in
    place, in either layout, keeping each factor's sharding; names and shapes must
    match exactly."""
    plan = model.layer_plan
    variables = {path: variable for path, variable in
                 nnx.to_flat_state(nnx.state(model, nnx.LoRAParam))}
    expected = {".".join(map(str, p)): v
                for p, v in layer_scan.unstack_flat(plan, variables).items()}
    if set(expected) != set(factors):
        missing = sorted(set(expected) - set(factors))
        extra = sorted(set(factors) - set(expected))
        raise gemma4_map.MappingError(
            f"LoRA factors do not match the model: missing {missing[:3]}, unexpected {extra[:3]}")
    for name, variable in expected.items():
        if tuple(variable.shape) != tuple(factors[name].shape):
            raise gemma4_map.MappingError(f"LoRA factor {name}: shape {factors[name].shape}, "
                                          f"the model has {variable.shape} (another rank?)")
    stacked = layer_scan.stack_flat(plan, {_flat_path(name): np.asarray(value)
                                           for name, value in factors.items()})
    for path, variable in variables.items():
        old = variable.get_value()
        variable.set_value(jax.device_put(np.asarray(stacked[path], old.dtype), old.sharding))
