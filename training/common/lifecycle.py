"""The run lifecycle both training stacks share; each trainer adds only its stack.

    run = lifecycle.start(config, workdir, stack="tpu", is_main=..., barrier=...,
                          data_parallel=...)        # run dir, config.json, base, dims
    ...                                             # stack checks (mesh, checkpoints)
    lifecycle.load_data(run)                        # tokens, masks, step count
    lifecycle.write_run_info(run, ...)              # run.json
    lifecycle.step_record(run, ...)                 # one metrics.jsonl line
    with run.record: ...                            # this process's billed segment

So both stacks resolve the base, count steps, name metrics, write run.json,
refuse incompatible checkpoints and handle preemption (preemption.py) the same
way, and their run directories compare key for key (tests/parity_test.py checks
it).
"""

import collections
import dataclasses
import functools
import os
import time

from common import cli
from common import config_cli
from common import machines
from common import run_dir as run_dir_lib
from common import storage
from data import pipeline
from gemma4 import base_model
from gemma4 import gemma4_map
from training.common import billing
from training.common import flops
from training.common import hparams
from training.common import tracking

DROPPED_ROWS_LISTED = 20  # row numbers run.json lists per drop reason

# The packages whose versions each stack records in run.json.
VERSIONED_PACKAGES = {
    "tpu": ("jax", "flax", "optax", "orbax-checkpoint", "grain", "qwix", "google-tunix",
            "transformers"),
    "gpu": ("torch", "transformers", "trl", "peft", "accelerate"),
}


class CheckpointMismatch(cli.UserError):
    """A checkpoint made with another model, LoRA rank, alpha or targets."""


class NotEnoughData(cli.UserError):
    pass


@dataclasses.dataclass
class Run:
    """What a run is, once its base and data are known; both trainers read it."""
    config: object
    workdir: str
    stack: str
    base_dir: str
    dims: gemma4_map.Dims
    fingerprint: dict  # identifies the base in checkpoints
    accumulation: int  # micro-steps per optimizer step
    data_parallel: int  # replicas a global micro-batch is split over
    machine: machines.Machine
    record: billing.RunRecord  # run.json: what the run used, and its billed segments
    tokenizer: object = None
    prepared: pipeline.Prepared = None
    total_steps: int = 0

    @property
    def lora_meta(self):
        """What a checkpoint must have been made with to resume this run."""
        lora = self.config.lora
        return {"lora_rank": lora.rank, "lora_alpha": float(lora.alpha),
                "lora_targets": sorted(lora.target_modules), "base_model": self.fingerprint}

    @functools.cached_property
    def flops_per_token(self):
        return flops.flops_per_token(
            self.dims, self.config.data.max_seq_len, self.config.lora.rank,
            gemma4_map.tunix_lora_modules(self.config.lora.target_modules))


def wait_for_main(workdir, config, timeout_s=600):
    """A barrier for processes that share `workdir` before any collective exists:
    waits until the main process has written the config and the tiny base."""
    paths = [storage.join(workdir, run_dir_lib.CONFIG)]
    if config.model.name in base_model.IN_RUN_DIR:
        tiny = base_model.tiny_dir(workdir)
        paths.append(storage.join(tiny, storage.COMMIT_MARKER) if storage.is_url(tiny)
                     else os.path.join(tiny, "config.json"))
    deadline = time.time() + timeout_s
    while not all(storage.exists(p) for p in paths):
        if time.time() > deadline:
            raise base_model.BaseModelError(f"timed out waiting for {paths}")
        time.sleep(0.5)


def _write_base(config, path):
    """Writes the base a run keeps in its directory (base_model.IN_RUN_DIR) at `path`."""
    if config.model.name == base_model.TINY:
        from gemma4 import tiny_model  # pylint: disable=import-outside-toplevel
        return tiny_model.ensure(path, seed=config.seed)
    from gemma4 import random_model  # pylint: disable=import-outside-toplevel
    return random_model.write(path, random_model.spec_config(config.model.random), config.seed)


def materialize_base(config, workdir):
    """The base model's local directory. A tiny or random base is written into
    `workdir` if missing; a gs:// run keeps it in its bucket and reads a local copy."""
    if config.model.name not in base_model.IN_RUN_DIR:
        return base_model.resolve(config.model.name, workdir)
    where = base_model.tiny_dir(workdir)
    if not storage.is_url(where):
        _write_base(config, where)
    elif not storage.exists(storage.join(where, storage.COMMIT_MARKER)):
        made = _write_base(config, storage.cache_dir(where, config.model.name))
        storage.push(made, where, mark_complete=True)
    return base_model.resolve(config.model.name, workdir)


def start(config, workdir, *, stack, is_main, barrier, data_parallel):
    """Run directory, resolved config and base model: what every check needs.

    The main process creates the run directory (and the tiny base of CPU runs);
    `barrier()` returns once it has; every shard of the base must then open.
    """
    tracking.check(config)  # a tracker that cannot work fails now, not after the compile
    run_dir_lib.prepare(workdir)
    # This process's segment begins (at the process's own start) before anything slow.
    record = billing.RunRecord(
        storage.join(workdir, run_dir_lib.RUN_INFO), enabled=is_main,
        heartbeat_s=config.heartbeat_s or None,
        describe={"stack": stack, "machine": config.machine, "model_name": config.model.name})
    if is_main:
        config_cli.write_resolved_config(config, workdir)
        materialize_base(config, workdir)
    barrier()
    base_dir = materialize_base(config, workdir)  # other hosts may have their own disk
    hf_config = base_model.read_config(base_dir)
    dims = gemma4_map.Dims.from_hf_config(hf_config)
    files = base_model.safetensors_files(base_dir)  # every shard opens, or a clear error
    # A base read from a bucket is named by its URL, not by this host's cache folder.
    named = base_model.tiny_dir(workdir) if config.model.name in base_model.IN_RUN_DIR \
        else config.model.name
    fingerprint = {"config": hf_config.get("_name_or_path") or (
                       named if storage.is_url(named) else base_dir),
                   "tensors": len(files), "vocab": dims.vocab, "layers": dims.num_layers}
    return Run(config=config, workdir=workdir, stack=stack, base_dir=base_dir, dims=dims,
               fingerprint=fingerprint,
               accumulation=hparams.gradient_accumulation_steps(config.batch, data_parallel),
               data_parallel=data_parallel, machine=machines.get(config.machine), record=record)


def load_data(run):
    """Tokens and loss masks (data package) and the number of optimizer steps."""
    from transformers import AutoTokenizer  # pylint: disable=import-outside-toplevel
    run.tokenizer = AutoTokenizer.from_pretrained(run.base_dir)
    run.prepared = pipeline.prepare(run.config.data, run.tokenizer)
    sequences = len(run.prepared.sequences["input_ids"])
    steps = sequences // run.config.batch.effective_size  # the last partial step is dropped
    if run.config.max_steps:
        steps = min(steps, run.config.max_steps)
    if steps == 0:
        raise NotEnoughData(f"{sequences} sequences make no optimizer step of "
                            f"{run.config.batch.effective_size}: not enough data")
    run.total_steps = steps
    report = run.prepared.report
    lines = [f"data: {report.format} rows, {report.kept} kept of {report.rows_read} read "
             f"({dict(report.dropped)} dropped), {sequences} sequences, {steps} steps of "
             f"{run.config.batch.per_device_size} x {run.accumulation} accumulation x "
             f"{run.data_parallel} data-parallel", "data: " + capped(report, run.config.data)]
    if run.prepared.eval_report is not None:
        held = run.prepared.eval_report
        every = run.config.eval_every_steps
        lines.append(f"data: validation set of {held.kept} rows, {held.trained_tokens} trained "
                     f"tokens, evaluated {f'every {every} steps and ' if every else ''}"
                     "after the last step")
    warmup = hparams.warmup_steps(run.config.optimizer, steps)
    if warmup >= steps:
        lines.append(f"data: the run ends before the peak learning rate: {steps} steps, "
                     f"{warmup} warmup steps (lower optimizer.warmup_steps or set "
                     "optimizer.warmup_ratio)")
    return "\n".join(lines)


def evaluates_at(run, step):
    """Whether the validation loss is computed after optimizer step `step`: every
    `eval_every_steps` (0: never in between) and after the last step."""
    if run.prepared.eval_sequences is None:
        return False
    every = run.config.eval_every_steps
    return step == run.total_steps or bool(every and step % every == 0)


def check_compatible(saved, expected, where):
    """Refuses to resume from a checkpoint whose `saved` meta differs from `expected`."""
    for key, value in expected.items():
        if saved.get(key) != value:
            raise CheckpointMismatch(
                f"checkpoint {where} was made with {key}={saved.get(key)!r}, this run has "
                f"{value!r}; use another --workdir or the original config")


def recipe(config, total_steps):
    """The hyperparameters two runs must share to compare platforms (run.json)."""
    lora = config.lora
    return {"lora": {"rank": lora.rank, "alpha": float(lora.alpha), "dropout": lora.dropout,
                     "targets": sorted(lora.target_modules)},
            "optimizer": config.optimizer.to_dict(),
            "warmup_steps": hparams.warmup_steps(config.optimizer, total_steps),
            "seq_len": config.data.max_seq_len, "epochs": config.data.epochs,
            "max_steps": config.max_steps, "data": config.data.source}


def write_run_info(run, *, devices, processes, device_kind, parallelism, attention):
    """run.json: what the run used. The keys are the same on both stacks.

    `attention` names the attention kernel (the TPU stack's `attention.kernel`,
    the GPU stack's `model.attn_implementation`); with packing, remat, the batches
    and the recipe it is what the report compares before it compares costs."""
    config, report = run.config, run.prepared.report
    run.record.describe({
        "stack": run.stack, "base_model": run.base_dir, "model_name": config.model.name,
        "machine": run.machine.name, "total_steps": run.total_steps,
        "accumulation_steps": run.accumulation, "per_device_batch": config.batch.per_device_size,
        "effective_batch": config.batch.effective_size, "seq_len": config.data.max_seq_len,
        "packing": bool(config.data.packing), "attention": attention,
        "remat": bool(config.remat), "recipe": recipe(config, run.total_steps),
        "parallelism": parallelism,
        "devices": devices, "processes": processes, "device_kind": device_kind,
        "lora": run.lora_meta,
        "versions": run_dir_lib.package_versions(VERSIONED_PACKAGES[run.stack]),
        "data": {"source": config.data.source, "format": report.format,
                 "rows_read": report.rows_read, "max_rows": report.max_rows,
                 "rows_capped": report.not_read, "kept": report.kept,
                 "dropped": dict(report.dropped), "truncated": report.truncated,
                 "files_read": len(report.files),
                 "files": report.files[:DROPPED_ROWS_LISTED],
                 "left_aside": dict(list(report.left_aside.items())[:DROPPED_ROWS_LISTED]),
                 # Per reason: an example of what was expected and found, and the
                 # first rows (//data:inspect lists the same).
                 "dropped_why": dict(report.first_detail),
                 "dropped_rows": {reason: rows[:DROPPED_ROWS_LISTED]
                                  for reason, rows in report.dropped_rows.items()},
                 "trained_tokens": report.trained_tokens, "tokens": report.total_tokens}})


def capped(report, data):
    """What was read of the source, in words: every row, or the cap and what it left;
    the files of a folder or glob read and left aside."""
    files = ""
    if len(report.files) > 1 or report.left_aside:
        whys = collections.Counter(report.left_aside.values())
        files = (f"{len(report.files)} files read" +
                 (f", {sum(whys.values())} left aside ("
                  + ", ".join(f"{n} {why}" for why, n in sorted(whys.items())) + ")"
                  if whys else "") + "; ")
    return files + _rows_read(report, data)


def _rows_read(report, data):
    cut = f"; {report.truncated} truncated to {data.max_seq_len} tokens" if report.truncated \
        else ""
    if not report.max_rows:
        return f"every row of the source read, none capped{cut}"
    why = (f"the reference recipe's first {report.max_rows:,} rows of its CodeV-R1 file"
           if data.max_rows == pipeline.REFERENCE_CAP else f"data.max_rows={report.max_rows}")
    return (f"capped at {why}: {report.not_read:,} more rows of the source not read "
            f"(data.max_rows=0 reads all){cut}")


def step_record(run, *, step, loss, learning_rate, grad_norm, trained_tokens, tokens,
                seconds, chips):
    """One line of metrics.jsonl (run_dir.METRIC_NAMES), MFU from the machine table.

    Values may be numpy or JAX scalars; the record holds plain Python numbers.
    """
    trained_tokens, tokens, seconds = int(trained_tokens), int(tokens), float(seconds)
    return {
        "step": int(step), "loss": float(loss), "learning_rate": float(learning_rate),
        "grad_norm": None if grad_norm is None else float(grad_norm),
        "trained_tokens": trained_tokens, "tokens": tokens,
        "trained_tokens_per_s": trained_tokens / seconds, "tokens_per_s": tokens / seconds,
        "step_time_s": seconds,
        "mfu": flops.mfu(tokens / seconds, run.flops_per_token, chips,
                         run.machine.peak_flops_per_chip)}
