"""Export of a TPU run's LoRA checkpoint: the library behind //conversion:export.

See conversion/export.py for what is written where.
"""

import os

from common import config_cli
from common import jsonl
from common import run_dir as run_dir_lib
from common import storage
from conversion import merge as merge_lib
from conversion import model_card
from gemma4 import adapter
from gemma4 import base_model as base_model_lib
from gemma4 import gemma4_map
from gemma4 import lora_map
from gemma4 import orbax_lora


ORBAX_COMMITTED = "commit_success.txt"  # Orbax's marker of a finished step on GCS


def checkpoint_dir(run_dir, step=None):
    """(step, its folder) of the newest checkpoint, or of `step`; on GCS only those
    Orbax finished (committed) count."""
    root = storage.join(run_dir, run_dir_lib.CHECKPOINTS)
    steps = sorted(int(d) for d in storage.listdir(root) if d.isdigit())
    if storage.is_url(run_dir):
        steps = [s for s in steps
                 if storage.exists(storage.join(root, str(s), ORBAX_COMMITTED))]
    if not steps:
        raise run_dir_lib.RunDirError(f"{run_dir} has no checkpoint")
    if step is None:
        step = steps[-1]
    if step not in steps:
        raise run_dir_lib.RunDirError(f"{run_dir} has no checkpoint at step {step}; "
                                      f"it has {steps}")
    return step, storage.join(root, str(step))


def local_run(run_dir, step):
    """A run directory export can read: a gs:// run's config, run.json, tiny base
    and checkpoint `step` copied to the local cache (a local run as it is)."""
    return storage.fetch(run_dir, only=[
        run_dir_lib.CONFIG, run_dir_lib.RUN_INFO, run_dir_lib.METRICS, base_model_lib.TINY_DIR,
        f"{run_dir_lib.CHECKPOINTS}/{step}/lora"])


def recorded_base(info):
    """The base a run recorded: its directory where it still exists here, else
    the name it was given (the tiny base, a Hub id or a gs:// URL)."""
    if os.path.isdir(info["base_model"]):
        return info["base_model"]
    return info.get("model_name") or info["base_model"]


def layer_prefix(base_dir):
    names = base_model_lib.safetensors_files(base_dir)
    return "model.language_model." if any(n.startswith("model.language_model.")
                                          for n in names) else "model."


def export(run_dir, output_dir, fmt="both", step=None, base_model=None, overwrite=False,
           progress=True, eval_summary=None, model_name=None):
    """Returns the paths written: {"adapter": ..., "merged": ...}.

    Each output carries a model card (conversion/model_card.py) named
    `model_name` (default: the output folder's name), with `eval_summary` (an
    evaluation's summary.json, as a dict) when given."""
    info = run_dir_lib.read_run_info(run_dir)
    config = config_cli.read_resolved_config(run_dir)
    step, _ = checkpoint_dir(run_dir, step)
    local = local_run(run_dir, step)
    step_dir = os.path.join(local, run_dir_lib.CHECKPOINTS, str(step))
    base_dir = base_model_lib.resolve(base_model or recorded_base(info), local)
    dims = gemma4_map.Dims.from_hf_config(base_model_lib.read_config(base_dir))
    qwix = orbax_lora.read(step_dir)
    rank, alpha = config.lora.rank, float(config.lora.alpha)
    if lora_map.rank_of(qwix) != rank:
        raise lora_map.LoraMapError(
            f"{step_dir} holds rank-{lora_map.rank_of(qwix)} factors but the run's config "
            f"says lora.rank={rank}")
    if float(info["lora"]["lora_alpha"]) != alpha:
        raise lora_map.LoraMapError(f"run.json says lora_alpha={info['lora']['lora_alpha']}, "
                                    f"config.json says {alpha}")
    prefix = layer_prefix(base_dir)
    peft_factors = lora_map.qwix_to_peft(dims, qwix, prefix)
    name = info.get("model_name", base_dir)
    # A Hub id names the base for PEFT and vLLM; anything else is the directory.
    hub_id = name.count("/") == 1 and not os.path.exists(name) and name != base_dir
    versions = run_dir_lib.package_versions(
        ("orbax-checkpoint", "safetensors", "torch", "peft", "transformers"))
    provenance = {"run_dir": run_dir, "step": step, "config": config.to_dict(),
                  "base_model": name if hub_id else base_dir, "base_dir": base_dir,
                  "base_fingerprint": merge_lib.fingerprint(base_dir), "versions": versions}
    metrics_path = os.path.join(local, run_dir_lib.METRICS)
    records = jsonl.read(metrics_path)[0] if os.path.exists(metrics_path) else []
    records = [r for r in records if r.get("step", 0) <= step]  # what this checkpoint saw
    model_name = model_name or output_dir.rstrip("/").rsplit("/", 1)[-1]
    written = {}
    with storage.output_dir(output_dir, overwrite) as tmp:
        targets = {"peft": ["adapter"], "merged": ["merged"],
                   "both": ["adapter", "merged"]}[fmt]
        for kind in targets:
            out = tmp if len(targets) == 1 else os.path.join(tmp, kind)
            os.makedirs(out, exist_ok=True)
            if kind == "adapter":
                adapter.write(out, peft_factors, rank=rank, alpha=alpha,
                              dropout=config.lora.dropout,
                              modules=lora_map.target_modules_of(peft_factors),
                              base_model=provenance["base_model"], layer_prefix=prefix)
            else:
                bar = None
                if progress:
                    from tqdm import tqdm  # pylint: disable=import-outside-toplevel
                    bar = tqdm(total=merge_lib.total_bytes(base_dir), unit="B",
                               unit_scale=True, desc="merge")
                merge_lib.merge(base_dir, out, peft_factors, alpha, bar)
                if bar is not None:
                    bar.close()
            storage.write_json(os.path.join(out, "provenance.json"),
                               {**provenance, "format": kind})
            model_card.card(kind, provenance=provenance, info=info, records=records,
                            hub_base=name if hub_id else None, base_dir=base_dir,
                            model_name=model_name + ("-merged" if kind == "merged" and
                                                     len(targets) > 1 else ""),
                            eval_summary=eval_summary).save(
                                os.path.join(out, model_card.FILE))
            written[kind] = output_dir if len(targets) == 1 else storage.join(output_dir, kind)
    return written
