"""What a fine-tune will cost on each machine, before renting any: the planner.

For one recipe (training/common/hparams.py's fields, the data included) and
each machine, a plan says whether the run fits, how many optimizer steps it
takes, how long each step and the whole billed run take and what that costs
on demand and on spot, with an interval from measured runs:

- The data is read once with the data layer (format, tokenizer, long rows);
  each machine's config then shuffles, pads or packs the same examples as
  training would, which gives its sequences, steps and token fractions.
- TPU: the step `sft` runs, compiled for the machine's topology
  (training/tpu/extrapolate.py: a few layers, extended per layer; kept in a
  cache), gives bytes per chip and the roofline of XLA's counts.
- GPU: the memory plan (training/gpu/memory_plan.py) decides fit, and where it
  does not fit, the smallest change that does; the roofline is the compiled
  FLOPs (training/common/flops.py) at peak.
- Calibration: the step is the roofline times the mean measured/roofline
  factor of the runs that apply (common/calibration.py: same platform, else
  all); the interval is their lowest and highest factor, never a fixed
  percentage, and each plan says how many runs it rests on.
- Billed time, as the report counts finished runs (training/common/billing.py):
  download of the base at a stated bandwidth, loading it at the rate measured
  on the v5e chip, the compile (zero with a warm cache), the steps, checkpoint
  saves at the measured rate, and validation passes when the data has a
  validation set.
"""

import collections
import copy
import dataclasses
import glob
import hashlib
import json
import logging
import math
import os

import numpy as np

from common import calibration
from common import cli
from common import config_cli
from common import machines
from common import storage
from data import packing
from data import pipeline
from data import sources
from gemma4 import gemma4_map
from training.common import flops as flops_lib
from training.common import hparams
from training.common.memory import BYTES

# The recipe's fields: what a plan's --config sets on every machine's config.
# The rest (mesh, micro-batch, remat, attention, layout) is the machine config's.
RECIPE_FIELDS = ("seed", "lora", "optimizer", "batch.effective_size", "data",
                 "eval_every_steps", "checkpoint_every_steps", "model.name", "model.dtype",
                 "model.random")
GB = 1e9


class PlanError(cli.UserError):
    pass


def _get(config, dotted):
    for part in dotted.split("."):
        config = config[part]
    return config


def _set(config, dotted, value):
    *parents, last = dotted.split(".")
    for part in parents:
        config = config[part]
    with config.ignore_type():
        config[last] = copy.deepcopy(value)


def apply_recipe(machine_config, recipe):
    """`machine_config` (unlocked copy) with the recipe's fields."""
    out = machine_config.copy_and_resolve_references()
    for field in RECIPE_FIELDS:
        _set(out, field, _get(recipe, field))
    return out


@dataclasses.dataclass
class Data:
    """The examples of the recipe's data, read once: tokens and trained tokens of each."""
    lengths: np.ndarray
    trained: np.ndarray
    report: object  # pipeline.Report
    eval_lengths: np.ndarray = None  # the validation set's, when there is one
    cached: bool = False  # counted by an earlier plan (read_data's cache)


def read_data(data_config, tokenizer, cache_dir=""):
    """Reads and encodes the data once (data/pipeline.py), as training does; the
    counts are kept in `cache_dir` for local data (`counts_key`), so a second
    plan of the same data and tokenizer reads nothing."""
    key = counts_key(data_config, tokenizer) if cache_dir else None
    path = key and os.path.join(cache_dir, "counts", f"{key}.json")
    found = _read_counts(path) if path else None
    if found is not None:
        return found
    data = _encode(data_config, tokenizer)
    if path:
        _write_counts(path, data)
    return data


def _files_fingerprint(source):
    """[(path, size, mtime)] of a local source's files (dangling links left out,
    as the data layer leaves them; each folder once); None for one that is not
    local (a bucket, the Hub: read every time)."""
    if source.startswith(sources.SYNTHETIC):
        source = sources.SAMPLE_PATH  # generated from its spec and the sample's words
    if source == sources.SAMPLE:
        source = sources.SAMPLE_PATH
    if storage.is_url(source) or source.startswith("hf://"):
        return None
    path = config_cli.user_path(source)
    if os.path.isdir(path):
        files, seen = [], set()
        for folder, subfolders, names in os.walk(path, followlinks=True):
            real = os.path.realpath(folder)
            if real in seen:  # a link back up the tree: each folder once
                subfolders[:] = []
                continue
            seen.add(real)
            files += [os.path.join(folder, name) for name in names]
    elif os.path.exists(path):
        files = [path]
    else:
        files = glob.glob(path, recursive=True)
        if not files:  # a Hub data set id, or nothing: not counted ahead
            return None
    out = []
    for name in sorted(files):
        try:
            stat = os.stat(name)
        except OSError:  # a dangling link (an editor's lock file): the data layer skips it
            continue
        out.append((name, stat.st_size, stat.st_mtime_ns))
    return out


def _source_digest():
    """The data layer's code (data/*.py), which decides what a row encodes to."""
    digest = hashlib.sha256()
    folder = os.path.dirname(os.path.abspath(pipeline.__file__))
    for name in sorted(os.listdir(folder)):
        if name.endswith(".py") and not name.endswith("_test.py"):
            with open(os.path.join(folder, name), "rb") as f:
                digest.update(name.encode() + b"\0" + f.read())
    return digest.hexdigest()


def counts_key(data_config, tokenizer):
    """What the counts of `data_config`'s rows under `tokenizer` depend on, hashed
    (the data config, its files' sizes and times, the tokenizer's vocabulary,
    specials and chat template, the data layer's code), or None where the data
    is not local."""
    files = [_files_fingerprint(source) for source in (data_config.source,
                                                       data_config.get("eval_source") or "")
             if source]
    if any(found is None for found in files):
        return None
    vocabulary = getattr(tokenizer, "backend_tokenizer", None)
    what = {"data": data_config.to_json(sort_keys=True), "files": files,
            "tokenizer": hashlib.sha256(vocabulary.to_str().encode()).hexdigest()
            if vocabulary else repr(tokenizer),
            "specials": repr(getattr(tokenizer, "all_special_tokens", None)),
            "template": getattr(tokenizer, "chat_template", None), "code": _source_digest()}
    return hashlib.sha256(json.dumps(what, sort_keys=True).encode()).hexdigest()[:32]


def _counts(values, name):
    array = np.array(values, dtype=np.int64)
    if array.ndim != 1 or (array < 0).any():
        raise ValueError(f"{name}: not a list of token counts")
    return array


def _read_counts(path):
    """The Data a plan before kept at `path`; None (counted again) where there is
    none or it is not what `_write_counts` writes."""
    try:
        with open(path, encoding="utf-8") as f:
            found = json.load(f)
        report = pipeline.Report(**found["report"])
        report.dropped = collections.Counter(report.dropped)
        for name in ("rows_read", "kept", "trained_tokens"):
            if not isinstance(getattr(report, name), int):
                raise ValueError(f"report.{name}: not a count")
        data = Data(lengths=_counts(found["lengths"], "lengths"),
                    trained=_counts(found["trained"], "trained"), report=report,
                    eval_lengths=None if found["eval_lengths"] is None else
                    _counts(found["eval_lengths"], "eval_lengths"), cached=True)
        if len(data.lengths) != len(data.trained) or not len(data.lengths):
            raise ValueError("lengths and trained counts differ")
        return data
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError, IndexError, OverflowError,
            RecursionError) as e:  # torn or not ours: counted again and replaced
        logging.warning("plan cache: %s unreadable (%s), counting the data again", path,
                        str(e)[:200])
        return None


def _write_counts(path, data):
    """Kept for the next plan; a cache that cannot be written costs time only."""
    value = {"lengths": data.lengths.tolist(), "trained": data.trained.tolist(),
             "eval_lengths": None if data.eval_lengths is None else data.eval_lengths.tolist(),
             "report": {field.name: getattr(data.report, field.name)
                        for field in dataclasses.fields(data.report)}}
    try:
        storage.write_bytes(path, json.dumps(value, default=int).encode())
    except OSError as e:
        logging.warning("plan cache: cannot write %s (%s); the next plan counts again", path, e)


def _encode(data_config, tokenizer):
    examples, report = pipeline.encode(data_config, tokenizer)
    if report.trained_tokens == 0:
        raise PlanError(f"no token to train on in {data_config.source}: {report.rows_read} "
                        f"rows read, {report.kept} kept, dropped {dict(report.dropped)}")
    examples, held, _ = pipeline.split_validation(data_config, tokenizer, examples)
    return Data(lengths=np.array([len(e) for e in examples]),
                trained=np.array([int(e.loss_mask.sum()) for e in examples]), report=report,
                eval_lengths=None if held is None else np.array([len(e) for e in held]))


def _rows(lengths, seq_len, packed):
    if not packed:
        return len(lengths)
    return packing.pack_assignment([int(n) for n in lengths], seq_len)[1]


def layout(data, config):
    """The machine config's sequences of the data: rows, optimizer steps, token fractions."""
    data_config = config.data
    order = pipeline.shuffled(list(range(len(data.lengths))), data_config.shuffle_seed,
                              data_config.epochs)
    lengths = data.lengths[order]
    seq_len = data_config.max_seq_len
    sequences = _rows(lengths, seq_len, data_config.packing)
    steps = sequences // config.batch.effective_size
    if config.get("max_steps"):
        steps = min(steps, config.max_steps)
    if steps == 0:
        raise PlanError(f"{sequences} sequences make no optimizer step of "
                        f"{config.batch.effective_size}: not enough data")
    positions = sequences * seq_len
    out = {"examples": len(lengths), "sequences": sequences, "steps": steps,
           "seq_len": seq_len, "packed": bool(data_config.packing),
           "tokens": int(lengths.sum()), "trained_tokens": int(data.trained[order].sum()),
           "non_padding_fraction": float(lengths.sum()) / positions,
           "trained_fraction": float(data.trained[order].sum()) / positions,
           "eval_sequences": 0}
    if data.eval_lengths is not None:
        out["eval_sequences"] = _rows(data.eval_lengths, seq_len, data_config.packing)
    return out


@dataclasses.dataclass
class Rates:
    """What the billed time besides the steps is computed from (decimal GB/s)."""
    download_gbps: float  # the base from the Hub (or a bucket): an assumption, stated
    load_gbps: float  # measured: the v5e chip's host loaded 2.87 GB in 12.4 s
    checkpoint_gbps: float  # measured: LoRA state saves on the same run
    warm_compile_cache: bool = False
    source: str = ""


def measured_rates(download_gbps, warm_compile_cache=False):
    """Rates from the calibration runs that measured loading and saving."""
    loads, saves, sources = [], [], []
    for run in calibration.runs():
        measured = run.get("measured", {})
        if "base_load_seconds" in measured:
            loads.append(measured["base_bytes"] / measured["base_load_seconds"] / GB)
            saves.append(measured["checkpoint_bytes"] / measured["checkpoint_seconds"] / GB)
            sources.append(run["id"])
    if not loads:
        raise PlanError("common/calibration.json has no run that measured loading and saving")
    return Rates(download_gbps=download_gbps, load_gbps=sum(loads) / len(loads),
                 checkpoint_gbps=sum(saves) / len(saves), warm_compile_cache=warm_compile_cache,
                 source=", ".join(sources))


def saves(platform, steps, every):
    """Checkpoint saves of a fresh run: at every multiple of `every` and at the last
    step (both trainers), and on TPU one more at the first step (Orbax's
    CheckpointManager saves a first checkpoint by default)."""
    return (-(-steps // every) if every else 1) + (1 if platform == "tpu" else 0)


def evaluations(steps, every):
    """Validation passes: after every multiple of `every` and after the last step
    (lifecycle.evaluates_at)."""
    return -(-steps // every) if every else 1


def billed(step_seconds, *, steps, base_bytes, checkpoint_bytes, compile_seconds,
           saves_, eval_seconds, evals, rates):
    """Seconds billed, by part."""
    parts = {"download": base_bytes / (rates.download_gbps * GB),
             "load": base_bytes / (rates.load_gbps * GB),
             "compile": 0.0 if rates.warm_compile_cache else compile_seconds,
             "steps": steps * step_seconds,
             "checkpoints": saves_ * checkpoint_bytes / (rates.checkpoint_gbps * GB),
             "evaluation": evals * eval_seconds}
    parts["total"] = sum(parts.values())
    return parts


def lora_state_bytes(dims, config):
    """A checkpoint's bytes: float32 LoRA factors and AdamW's two moments."""
    modules = gemma4_map.tunix_lora_modules(config.lora.target_modules)
    return 12 * flops_lib.lora_parameter_count(dims, config.lora.rank, modules)


def base_bytes(dims, config):
    return flops_lib.parameter_count(dims) * BYTES[config.model.dtype]


def forward_share(dims, config):
    """The share of a training step's compiled FLOPs that a forward pass is (a
    validation pass runs only that)."""
    modules = gemma4_map.tunix_lora_modules(config.lora.target_modules)
    seq_len = config.data.max_seq_len
    total = flops_lib.compiled_flops_per_token(dims, seq_len, config.lora.rank, modules,
                                               remat=bool(config.remat))
    params = flops_lib.parameter_count(dims) + flops_lib.lora_parameter_count(
        dims, config.lora.rank, modules)
    return 2 * params / total


@dataclasses.dataclass
class Step:
    """One machine's step before calibration."""
    fits: bool
    roofline_seconds: float
    bound: str  # what limits the roofline
    bytes_per_device: float
    device_bytes: float
    why: str = ""  # why it does not fit, with its figures
    change: str = ""  # GPU: the smallest change that fits
    compile_seconds: float = 0.0
    details: dict = dataclasses.field(default_factory=dict)


def _gib(value):
    return f"{value / 2**30:.1f} GiB"


def tpu_step(machine, config, dims, layout_, cache, whole=False):
    """The TPU step from the compiled program (extrapolated per layer)."""
    from training.tpu import aot  # pylint: disable=import-outside-toplevel
    from training.tpu import extrapolate  # pylint: disable=import-outside-toplevel
    if not (machine.hbm_gbps_per_chip and machine.peak_flops_per_chip):
        raise PlanError(f"{machine.name}: the machine table records no HBM bandwidth or peak "
                        "FLOP/s for it (common/machines.py), so it has no roofline")
    measured = extrapolate.compile_step(dims, config, machine, cache, whole=whole)
    row = aot.row(dims, config, machine, measured,
                  non_padding_fraction=layout_["non_padding_fraction"],
                  trained_fraction=layout_["trained_fraction"])
    compute, memory = aot.roofline_parts(measured, row["analytic_kernels"], machine)
    limit = aot.HBM_LIMIT * row["hbm_bytes"]
    why = "" if row["fits"] else (
        f"the step needs {_gib(row['per_chip_bytes'])} per chip (XLA), over "
        f"{aot.HBM_LIMIT:.0%} of {machine.hbm_gib_per_chip} GiB HBM ({_gib(limit)}): "
        "lower the micro-batch, enable remat, scan the layers, or use more chips")
    return Step(fits=row["fits"], roofline_seconds=row["roofline_seconds"],
                bound=row["roofline_bound"],
                bytes_per_device=row["per_chip_bytes"], device_bytes=limit, why=why,
                compile_seconds=measured["compile_seconds"],
                details={"compute_seconds": compute, "memory_seconds": memory,
                         "xla_flops": row["xla_flops"],
                         "xla_bytes_accessed": row["xla_bytes_accessed"],
                         "kernel_flops": sum(k["flops"] for k in row["analytic_kernels"]),
                         "planner_bytes": row["planner_bytes"],
                         "extrapolated": measured["extrapolated"],
                         "cached": measured["cached"],
                         "host_peak_bytes": measured["host_peak_bytes"]})


def _gpu_fits(dims, config, processes):
    from training.gpu import config_base  # pylint: disable=import-outside-toplevel
    from training.gpu import memory_plan  # pylint: disable=import-outside-toplevel
    return memory_plan.config_estimate(dims, config, processes,
                                       config_base.use_fsdp(config, processes))


def _changed(config, **fields):
    out = config.copy_and_resolve_references()
    out.update_from_flattened_dict(fields)
    return out


def gpu_changes(config, machine):
    """Changes to try when a GPU config does not fit, smallest first: halved
    micro-batches, remat (and with it the micro-batches), more GPUs of the same
    kind (as the config is, then with remat and micro-batch 1). Yields
    (description, changed config, machine)."""
    sizes, size = [], config.batch.per_device_size
    while size > 1:
        size //= 2
        sizes.append(size)
    for size in sizes:
        yield (f"micro-batch {size} (--config.batch.per_device_size={size}; more "
               "accumulation)", _changed(config, **{"batch.per_device_size": size}), machine)
    if not config.remat:
        yield "remat (--config.remat=True)", _changed(config, remat=True), machine
        for size in sizes:
            yield (f"remat and micro-batch {size}",
                   _changed(config, remat=True, **{"batch.per_device_size": size}), machine)
    family = machine.name.rsplit("x", 1)[0]
    for other in sorted((m for m in machines.MACHINES.values()
                         if m.name.rsplit("x", 1)[0] == family and m.chips > machine.chips),
                        key=lambda m: m.chips):
        more = _changed(config, num_processes=other.chips, machine=other.name)
        yield f"{other.chips} GPUs ({other.name})", more, other
        yield (f"{other.chips} GPUs ({other.name}) with remat and micro-batch 1",
               _changed(more, remat=True, **{"batch.per_device_size": 1}), other)


def gpu_step(machine, config, dims):
    """The GPU step: memory plan for fit, compiled FLOPs at peak for the roofline."""
    if not machine.peak_flops_per_chip:
        raise PlanError(f"{machine.name}: the machine table records no peak FLOP/s for it "
                        "(common/machines.py), so it has no roofline")
    processes = machine.chips
    parts = _gpu_fits(dims, config, processes)
    limit = machine.hbm_bytes_per_chip
    fits, change = parts["total"] <= limit, ""
    if not fits:
        for description, changed, other in gpu_changes(config, machine):
            if _gpu_fits(dims, changed, other.chips)["total"] <= other.hbm_bytes_per_chip:
                change = description
                break
    modules = gemma4_map.tunix_lora_modules(config.lora.target_modules)
    seq_len = config.data.max_seq_len
    per_token = flops_lib.compiled_flops_per_token(
        dims, seq_len, config.lora.rank, modules, remat=bool(config.remat),
        dense_attention=True)
    flops = per_token * config.batch.effective_size * seq_len
    why = "" if fits else (
        f"the memory plan needs {_gib(parts['total'])} per GPU, over its "
        f"{machine.hbm_gib_per_chip} GiB" + (f"; fits with {change}" if change
                                             else "; no smaller setting found to fit"))
    return Step(fits=fits, roofline_seconds=flops / (machine.chips * machine.peak_flops_per_chip),
                bound="compute", bytes_per_device=parts["total"], device_bytes=limit, why=why,
                change=change, details={"compiled_flops": flops, "memory_plan": parts})


ENDS = ("point", "low", "high")


def _interval(point, low, high):
    return {"point": point, "low": low, "high": high}


def _hours(parts, part):
    """An interval of hours of one part of the billed seconds at each end."""
    return _interval(*(parts[end][part] / 3600 for end in ENDS))


def _scaled(interval, by):
    return None if interval is None or by is None else {
        k: v * by for k, v in interval.items()}


STEP_MODEL = "step_model"  # what --exclude_runs names to plan TPUs from runs instead


def _calibrated(machine, step, exclude, extra):
    """(step seconds as point/low/high, the calibration as plan.json records it).
    A TPU step comes from the step model fitted to the v5e chip's shapes
    (common/calibration.py), its range from the model's held-out errors; where
    the user gives TPU runs of their own (--calibrate_with), from those alone;
    with the model excluded, and on GPU, the roofline times the applicable runs'
    mean factor, their lowest and highest for the range."""
    yours = [run for run in extra
             if calibration.platform(run) == "tpu" and run["id"] not in exclude]
    if machine.platform == "tpu" and yours:  # runs of the user's own: they alone
        runs, scope = yours, "your TPU runs"
    elif (machine.platform == "tpu" and STEP_MODEL not in exclude
          and "compute_seconds" in step.details):
        model = calibration.step_model()
        point, low, high = calibration.predict_step(
            model, step.details["compute_seconds"], step.details["memory_seconds"])
        return _interval(point, low, high), {
            "runs": [], "scope": f"chip step model, {len(model['fit'])} shapes fitted",
            "count": 0, "model": model}
    else:
        runs, scope = calibration.applicable(machine.platform, exclude=exclude, extra=extra)
    spread = calibration.spread([run["factor"] for run in runs])
    if spread is None:
        raise PlanError(f"no measured run to calibrate {machine.name}'s step with "
                        "(common/calibration.json, --calibrate_with)")
    return (_interval(*(step.roofline_seconds * f for f in spread)),
            {"runs": runs, "scope": scope, "count": len(runs)})


def plan_machine(machine, config, dims, layout_, step, rates, *, exclude=(), extra=()):
    """The plan of one machine: its step calibrated, billed time, dollars."""
    seconds, calibrated = _calibrated(machine, step, exclude, extra)
    out = {"machine": machine.name, "platform": machine.platform, "chips": machine.chips,
           "fits": step.fits, "why": step.why, "change": step.change, "bound": step.bound,
           "bytes_per_device": step.bytes_per_device, "device_bytes": step.device_bytes,
           "roofline_seconds": step.roofline_seconds, "layout": layout_,
           "calibration": calibrated, "step": step.details}
    modules = gemma4_map.tunix_lora_modules(config.lora.target_modules)
    per_token = flops_lib.flops_per_token(dims, layout_["seq_len"], config.lora.rank, modules)
    positions = config.batch.effective_size * layout_["seq_len"]
    tokens = positions * layout_["non_padding_fraction"]
    # A validation pass runs the forward share of a step per effective batch.
    eval_batches = math.ceil(layout_["eval_sequences"] / config.batch.effective_size)
    evals = (evaluations(layout_["steps"], config.eval_every_steps)
             if layout_["eval_sequences"] else 0)
    share = forward_share(dims, config)
    parts = {name: billed(seconds[name], steps=layout_["steps"],
                          base_bytes=base_bytes(dims, config),
                          checkpoint_bytes=lora_state_bytes(dims, config),
                          compile_seconds=step.compile_seconds,
                          saves_=saves(machine.platform, layout_["steps"],
                                       config.checkpoint_every_steps),
                          eval_seconds=seconds[name] * share * eval_batches, evals=evals,
                          rates=rates)
             for name in ENDS}
    hours = _hours(parts, "total")
    out.update(
        step_seconds=seconds, billed_seconds=parts["point"], hours=hours,
        step_hours=_hours(parts, "steps"),
        factor={name: value / step.roofline_seconds for name, value in seconds.items()},
        dollars=_scaled(hours, machine.dollars_per_hour),
        spot_dollars=_scaled(hours, machine.spot_dollars_per_hour),
        tokens_per_s=tokens / seconds["point"],
        trained_tokens_per_s=positions * layout_["trained_fraction"] / seconds["point"],
        mfu=flops_lib.mfu(tokens / seconds["point"], per_token, machine.chips,
                          machine.peak_flops_per_chip),
        dollars_per_hour=machine.dollars_per_hour,
        spot_dollars_per_hour=machine.spot_dollars_per_hour,
        price=price_record(machine))
    return out


def price_record(machine):
    """The machine's price as plan.json keeps it: per chip-hour, per VM, its source."""
    return {**dataclasses.asdict(machine.price),
            "dollars_per_vm_hour": machine.dollars_per_vm_hour, "vms": machine.hosts}


def refused(machine, why):
    """The plan of a machine whose config cannot run (a batch that does not split, a
    sequence length the attention kernel's blocks do not divide): why, and nothing else."""
    return {"machine": machine.name, "platform": machine.platform, "chips": machine.chips,
            "fits": False, "why": why, "change": "", "hours": None, "dollars": None,
            "spot_dollars": None, "calibration": {"runs": [], "scope": "", "count": 0},
            "price": price_record(machine)}


def mark(plans, deadline_hours=None, budget=None):
    """Ranks the plans by dollars and by hours and marks what meets the deadline
    and the budget (a plan meets them at its interval's high end; `maybe` at its
    point)."""
    def meets(interval, limit):
        if limit is None:
            return None
        if interval is None:
            return "no price"
        if interval["high"] <= limit:
            return "yes"
        return "maybe" if interval["point"] <= limit else "no"

    fitting = [p for p in plans if p["fits"]]  # `dollars` None: no price recorded
    by_hours = sorted(fitting, key=lambda p: p["hours"]["point"])
    by_dollars = sorted((p for p in fitting if p["dollars"]),
                        key=lambda p: p["dollars"]["point"])
    for p in plans:
        p["rank_hours"] = by_hours.index(p) + 1 if p in by_hours else None
        p["rank_dollars"] = by_dollars.index(p) + 1 if p in by_dollars else None
        p["meets_deadline"] = meets(p["hours"], deadline_hours) if p["fits"] else "no"
        p["within_budget"] = meets(p["dollars"], budget) if p["fits"] else "no"
    return {"by_hours": [p["machine"] for p in by_hours],
            "by_dollars": [p["machine"] for p in by_dollars]}


def recipe_summary(recipe):
    values = {field: _get(recipe, field) for field in RECIPE_FIELDS}
    return {field: value.to_dict() if hasattr(value, "to_dict") else value
            for field, value in values.items()}


def hparams_check(config, machine):
    """The batch split both trainers would refuse, refused here first."""
    if machine.platform == "gpu":
        hparams.gradient_accumulation_steps(config.batch, machine.chips)
