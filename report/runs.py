"""The run directories the report reads, as plain records, and the reference's.

A directory is recognized by what it holds:
  training   run.json + metrics.jsonl (--workdir of //training/tpu:sft or //training/gpu:sft)
  serving    summary.json with `input_lengths` (//serving:bench --out_dir)
  quality    summary.json with `pass_at_k` (//eval:verilog_eval --out_dir)
Anything else is reported as not understood; nothing is guessed. Every record
names the file its figures came from. `reference` builds the same records
from the published figures of arXiv 2605.25645 (report/reference/), so the
paper's tables go through the code that reports our runs.
"""

import dataclasses
import json
import os
import posixpath

from common import cli
from common import jsonl
from common import repo
from common import storage
from training.common import billing

REFERENCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "reference",
                         "arxiv_2605_25645.json")


class RunsError(cli.UserError):
    pass


# What a training run's `hours` (and so its cost) measure.
BILLED = "billed"  # the processes' lives (run.json segments): what the VMs were paid for
PUBLISHED = "billed (published)"  # the reference study's wall-clock hours
STEPS_ONLY = "step time only"  # a run directory written before segments were kept


@dataclasses.dataclass
class Training:
    label: str
    stack: str
    machine: str
    hours: float  # billed hours where known (`hours_basis`); every $ figure uses them
    tokens_per_s: float
    trained_tokens_per_s: float | None = None
    tokens: int | None = None
    trained_tokens: int | None = None
    mfu: float | None = None
    curves: dict = dataclasses.field(default_factory=dict)  # name -> [(step, value)]
    # How the run was set up (packing, attention, remat, batches) and its recipe
    # (run.json); empty where unknown (the paper's runs, older run directories).
    setup: dict = dataclasses.field(default_factory=dict)
    recipe: dict = dataclasses.field(default_factory=dict)
    # What was read of the data (run.json's `data`: rows read, kept, dropped by
    # reason, capped, truncated); empty where unknown.
    data: dict = dataclasses.field(default_factory=dict)
    source: str = ""
    hours_basis: str = BILLED
    # Where the billed time went (billing.summarize, in hours); None where unknown.
    step_hours: float | None = None
    startup_hours: float | None = None
    checkpoint_hours: float | None = None
    evaluation_hours: float | None = None
    lost_hours: float | None = None
    lost_steps: int | None = None
    segments: int | None = None


@dataclasses.dataclass
class Serving:
    label: str
    machine: str
    peak_output_tok_s: dict  # input length (str) -> output tok/s
    saturation_rate: dict = dataclasses.field(default_factory=dict)
    points: dict = dataclasses.field(default_factory=dict)  # input length -> [point dicts]
    source: str = ""


@dataclasses.dataclass
class Quality:
    label: str
    pass_at_k: dict
    interval: dict = dataclasses.field(default_factory=dict)
    problems: dict = dataclasses.field(default_factory=dict)  # id -> {"n", "passed"}
    protocol: str = ""
    source: str = ""


@dataclasses.dataclass
class Runs:
    training: list = dataclasses.field(default_factory=list)
    serving: list = dataclasses.field(default_factory=list)
    quality: list = dataclasses.field(default_factory=list)
    published: dict = dataclasses.field(default_factory=dict)
    source: str = ""
    # Inputs read with a repair, as sentences (a torn last line dropped).
    repaired: list = dataclasses.field(default_factory=list)


_READ = ["run.json", "metrics.jsonl", "summary.json"]  # what a report reads of a run


def _json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        raise RunsError(f"cannot read {path}: {e}") from None


# The setup fields of a training row: (name in the report, key in run.json).
SETUP_KEYS = (("packing", "packing"), ("attention", "attention"), ("remat", "remat"),
              ("micro_batch", "per_device_batch"), ("effective_batch", "effective_batch"))


def _training(directory, named, repaired):
    info = _json(os.path.join(directory, "run.json"))
    path = os.path.join(directory, "metrics.jsonl")
    try:
        records, torn = jsonl.read(path)
    except OSError as e:
        raise RunsError(f"cannot read {path}: {e}") from None
    if torn:
        repaired.append(f"{storage.join(named, 'metrics.jsonl')}: a torn last line (a run stopped mid-write) was left out")
    evals = [r for r in records if "eval_loss" in r]  # validation records, if any
    records = [r for r in records if "eval_loss" not in r]
    if not records:
        raise RunsError(f"{path} holds no step")
    last = records[-1]
    if "total_step_time_s" in last:  # every step counted, logged or not
        seconds, tokens, trained = (last["total_step_time_s"], last["total_tokens"],
                                    last["total_trained_tokens"])
    else:  # an older run directory: the logged steps are all there is
        seconds = sum(r["step_time_s"] for r in records)
        tokens = sum(r["tokens"] for r in records)
        trained = sum(r["trained_tokens"] for r in records)
    bill = billing.summarize(info["segments"]) if info.get("segments") else None
    time_figures = {"hours_basis": STEPS_ONLY, "hours": seconds / 3600}
    if bill:
        time_figures = {
            "hours_basis": BILLED, "hours": bill["billed_s"] / 3600,
            "startup_hours": bill["startup_s"] / 3600,
            "checkpoint_hours": bill["checkpoint_s"] / 3600,
            "evaluation_hours": bill["evaluation_s"] / 3600,
            "lost_hours": bill["lost_s"] / 3600, "lost_steps": bill["lost_steps"],
            "segments": bill["segments"]}
    mfus = [r["mfu"] for r in records if r.get("mfu") is not None]
    curves = {name: [(r["step"], r[name]) for r in records if r.get(name) is not None]
              for name in ("loss", "grad_norm")}
    curves["eval_loss"] = [(r["step"], r["eval_loss"]) for r in evals]
    return Training(
        label=f"{info['stack'].upper()} {info.get('machine', '?')}", stack=info["stack"],
        machine=info.get("machine", "?"), tokens_per_s=tokens / seconds, step_hours=seconds / 3600,
        trained_tokens_per_s=trained / seconds, tokens=tokens, trained_tokens=trained,
        **time_figures,
        mfu=sum(mfus) / len(mfus) if mfus else None, curves=curves,
        setup={name: info[key] for name, key in SETUP_KEYS if key in info},
        recipe=info.get("recipe", {}), data=info.get("data", {}),
        source=storage.join(named, "metrics.jsonl"))


def _serving(named, summary):
    record = summary.get("record") or {}
    lengths = summary["input_lengths"]
    return Serving(
        label=record.get("label") or record.get("machine") or posixpath.basename(named),
        machine=record.get("machine", "?"),
        peak_output_tok_s={k: v["peak_output_tok_s"] for k, v in lengths.items()},
        saturation_rate={k: v["saturation_rate"] for k, v in lengths.items()},
        points={k: [p for p in v["points"] if p.get("status") == "ok"]
                for k, v in lengths.items()},
        source=storage.join(named, "summary.json"))


def _quality(named, summary):
    return Quality(
        label=posixpath.basename(os.path.normpath(named)), pass_at_k=summary["pass_at_k"],
        interval=summary.get("pass_at_k_interval_95", {}),
        problems=summary.get("problems", {}), protocol=summary.get("protocol", ""),
        source=storage.join(named, "summary.json"))


def load(directories):
    """Runs of every directory given (local folders or gs:// URLs, whose summaries
    are copied to the local cache first); a directory of no known kind is an error."""
    runs = Runs(source=", ".join(directories))
    for named in directories:
        directory = storage.fetch(named, only=_READ) if storage.is_url(named) else named
        if not os.path.isdir(directory):
            raise RunsError(f"{named} is not a directory")
        summary_path = os.path.join(directory, "summary.json")
        if os.path.exists(os.path.join(directory, "run.json")):
            runs.training.append(_training(directory, named, runs.repaired))
        elif os.path.exists(summary_path):
            summary = _json(summary_path)
            if "input_lengths" in summary:
                runs.serving.append(_serving(named, summary))
            elif "pass_at_k" in summary:
                runs.quality.append(_quality(named, summary))
            else:
                raise RunsError(f"{summary_path} is neither a serving sweep nor an evaluation")
        else:
            raise RunsError(f"{named} holds no run.json or summary.json: not a training, "
                            "serving or evaluation run")
    return runs


def reference(path=REFERENCE):
    """The reference study's published figures as Runs."""
    data = _json(path)
    root = repo.code_root()
    path = os.path.relpath(path, root) if path.startswith(root + os.sep) else path
    runs = Runs(published=data.get("published", {}), source=data["source"])
    for t in data["training"]:
        runs.training.append(Training(label=t["label"], stack=t["stack"], machine=t["machine"],
                                      hours=t["hours"], tokens_per_s=t["tokens_per_s"],
                                      hours_basis=PUBLISHED, source=path))
    for s in data["serving"]:
        points = {length: [{"rate": 4.0, "median_ttft_ms": ttft}]
                  for length, ttft in s.get("median_ttft_ms_at_rate_4", {}).items()}
        runs.serving.append(Serving(label=s["label"], machine=s["machine"],
                                    peak_output_tok_s=s["peak_output_tok_s"], points=points,
                                    source=path))
    for q in data["quality"]:
        runs.quality.append(Quality(label=q["label"], pass_at_k=q["pass_at_k"], source=path))
    return runs
