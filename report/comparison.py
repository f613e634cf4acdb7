"""The TPU-vs-GPU comparison as data: figures computed from Runs (report/runs.py).

`build` returns the report's content as one JSON-ready dict; report.py renders
it. Prices come from the machine table only. A figure that cannot be computed
(no price, no run of that kind) is None and listed under `missing`; nothing is
filled in.
"""

from common import machines
from eval import scoring
from report import costs
from report import runs as runs_lib


def platform_of(machine):
    """TPU, GPU or the machine's own name (e.g. CPU), from a machine-table name."""
    for prefix in ("tpu", "gpu"):
        if machine.startswith(prefix):
            return prefix.upper()
    return machine.upper()


def _price(machine):
    try:
        return machines.get(machine).dollars_per_hour
    except machines.UnknownMachine:
        return None


def training_rows(runs):
    rows = []
    for t in runs.training:
        price = _price(t.machine)
        cost = costs.training_cost(t.hours, price)
        rows.append({
            "label": t.label, "platform": t.stack.upper(), "machine": t.machine,
            "hours": t.hours, "hours_basis": t.hours_basis, "step_hours": t.step_hours,
            "startup_hours": t.startup_hours, "checkpoint_hours": t.checkpoint_hours,
            "evaluation_hours": t.evaluation_hours, "lost_hours": t.lost_hours,
            "lost_steps": t.lost_steps, "segments": t.segments,
            "tokens_per_s": t.tokens_per_s,
            "trained_tokens_per_s": t.trained_tokens_per_s, "mfu": t.mfu,
            "eval_loss": t.curves["eval_loss"][-1][1] if t.curves.get("eval_loss") else None,
            "setup": t.setup, "recipe": t.recipe, "data": t.data,
            "dollars_per_hour": price, "cost": cost,
            "dollars_per_million_tokens": costs.dollars_per_million_tokens(t.tokens_per_s, price),
            "dollars_per_million_trained_tokens": costs.dollars_per_million_tokens(
                t.trained_tokens_per_s, price),
            "source": t.source})
    return rows


# Attention kernels by what they cost: scores materialized, or fused (blockwise).
ATTENTION_KINDS = {"dense": "dense", "eager": "dense", "splash": "fused", "sdpa": "fused",
                   "flash_attention_2": "fused", "flash_attention_3": "fused",
                   "flex_attention": "fused"}
# The setup fields two runs must share: (field, how it reads, what is compared).
SETUP_FIELDS = (
    ("packing", lambda v: "packed" if v else "padded", bool),
    ("attention", lambda v: v if ATTENTION_KINDS.get(v, v) == v else f"{ATTENTION_KINDS[v]} ({v})",
     lambda v: ATTENTION_KINDS.get(v, v)),
    ("remat", lambda v: "on" if v else "off", bool),
    ("micro_batch", str, int),
    ("effective_batch", str, int))


def _flat(tree, prefix=""):
    if not isinstance(tree, dict):
        return {prefix: tree}
    out = {}
    for key, value in tree.items():
        out.update(_flat(value, f"{prefix}.{key}" if prefix else key))
    return out


def unlike(training):
    """How the TPU run and the GPU run differ besides their platform, as phrases
    ("packing: TPU packed, GPU padded"); [] when alike, or when a side has no run
    or did not record its setup. A difference here is in the cost ratios too."""
    by = {row["platform"]: row for row in training}
    if not {"TPU", "GPU"} <= set(by):
        return []
    tpu, gpu = by["TPU"], by["GPU"]
    out = []
    for name, show, compared in SETUP_FIELDS:
        a, b = tpu["setup"].get(name), gpu["setup"].get(name)
        if a is not None and b is not None and compared(a) != compared(b):
            out.append(f"{name.replace('_', ' ')}: TPU {show(a)}, GPU {show(b)}")
    a, b = _flat(tpu["recipe"]), _flat(gpu["recipe"])
    for key in sorted(set(a) & set(b)):
        if a[key] != b[key]:
            out.append(f"recipe {key}: TPU {a[key]}, GPU {b[key]}")
    return out


def _stat(points, name):
    return {str(p["rate"]): p.get(name) for p in points}


def serving_rows(runs):
    rows = []
    for s in runs.serving:
        price = _price(s.machine)
        lengths = {}
        for length, peak in sorted(s.peak_output_tok_s.items(), key=lambda kv: int(kv[0])):
            points = s.points.get(length, [])
            lengths[length] = {
                "peak_output_tok_s": peak, "saturation_rate": s.saturation_rate.get(length),
                "dollars_per_million_output_tokens": costs.dollars_per_million_tokens(peak, price),
                **{f"{stat}_by_rate": _stat(points, stat) for stat in (
                    "output_throughput", "median_ttft_ms", "p99_ttft_ms", "median_tpot_ms",
                    "p99_tpot_ms")}}
        rows.append({"label": s.label, "platform": platform_of(s.machine), "machine": s.machine,
                     "dollars_per_hour": price, "input_lengths": lengths, "source": s.source})
    return rows


def ownership(training, serving, hours, input_len=None):
    """Training + serving per platform that has both: by hours, and by output tokens."""
    platforms = {}
    for row in training:
        platforms.setdefault(row["platform"], {})["training"] = row
    for row in serving:
        platforms.setdefault(row["platform"], {})["serving"] = row
    complete = {p: v for p, v in platforms.items() if {"training", "serving"} <= set(v)}
    common = set.intersection(*(set(v["serving"]["input_lengths"]) for v in complete.values())) \
        if complete else set()
    length = input_len if input_len in common else max(common, key=int, default=None)
    out = {"platforms": {}, "input_len": length}
    for name, pair in sorted(complete.items()):
        train_cost, price = pair["training"]["cost"], pair["serving"]["dollars_per_hour"]
        per_million = (pair["serving"]["input_lengths"][length]["dollars_per_million_output_tokens"]
                       if length else None)
        out["platforms"][name] = {
            "training_cost": train_cost, "serving_dollars_per_hour": price,
            "at_hours": {_hours_key(h): costs.ownership(train_cost, price, h) for h in hours},
            "dollars_per_million_output_tokens": per_million,
            "sources": [pair["training"]["source"], pair["serving"]["source"]]}
    if {"TPU", "GPU"} <= set(out["platforms"]):
        tpu, gpu = out["platforms"]["TPU"], out["platforms"]["GPU"]
        out["gpu_over_tpu_at_hours"] = {h: costs.ratio(gpu["at_hours"][h], tpu["at_hours"][h])
                                        for h in tpu["at_hours"]}
        out["crossover_hours"] = costs.crossover(
            tpu["training_cost"], tpu["serving_dollars_per_hour"],
            gpu["training_cost"], gpu["serving_dollars_per_hour"])
        out["crossover_million_output_tokens"] = costs.crossover(
            tpu["training_cost"], tpu["dollars_per_million_output_tokens"],
            gpu["training_cost"], gpu["dollars_per_million_output_tokens"])
    return out


def quality_rows(runs):
    rows = [{"label": q.label, "protocol": q.protocol, "pass_at_k": q.pass_at_k,
             "interval_95": q.interval, "problems": len(q.problems) or None,
             "source": q.source} for q in runs.quality]
    differences = [{"a": a.label, "b": b.label, **scoring.problem_differences(
                        {"problems": a.problems}, {"problems": b.problems})}
                   for i, a in enumerate(runs.quality) for b in runs.quality[i + 1:]
                   if set(a.problems) & set(b.problems)]
    return rows, differences


def _pair(rows, key):
    by = {r["platform"]: r[key] for r in rows}
    return by.get("TPU"), by.get("GPU")


def checks(report, published):
    """The published claims beside what their own inputs give (reference mode)."""
    out = []

    def add(claim, value, recomputed):
        if value is None:
            return
        holds = recomputed is not None and abs(recomputed - value) <= 0.01 * max(abs(value), 1)
        out.append({"claim": claim, "published": value, "recomputed": recomputed,
                    "holds": holds})

    tpu_cost, gpu_cost = _pair(report["training"], "cost")
    for platform, value in published.get("training_cost", {}).items():
        add(f"{platform} training cost ($)", value, tpu_cost if platform == "TPU" else gpu_cost)
    add("training cost ratio GPU / TPU", published.get("training_cost_ratio"),
        costs.ratio(gpu_cost, tpu_cost))
    tpu_hours, gpu_hours = _pair(report["training"], "hours")
    add("training speed-up of TPU (GPU hours / TPU hours)", published.get("training_speedup"),
        costs.ratio(gpu_hours, tpu_hours))
    serving = {r["platform"]: r for r in report["serving"]}
    for platform, value in published.get("dollars_per_million_output_tokens_4096", {}).items():
        row = serving.get(platform, {}).get("input_lengths", {}).get("4096", {})
        add(f"{platform} serving $ per 1M output tokens at 4096 input", value,
            row.get("dollars_per_million_output_tokens"))
    platforms = report["ownership"]["platforms"]
    for hours, values in published.get("tco_train_plus_hours", {}).items():
        for platform, value in values.items():
            add(f"{platform} training + {hours} h of serving ($)", value,
                platforms.get(platform, {}).get("at_hours", {}).get(hours))
    for claim in published.get("tco_claims", []):
        hours = claim["hours"]
        tpu = platforms.get("TPU", {}).get("at_hours", {}).get(str(hours))
        gpu = platforms.get("GPU", {}).get("at_hours", {}).get(str(hours))
        if tpu is None:
            tpu = costs.ownership(platforms["TPU"]["training_cost"],
                                  platforms["TPU"]["serving_dollars_per_hour"], hours)
            gpu = costs.ownership(platforms["GPU"]["training_cost"],
                                  platforms["GPU"]["serving_dollars_per_hour"], hours)
        add(f"{claim['claim']} (GPU / TPU at {hours} h)", claim["ratio"], costs.ratio(gpu, tpu))
    return out


def build(runs, hours=(1.0, 24.0), input_len="4096"):
    training = training_rows(runs)
    serving = serving_rows(runs)
    quality, differences = quality_rows(runs)
    report = {"source": runs.source, "training": training, "serving": serving,
              "ownership": ownership(training, serving, hours, input_len),
              "quality": quality, "quality_differences": differences,
              "unlike": unlike(training)}
    stacks = {row["platform"] for row in training}
    tpu, gpu = _pair(training, "cost")
    report["training_ratios"] = {
        "gpu_cost_over_tpu": costs.ratio(gpu, tpu),
        "tpu_speed_over_gpu": costs.ratio(*_pair(training, "tokens_per_s"))}
    missing = [f"no {s} training run" for s in ("TPU", "GPU") if s not in stacks]
    missing += [f"no price for machine {r['machine']}" for r in training + serving
                if r["dollars_per_hour"] is None]
    if not serving:
        missing.append("no serving sweep")
    if not quality:
        missing.append("no evaluation")
    if not report["ownership"]["platforms"]:
        missing.append("no platform with both a training run and a serving sweep: no cost "
                       "of ownership")
    report["missing"] = missing
    report["repaired"] = list(runs.repaired)
    if runs.published:
        report["checks"] = checks(report, runs.published)
    return report


def planned(training, plan):
    """Each training row beside the plan of its machine (//report:plan's plan.json):
    planned and measured hours (billed, or the steps' where the run kept step time
    only), dollars and tokens/s, measured / planned, and whether the measured hours
    fall in the plan's interval. Rows of machines the
    plan did not plan (or found not to fit) are left out."""
    by_machine = {p["machine"]: p for p in plan.get("plans", []) if p.get("fits")}
    out = []
    for row in training:
        p = by_machine.get(row["machine"])
        if p is None:
            continue
        # A run directory without billed segments has step time only: against the
        # plan's steps, not its billed hours.
        billed = row.get("hours_basis", runs_lib.BILLED) != runs_lib.STEPS_ONLY
        hours = p["hours"] if billed else p["step_hours"]
        out.append({
            "label": row["label"], "machine": row["machine"], "billed": billed,
            "planned_hours": hours, "hours": row["hours"],
            "hours_ratio": costs.ratio(row["hours"], hours["point"]),
            "in_interval": hours["low"] <= row["hours"] <= hours["high"],
            "planned_cost": (p.get("dollars") or {}).get("point"), "cost": row["cost"],
            "planned_tokens_per_s": p["tokens_per_s"], "tokens_per_s": row["tokens_per_s"],
            "tokens_per_s_ratio": costs.ratio(row["tokens_per_s"], p["tokens_per_s"]),
            "calibration_runs": p["calibration"]["count"]})
    return out


def _hours_key(hours):
    return str(int(hours)) if float(hours).is_integer() else str(hours)
