"""Checks an export against the training run: three models, one set of logits.

    bazel run //conversion:verify -- --run_dir=runs/cpu --export_dir=out

Runs the same token sequence (longer than the sliding window) through
  1. Tunix Gemma 4 with the checkpoint's Qwix LoRA factors (the TPU stack),
  2. transformers Gemma 4 with the exported PEFT adapter,
  3. the exported merged model,
all in float32, and fails if any two disagree by more than --tolerance.
"""

import json
import os

import numpy as np
from absl import app
from absl import flags

from tools.common import cli

_RUN_DIR = flags.DEFINE_string("run_dir", None, "The TPU run that was exported.")
_EXPORT_DIR = flags.DEFINE_string("export_dir", None, "--output_dir of a --format=both export.")
_STEP = flags.DEFINE_integer("step", None, "Checkpoint step (default: the newest).")
_TOLERANCE = flags.DEFINE_float("tolerance", 1e-4, "Largest allowed |logit difference|.")


def tokens(vocab, exclude=(), length=48, seed=0):
    """Random text ids past the fixed specials, none of `exclude` (media placeholders)."""
    allowed = np.setdiff1d(np.arange(3, vocab), np.asarray(exclude, np.int64))
    return np.random.default_rng(seed).choice(allowed, size=(2, length)).astype(np.int32)


def tunix_logits(base_dir, dims, qwix_factors, alpha, ids):
    import jax  # pylint: disable=import-outside-toplevel
    import jax.numpy as jnp  # pylint: disable=import-outside-toplevel
    from ml_collections import config_dict  # pylint: disable=import-outside-toplevel
    from training.formats import gemma4_map  # pylint: disable=import-outside-toplevel
    from training.formats import lora_map  # pylint: disable=import-outside-toplevel
    from training.tpu import model as model_lib  # pylint: disable=import-outside-toplevel
    from training.tpu import train_step  # pylint: disable=import-outside-toplevel
    modules = {name.split(".")[3] for name in qwix_factors}
    lora = config_dict.ConfigDict({
        "rank": lora_map.rank_of(qwix_factors), "alpha": alpha, "dropout": 0.0,
        "target_modules": gemma4_map.hf_lora_modules(modules)})
    mesh = jax.sharding.Mesh(np.asarray(jax.devices()[:1]).reshape(1, 1), ("fsdp", "tp"))
    model = model_lib.load(base_dir, dims, mesh, "float32", lora)
    model_lib.set_lora(model, qwix_factors)
    segments = jnp.ones(ids.shape, jnp.int32)
    positions = jnp.tile(jnp.arange(ids.shape[1]), (ids.shape[0], 1))
    logits, _ = model(jnp.asarray(ids), positions, None, train_step.attention_mask(segments))
    return np.asarray(logits)


def hf_logits(model_dir, ids, adapter_dir=None):
    import torch  # pylint: disable=import-outside-toplevel
    import transformers  # pylint: disable=import-outside-toplevel
    model = transformers.AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    if adapter_dir:
        from peft import PeftModel  # pylint: disable=import-outside-toplevel
        model = PeftModel.from_pretrained(model, adapter_dir)
    with torch.no_grad():
        return model.eval()(torch.as_tensor(ids, dtype=torch.long)).logits.numpy()


def compare(base_dir, dims, qwix_factors, alpha, adapter_dir, merged_dir):
    """{pair: max |difference|} between the three models' logits."""
    from training.formats import base_model  # pylint: disable=import-outside-toplevel
    ids = tokens(dims.vocab, base_model.media_token_ids(base_model.read_config(base_dir)))
    logits = {"tunix_lora": tunix_logits(base_dir, dims, qwix_factors, alpha, ids),
              "hf_peft": hf_logits(base_dir, ids, adapter_dir),
              "hf_merged": hf_logits(merged_dir, ids)}
    names = list(logits)
    return {f"{a} vs {b}": float(np.abs(logits[a] - logits[b]).max())
            for i, a in enumerate(names) for b in names[i + 1:]}


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    from absl import logging as absl_logging  # pylint: disable=import-outside-toplevel
    absl_logging.set_verbosity(absl_logging.WARNING)
    from conversion import exporting  # pylint: disable=import-outside-toplevel
    from training.formats import gemma4_map  # pylint: disable=import-outside-toplevel
    from training.formats import orbax_lora  # pylint: disable=import-outside-toplevel
    from tools.common import config_cli  # pylint: disable=import-outside-toplevel
    from training.formats import base_model  # pylint: disable=import-outside-toplevel
    run_dir = config_cli.user_path(_RUN_DIR.value)
    export_dir = config_cli.user_path(_EXPORT_DIR.value)
    provenance_path = os.path.join(export_dir, "adapter", "provenance.json")
    if not os.path.exists(provenance_path):
        raise cli.UserError(f"{export_dir} is not a --format=both export (no {provenance_path})")
    with open(provenance_path) as f:
        provenance = json.load(f)
    _, step_dir = exporting.checkpoint_dir(run_dir, _STEP.value or provenance["step"])
    base_dir = provenance["base_dir"]
    dims = gemma4_map.Dims.from_hf_config(base_model.read_config(base_dir))
    alpha = float(config_cli.read_resolved_config(run_dir).lora.alpha)
    differences = compare(base_dir, dims, orbax_lora.read(step_dir), alpha,
                          os.path.join(export_dir, "adapter"), os.path.join(export_dir, "merged"))
    print(json.dumps(differences, indent=2))
    worst = max(differences.values())
    if worst > _TOLERANCE.value:
        raise cli.UserError(f"logits differ by {worst:.3g} > {_TOLERANCE.value}")
    print(f"OK: all three agree within {worst:.3g} (tolerance {_TOLERANCE.value})")


if __name__ == "__main__":
    # Here, not at import: tests import this module under their own flags.
    flags.mark_flags_as_required(["run_dir", "export_dir"])
    cli.run(main)
