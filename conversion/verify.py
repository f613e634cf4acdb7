"""Checks an export against the training run: three models, one set of logits.

    bazel run //conversion:verify -- --run_dir=runs/cpu --export_dir=out
    bazel run //conversion:verify -- --run_dir=runs/v5p8 --export_dir=out \
        --mesh=1,4 --offload_dir=/tmp/offload    # at 31B, on the TPU VM

Runs the same token sequence (longer than the sliding window) through
  1. Tunix Gemma 4 with the checkpoint's Qwix LoRA factors (the TPU stack), on
     a (fsdp, tp) mesh of the local devices, weights streamed into their shards,
  2. transformers Gemma 4 with the exported PEFT adapter,
  3. the exported merged model,
one after another in `--dtype`, and fails if any two disagree by more than
--tolerance. Before loading anything it prints the memory each model needs
(per device for Tunix, on the host for transformers) and refuses when the host
cannot hold one transformers model, unless --offload_dir lets accelerate stream
the layers' weights from disk during the forward pass.

Tolerances (max |logit difference|, TOLERANCES): float32's is rounding noise
of a float32 forward pass. bfloat16 keeps 8 bits of mantissa and the stacks
round at different places (fused vs separate projections, the merged weight
W + BA rounded once vs W and BA apart), so its tolerance sits between what
correct and wrong exports of the tiny model differ by. Both are set on the
6-layer tiny model (`//conversion:export_test`); rounding grows with depth, so
at 31B run float32 on the mesh and read an excess against how far the adapter
itself moves the logits (printed beside: the PEFT model with its adapter
disabled) before calling the export wrong. docs/export.md, "Check an export",
holds the measured differences and how to read them.

The merged model is also checked weight by weight: each merged weight must be
W + (alpha / r) B A, recomputed here in float32 and rounded to the stored
dtype, to within that rounding. A bf16 merge stores the adapter's change
rounded to bf16's resolution at the base weights' scale; when that rounding
is a large share of the change (a short fine-tune: on a v5e chip, 39 steps of
`one_chip.py` changed weights by 2 to 3 times bf16's resolution), the merged
model's logits stray from the adapter's however right the merge is. Then the
weight check decides, the merged logits are printed but not held to the
tolerance, and the output says how much of the change the dtype rounds away.
"""

import json
import os

import numpy as np
from absl import app
from absl import flags

from common import cli

_RUN_DIR = flags.DEFINE_string("run_dir", None, "The TPU run that was exported.")
_EXPORT_DIR = flags.DEFINE_string("export_dir", None, "--output_dir of a --format=both export.")
_STEP = flags.DEFINE_integer("step", None, "Checkpoint step (default: the newest).")
_DTYPE = flags.DEFINE_enum("dtype", "float32", ["float32", "bfloat16"],
                           "Precision of all three models.")
_MESH = flags.DEFINE_string("mesh", "1,1", "fsdp,tp: the Tunix model's mesh over local devices.")
_OFFLOAD_DIR = flags.DEFINE_string(
    "offload_dir", None, "Let accelerate keep transformers' weights here and stream them "
    "during the forward pass when the host cannot hold a model.")
_TOLERANCE = flags.DEFINE_float("tolerance", None, "Largest allowed |logit difference| "
                                "(default: TOLERANCES[--dtype]).")

TOLERANCES = {"float32": 1e-4, "bfloat16": 0.5}
BYTES = {"float32": 4, "bfloat16": 2}
# Above this share (rms of the rounding over rms of the change), the merged model's
# logits are not held to the logit tolerance (module docstring).
ROUNDED_AWAY = 0.05


class VerifyMemoryError(cli.UserError):
    """The models do not fit where verify would load them."""


def memory_plan(base_dir, dtype, mesh_shape, host_available=None, offload=False):
    """{what: bytes} each model needs, checked against the host's available memory.

    Tunix holds the text model sharded over fsdp x tp devices (an upper bound:
    small tensors are replicated); transformers holds one whole model (vision
    tower included) at a time. Raises VerifyMemoryError when the host cannot hold
    one and `offload` is off.
    """
    from safetensors import safe_open  # pylint: disable=import-outside-toplevel
    from gemma4 import base_model  # pylint: disable=import-outside-toplevel
    counts = {"text": 0, "other": 0}
    by_file = {}
    for name, path in base_model.safetensors_files(base_dir).items():
        by_file.setdefault(path, []).append(name)
    for path, names in by_file.items():
        with safe_open(path, "np") as f:
            for name in names:
                kind = "other" if name.startswith(("model.vision", "model.embed_vision",
                                                   "model.audio", "model.embed_audio")) else "text"
                counts[kind] += int(np.prod(f.get_slice(name).get_shape()))
    devices = mesh_shape[0] * mesh_shape[1]
    plan = {"tunix_bytes_per_device": counts["text"] * BYTES[dtype] // devices,
            "transformers_host_bytes": (counts["text"] + counts["other"]) * BYTES[dtype],
            "host_available_bytes": host_available}
    if host_available is not None and plan["transformers_host_bytes"] > host_available and \
            not offload:
        raise VerifyMemoryError(
            f"one transformers model in {dtype} needs "
            f"{plan['transformers_host_bytes'] / 2**30:.1f} GiB and the host has "
            f"{host_available / 2**30:.1f} GiB available: pass --offload_dir=DIR to stream "
            f"its weights from disk, or run on a larger host")
    return plan


def host_available_bytes():
    """MemAvailable of /proc/meminfo (None where there is none)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def parse_mesh(text):
    try:
        fsdp, tp = (int(v) for v in text.split(","))
    except ValueError:
        raise cli.UserError(f"--mesh must be fsdp,tp (two integers), got {text!r}") from None
    if fsdp < 1 or tp < 1:
        raise cli.UserError(f"--mesh sizes must be positive, got {text!r}")
    return fsdp, tp


def tokens(vocab, exclude=(), length=48, seed=0):
    """Random text ids past the fixed specials, none of `exclude` (media placeholders)."""
    allowed = np.setdiff1d(np.arange(3, vocab), np.asarray(exclude, np.int64))
    return np.random.default_rng(seed).choice(allowed, size=(2, length)).astype(np.int32)


def tunix_logits(base_dir, dims, qwix_factors, alpha, ids, dtype="float32", mesh_shape=(1, 1)):
    import jax  # pylint: disable=import-outside-toplevel
    import jax.numpy as jnp  # pylint: disable=import-outside-toplevel
    from ml_collections import config_dict  # pylint: disable=import-outside-toplevel
    from gemma4 import gemma4_map  # pylint: disable=import-outside-toplevel
    from gemma4 import lora_map  # pylint: disable=import-outside-toplevel
    from training.tpu import model as model_lib  # pylint: disable=import-outside-toplevel
    from training.tpu import forward  # pylint: disable=import-outside-toplevel
    from training.tpu import sharding  # pylint: disable=import-outside-toplevel
    modules = {name.split(".")[3] for name in qwix_factors}
    lora = config_dict.ConfigDict({
        "rank": lora_map.rank_of(qwix_factors), "alpha": alpha, "dropout": 0.0,
        "target_modules": gemma4_map.hf_lora_modules(modules)})
    devices = mesh_shape[0] * mesh_shape[1]
    if devices > len(jax.devices()):
        raise cli.UserError(f"--mesh={mesh_shape[0]},{mesh_shape[1]} needs {devices} devices, "
                            f"this host has {len(jax.devices())}")
    mesh = sharding.make_mesh(*mesh_shape)
    model = model_lib.load(base_dir, dims, mesh, dtype, lora)
    model_lib.set_lora(model, qwix_factors)
    segments = jnp.ones(ids.shape, jnp.int32)
    positions = jnp.tile(jnp.arange(ids.shape[1]), (ids.shape[0], 1))
    return np.asarray(forward.packed_logits(model, jnp.asarray(ids), positions, segments))


def hf_logits(model_dir, ids, adapter_dir=None, dtype="float32", offload_dir=None,
              base_too=False):
    """transformers' logits, with the PEFT adapter if given; `base_too`: (those, the
    same model's with the adapter disabled)."""
    import torch  # pylint: disable=import-outside-toplevel
    import transformers  # pylint: disable=import-outside-toplevel
    kwargs = {"device_map": "auto", "offload_folder": offload_dir} if offload_dir else {}
    model = transformers.AutoModelForCausalLM.from_pretrained(
        model_dir, dtype=getattr(torch, dtype), **kwargs)
    if adapter_dir:
        from peft import PeftModel  # pylint: disable=import-outside-toplevel
        model = PeftModel.from_pretrained(model, adapter_dir)
    ids = torch.as_tensor(ids, dtype=torch.long)
    with torch.no_grad():
        logits = model.eval()(ids).logits.float().numpy()
        if not base_too:
            return logits
        with model.disable_adapter():
            return logits, model(ids).logits.float().numpy()


def compare(base_dir, dims, qwix_factors, alpha, adapter_dir, merged_dir, dtype="float32",
            mesh_shape=(1, 1), offload_dir=None):
    """({pair: max |difference|} between the three models' logits, loaded one at a time,
    the adapter's effect: max |difference| it makes to the base, in the same dtype)."""
    from gemma4 import base_model  # pylint: disable=import-outside-toplevel
    ids = tokens(dims.vocab, base_model.media_token_ids(base_model.read_config(base_dir)))
    peft, base = hf_logits(base_dir, ids, adapter_dir, dtype, offload_dir, base_too=True)
    logits = {"tunix_lora": tunix_logits(base_dir, dims, qwix_factors, alpha, ids, dtype,
                                         mesh_shape),
              "hf_peft": peft,
              "hf_merged": hf_logits(merged_dir, ids, None, dtype, offload_dir)}
    names = list(logits)
    differences = {f"{a} vs {b}": float(np.abs(logits[a] - logits[b]).max())
                   for i, a in enumerate(names) for b in names[i + 1:]}
    return differences, float(np.abs(peft - base).max())


def held_pairs(differences, rounded_away):
    """The logit differences held to the tolerance: all of them, or without the merged
    model's when its dtype rounds away more than ROUNDED_AWAY of the adapter's change."""
    if rounded_away <= ROUNDED_AWAY:
        return differences
    return {pair: value for pair, value in differences.items() if "hf_merged" not in pair}


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    from absl import logging as absl_logging  # pylint: disable=import-outside-toplevel
    absl_logging.set_verbosity(absl_logging.WARNING)
    from conversion import exporting  # pylint: disable=import-outside-toplevel
    from gemma4 import gemma4_map  # pylint: disable=import-outside-toplevel
    from gemma4 import orbax_lora  # pylint: disable=import-outside-toplevel
    from common import config_cli  # pylint: disable=import-outside-toplevel
    from common import storage  # pylint: disable=import-outside-toplevel
    from gemma4 import base_model  # pylint: disable=import-outside-toplevel
    run_dir = config_cli.user_path(_RUN_DIR.value)
    # gs:// inputs are read from local copies (the export whole, the run's step).
    export_dir = storage.fetch(config_cli.user_path(_EXPORT_DIR.value), require_complete=True)
    provenance_path = os.path.join(export_dir, "adapter", "provenance.json")
    if not os.path.exists(provenance_path):
        raise cli.UserError(f"{export_dir} is not a --format=both export (no {provenance_path})")
    with open(provenance_path) as f:
        provenance = json.load(f)
    step, _ = exporting.checkpoint_dir(run_dir, _STEP.value or provenance["step"])
    run_dir = exporting.local_run(run_dir, step)
    step_dir = os.path.join(run_dir, "checkpoints", str(step))
    base_dir = provenance["base_dir"]
    dims = gemma4_map.Dims.from_hf_config(base_model.read_config(base_dir))
    alpha = float(config_cli.read_resolved_config(run_dir).lora.alpha)
    mesh_shape = parse_mesh(_MESH.value)
    offload_dir = config_cli.user_path(_OFFLOAD_DIR.value) if _OFFLOAD_DIR.value else None
    plan = memory_plan(base_dir, _DTYPE.value, mesh_shape, host_available_bytes(),
                       offload=bool(offload_dir))
    print(f"memory: Tunix {plan['tunix_bytes_per_device'] / 2**30:.2f} GiB per device on a "
          f"{mesh_shape[0]}x{mesh_shape[1]} mesh; transformers "
          f"{plan['transformers_host_bytes'] / 2**30:.2f} GiB on the host, one model at a "
          f"time{' (streamed from ' + offload_dir + ')' if offload_dir else ''}", flush=True)
    tolerance = _TOLERANCE.value if _TOLERANCE.value is not None else TOLERANCES[_DTYPE.value]
    from safetensors.numpy import load_file  # pylint: disable=import-outside-toplevel
    adapter_dir, merged_dir = (os.path.join(export_dir, kind) for kind in ("adapter", "merged"))
    from conversion import merge  # pylint: disable=import-outside-toplevel
    excess, rounded_away, tensors = merge.check(
        base_dir, load_file(os.path.join(adapter_dir, "adapter_model.safetensors")), alpha,
        merged_dir)
    print(f"merged weights: {tensors} tensors are W + (alpha / r) B A to within their dtype's "
          f"rounding (excess {excess:.3g} of its resolution); the rounding is "
          f"{rounded_away:.1%} (rms) of the adapter's change", flush=True)
    if excess > merge.MERGED_EXCESS:
        raise cli.UserError(f"the merged weights are not W + (alpha / r) B A: they miss by "
                            f"{excess:.3g} of their dtype's resolution beyond its rounding "
                            f"(at most {merge.MERGED_EXCESS}): the merged export is wrong")
    differences, effect = compare(
        base_dir, dims, orbax_lora.read(step_dir), alpha, adapter_dir, merged_dir,
        _DTYPE.value, mesh_shape, offload_dir)
    print(json.dumps({**differences, "adapter's effect (hf_peft vs its base)": effect}, indent=2))
    held = held_pairs(differences, rounded_away)
    if held is not differences:
        print(f"the merged model's logits are not held to the tolerance: its stored dtype "
              f"rounds away {rounded_away:.0%} of the adapter's change (its weights were "
              "checked instead); serve the adapter, or merge a longer fine-tune")
    worst = max(held.values())
    if worst > tolerance:
        raise cli.UserError(
            f"logits differ by {worst:.3g} > {tolerance} ({_DTYPE.value}); the adapter itself "
            f"moves them by {effect:.3g}. Far below that, this is rounding that grew over "
            "the layers (conversion/verify.py has measurements): rerun in float32 or set "
            "--tolerance. Near it, the export is wrong.")
    print(f"OK: {'all three agree' if held is differences else 'Tunix and the adapter agree'} "
          f"within {worst:.3g} (tolerance {tolerance}, {_DTYPE.value}); the adapter moves the "
          f"logits by {effect:.3g}")


if __name__ == "__main__":
    # Here, not at import: tests import this module under their own flags.
    flags.mark_flags_as_required(["run_dir", "export_dir"])
    cli.run(main)
