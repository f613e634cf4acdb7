"""Turns training, serving and evaluation results into the TPU-vs-GPU comparison.

    bazel run //report:report -- --runs=runs/v5p8,runs/h100x2,out/bench-tpu,out/eval --out=report
    bazel run //report:report -- --reference --out=report-paper

Reads the run directories given (report/runs.py says which kinds) or, with
--reference, the published figures of arXiv 2605.25645, and writes into --out
the report as JSON (every figure, with the file it came from), as Markdown and
as self-contained HTML (plots embedded, opens offline), and the plots as PNG. Prices and peaks come from the machine table (common/machines.py).
An input that is missing is said to be missing, never filled in. With
--reference the report also checks the paper's claims against its own inputs.
"""

import json
import os

from absl import app
from absl import flags

from common import cli
from common import config_cli
from common import machines
from common import storage
from report import comparison
from report import costs
from report import document
from report import runs as runs_lib

_CONFIG = config_cli.define_config_flag(__file__)
_RUNS = flags.DEFINE_list("runs", [], "Run directories: training, serving sweeps, evaluations.")
_REFERENCE = flags.DEFINE_bool("reference", False, "Report the reference study's published "
                               "figures instead of runs.")
_OUT = flags.DEFINE_string("out", "report", "Where the report is written.")
_PLAN = flags.DEFINE_string("plan", "", "A plan of these runs (//report:plan's plan.json): "
                            "the report shows planned beside measured.")
_REGION, _PRICES = costs.define_price_flags()


def _share(hours, of):
    """`1,234 s (12%)`: a part of the billed time."""
    if hours is None:
        return "n/a"
    return document.duration(hours) + (f" ({100 * hours / of:.0f}%)" if of else "")


def _by_basis(training):
    out = {}
    for row in training:
        out.setdefault(row["hours_basis"], []).append(row)
    return out


# The report as blocks (report/document.py renders them).


def _setup(setup):
    """A training row's setup in a few words: "packed, splash, no remat, micro-batch 2 of 8"."""
    if not setup:
        return "n/a"
    words = [{True: "packed", False: "padded"}.get(setup.get("packing"), "?"),
             setup.get("attention") or "?",
             {True: "remat", False: "no remat"}.get(setup.get("remat"), "?")]
    return ", ".join(words) + (f", micro-batch {setup.get('micro_batch', '?')} of "
                               f"{setup.get('effective_batch', '?')}")


def _count(data, key):
    return "?" if data.get(key) is None else f"{data[key]:,}"


def _capped(data):
    """Rows a cap left unread, and the cap: "0 (no cap)", "83,000 (first 10,000)"."""
    rows = data.get("rows_capped", data.get("rows_not_read"))
    if rows is None:
        return "?"
    return f"{rows:,} ({'first ' + format(data['max_rows'], ',') if data.get('max_rows') else 'no cap'})"


def blocks(report, plots):
    out = [("h", 1, "TPU vs GPU: fine-tuning and serving Gemma 4"),
           ("p", f"Inputs: {report['source']}.")]
    if report["missing"]:
        out.append(("p", "Missing: " + "; ".join(report["missing"]) + "."))
    if report["repaired"]:
        out.append(("p", "Repaired: " + "; ".join(report["repaired"]) + "."))
    unlike = report.get("unlike") or []
    caveat = (f"The TPU and GPU runs differ in more than their platform ({'; '.join(unlike)}): "
              "these ratios compare the two runs, not the two platforms. ") if unlike else ""
    out.append(("h", 2, "Training"))
    out.append(("table", ["run", "machine", "setup", "billed time", "tokens/s",
                          "trained tokens/s", "MFU", "last eval_loss", "$/hour", "$ per run",
                          "$ per 1M tokens", "$ per 1M trained tokens", "from"],
                [[r["label"], r["machine"], _setup(r.get("setup") or {}),
                  document.duration(r["hours"]) + ("" if r["hours_basis"] == runs_lib.BILLED else " *"),
                  document.number(r["tokens_per_s"], 1),
                  document.number(r["trained_tokens_per_s"], 1),
                  "n/a" if r["mfu"] is None else f"{100 * r['mfu']:.1f}%",
                  "n/a" if r.get("eval_loss") is None else f"{r['eval_loss']:.4f}",
                  document.money(r["dollars_per_hour"]), document.money(r["cost"]),
                  document.money(r["dollars_per_million_tokens"]),
                  document.money(r["dollars_per_million_trained_tokens"]), r["source"]]
                 for r in report["training"]]))
    out.append(("p", "Billed time is what the machines were paid for: each training "
                     "process from its start to its end (a process killed outright: to its "
                     "last heartbeat), resumes included; every $ figure uses it. Tokens/s "
                     "and MFU are over step time. Start-up runs from a process's start to the "
                     "end of its first step (download, load, compile and that step), so it "
                     "overlaps the step time by one step per process; lost work is what a "
                     "killed process did after its last checkpoint." + "".join(
                         f" * {basis}: {', '.join(r['label'] for r in rows)}." for basis, rows in
                         _by_basis(report["training"]).items() if basis != runs_lib.BILLED)))
    billed = [r for r in report["training"] if r["hours_basis"] == runs_lib.BILLED]
    if billed:
        out.append(("table", ["run", "billed", "steps", "start-up (download, load, compile)",
                              "checkpoints", "evaluations", "lost work", "processes"],
                    [[r["label"], document.duration(r["hours"]), _share(r["step_hours"], r["hours"]),
                      _share(r["startup_hours"], r["hours"]),
                      _share(r["checkpoint_hours"], r["hours"]),
                      _share(r["evaluation_hours"], r["hours"]),
                      _share(r["lost_hours"], r["hours"]) + f", {r['lost_steps']} steps",
                      str(r["segments"])] for r in billed]))
    read = [r for r in report["training"] if r.get("data")]
    if read:
        out.append(("table", ["run", "data", "rows read", "kept", "dropped", "capped (not read)",
                              "truncated"],
                    [[r["label"], r["data"].get("source", "?"), _count(r["data"], "rows_read"),
                      _count(r["data"], "kept"),
                      ", ".join(f"{k} {v:,}" for k, v in (r["data"].get("dropped") or {}).items())
                      or "none", _capped(r["data"]), _count(r["data"], "truncated")]
                     for r in read]))
    if report.get("planned"):
        out.append(("table", ["run", "machine", "hours of", "planned hours", "measured",
                              "measured / planned", "in the interval", "planned $", "measured $",
                              "planned tokens/s", "measured", "measured / planned",
                              "calibration runs"],
                    [[r["label"], r["machine"], "billing" if r["billed"] else "steps only",
                      f"{document.duration(r['planned_hours']['point'])} "
                      f"({document.duration(r['planned_hours']['low'])} to "
                      f"{document.duration(r['planned_hours']['high'])})",
                      document.duration(r["hours"]), document.number(r["hours_ratio"]),
                      "yes" if r["in_interval"] else "no", document.money(r["planned_cost"]),
                      document.money(r["cost"]), document.number(r["planned_tokens_per_s"], 0),
                      document.number(r["tokens_per_s"], 0),
                      document.number(r["tokens_per_s_ratio"]), str(r["calibration_runs"])]
                     for r in report["planned"]]))
    ratios = report["training_ratios"]
    if ratios["gpu_cost_over_tpu"] is not None:
        out.append(("p", caveat + f"GPU training costs {ratios['gpu_cost_over_tpu']:.2f}x the TPU's; "
                         f"TPU processes {ratios['tpu_speed_over_gpu']:.2f}x the GPU's "
                         "tokens per second."))
    for name in ("loss", "grad_norm"):
        if name in plots:
            out.append(("img", plots[name], f"{name} per step, both stacks"
                        + (" (dashed: eval_loss on the validation set)" if name == "loss" and any(
                            r.get("eval_loss") for r in report["training"]) else "")))
    out.append(("h", 2, "Serving"))
    rows = []
    for s in report["serving"]:
        for length, v in s["input_lengths"].items():
            ttft = v["median_ttft_ms_by_rate"]
            rows.append([s["label"], s["machine"], length, document.number(v["peak_output_tok_s"], 1),
                         document.number(v["saturation_rate"]), document.money(v["dollars_per_million_output_tokens"]),
                         ", ".join(f"{rate}: {document.number(ms, 0)}" for rate, ms in ttft.items()) or "n/a",
                         s["source"]])
    out.append(("table", ["run", "machine", "input tokens", "peak output tok/s",
                          "saturation (req/s)", "$ per 1M output tokens",
                          "median TTFT ms by request rate", "from"], rows))
    if "serving" in plots:
        out.append(("img", plots["serving"], "output tokens/s by request rate"))
    own = report["ownership"]
    out.append(("h", 2, "Cost of ownership" + (
        f" (unlike runs: {', '.join(u.split(':')[0] for u in unlike)} differ)" if unlike else "")))
    if own["platforms"]:
        hours = list(next(iter(own["platforms"].values()))["at_hours"])
        out.append(("table", ["platform", "training", "serving $/hour",
                              *[f"training + {h} h" for h in hours],
                              f"$ per 1M output tokens ({own['input_len']} in)", "from"],
                    [[name, document.money(p["training_cost"]), document.money(p["serving_dollars_per_hour"]),
                      *[document.money(p["at_hours"][h]) for h in hours],
                      document.money(p["dollars_per_million_output_tokens"]), ", ".join(p["sources"])]
                     for name, p in own["platforms"].items()]))
        if "gpu_over_tpu_at_hours" in own:
            text = caveat + "GPU / TPU: " + ", ".join(f"{document.number(r)}x at {h} h" for h, r in
                                             own["gpu_over_tpu_at_hours"].items())
            cross = own.get("crossover_hours")
            text += (f"; the two cost the same after {cross:.1f} h of serving" if cross
                     else "; the lines do not cross")
            cross = own.get("crossover_million_output_tokens")
            text += (f"; per output token they cross at {cross:.1f} M tokens" if cross
                     else "; per output token they do not cross")
            out.append(("p", text + "."))
        if "ownership" in plots:
            out.append(("img", plots["ownership"], "training + hours of serving"))
    else:
        out.append(("p", "Not computed: no platform has both a training run and a serving "
                         "sweep."))
    out.append(("h", 2, "Quality (VerilogEval spec-to-rtl)"))
    out.append(("table", ["model", "protocol", "pass@k", "95% interval", "problems", "from"],
                [[q["label"], q["protocol"] or "n/a",
                  ", ".join(f"pass@{k} {document.number(v, 3)}" for k, v in q["pass_at_k"].items()),
                  ", ".join(f"pass@{k} [{document.number(lo, 3)}, {document.number(hi, 3)}]"
                            for k, (lo, hi) in q["interval_95"].items()) or "n/a",
                  document.number(q["problems"]), q["source"]] for q in report["quality"]]))
    for d in report["quality_differences"]:
        out.append(("p", f"Solved by {d['a']} only: {', '.join(d['only_a']) or 'none'}. "
                         f"Solved by {d['b']} only: {', '.join(d['only_b']) or 'none'}."))
    if report.get("checks") is not None:
        out.append(("h", 2, "The paper's claims against its own inputs"))
        out.append(("table", ["claim", "published", "from its inputs", "follows"],
                    [[c["claim"], document.number(c["published"]), document.number(c["recomputed"], 3),
                      "yes" if c["holds"] else "NO"] for c in report["checks"]]))
    return out


def plot(report, runs, out_dir):
    """PNG plots of what the inputs allow: {name: path}."""
    import matplotlib  # pylint: disable=import-outside-toplevel
    matplotlib.use("Agg")
    from matplotlib import pyplot as plt  # pylint: disable=import-outside-toplevel
    written = {}

    def save(figure, name):
        path = os.path.join(out_dir, f"{name}.png")
        figure.savefig(path, dpi=100, bbox_inches="tight")
        plt.close(figure)
        written[name] = path

    for curve in ("loss", "grad_norm"):
        series = [(t.label, t.curves.get(curve)) for t in runs.training if t.curves.get(curve)]
        if series:
            figure, axis = plt.subplots(figsize=(7, 4))
            for label, points in series:
                axis.plot(*zip(*points), label=label)
            for t in runs.training:  # the validation loss beside the training loss
                if curve == "loss" and t.curves.get("eval_loss"):
                    axis.plot(*zip(*t.curves["eval_loss"]), marker="o", linestyle="--",
                              label=f"{t.label} eval_loss")
            axis.set_xlabel("optimizer step")
            axis.set_ylabel(curve)
            axis.legend()
            save(figure, curve)
    served = [(s["label"], length, v["output_throughput_by_rate"])
              for s in report["serving"] for length, v in s["input_lengths"].items()
              if any(x is not None for x in v["output_throughput_by_rate"].values())]
    if served:
        figure, axis = plt.subplots(figsize=(7, 4))
        for label, length, by_rate in served:
            rates = [r for r, x in by_rate.items() if x is not None]
            axis.plot([float(r) for r in rates], [by_rate[r] for r in rates], marker="o",
                      label=f"{label}, {length} in")
        axis.set_xscale("log", base=2)
        axis.set_xlabel("request rate (req/s)")
        axis.set_ylabel("output tokens/s")
        axis.legend(fontsize=8)
        save(figure, "serving")
    platforms = report["ownership"]["platforms"]
    if platforms and all(p["training_cost"] is not None and p["serving_dollars_per_hour"]
                         is not None for p in platforms.values()):
        figure, axis = plt.subplots(figsize=(7, 4))
        hours = [h / 2 for h in range(0, 97)]
        for name, p in platforms.items():
            axis.plot(hours, [p["training_cost"] + h * p["serving_dollars_per_hour"]
                              for h in hours], label=name)
        axis.set_xlabel("hours of serving after training")
        axis.set_ylabel("$")
        axis.legend()
        save(figure, "ownership")
    return written


def write(report, runs, out_dir):
    """Writes the report into `out_dir`; a gs:// one is written locally, then uploaded."""
    mirror = storage.Mirror(out_dir, clear=True)
    written = [storage.join(out_dir, os.path.relpath(path, mirror.local))
               for path in _write_local(report, runs, mirror.local)]
    mirror.push()
    return written


def _write_local(report, runs, out_dir):
    os.makedirs(out_dir, exist_ok=True)
    plots = plot(report, runs, out_dir)
    doc = blocks(report, plots)
    files = {"report.json": json.dumps(report, indent=2) + "\n",
             "report.md": document.markdown(doc) + "\n",
             "report.html": document.html_page(doc)}
    return document.write_files(out_dir, files) + list(plots.values())


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    if _REFERENCE.value == bool(_RUNS.value):
        raise app.UsageError("give either --runs=DIR[,DIR...] or --reference")
    prices = {"file": config_cli.user_path(_PRICES.value) if _PRICES.value else ""}
    prices["region"] = costs.use_prices(_REGION.value, prices["file"])
    runs = (runs_lib.reference() if _REFERENCE.value
            else runs_lib.load([config_cli.user_path(d) for d in _RUNS.value]))
    config = _CONFIG.value
    report = comparison.build(runs, hours=config.tco_hours, input_len=config.tco_input_len)
    if _PLAN.value:
        plan_path = config_cli.user_path(_PLAN.value)
        try:
            plan = storage.read_json(plan_path)
        except (OSError, ValueError, storage.StorageError) as e:
            raise runs_lib.RunsError(f"--plan={_PLAN.value}: cannot read the plan ({e})") from None
        report["planned"] = comparison.planned(report["training"], plan)
        planned_prices = plan.get("prices", {"region": machines.PRICE_REGION, "file": ""})
        if planned_prices != prices:
            report["missing"].append(
                f"the plan is priced for {planned_prices['region']} "
                f"({planned_prices['file'] or 'built-in prices'}), this report for "
                f"{prices['region']} ({prices['file'] or 'built-in prices'}): planned and "
                "measured dollars differ by their prices too (--region, --prices)")
        if not report["planned"]:
            report["missing"].append(f"no run on a machine {_PLAN.value} plans")
        beside = {row["label"] for row in report["planned"]}
        for row in report["training"]:  # every run read is compared, or said not to be
            if report["planned"] and row["label"] not in beside:
                report["missing"].append(
                    f"{row['label']}: not beside a plan ({_PLAN.value} has no plan that fits "
                    f"for {row['machine']})")
    out_dir = config_cli.user_path(_OUT.value)
    storage.probe(out_dir)
    config_cli.write_resolved_config(config, out_dir)
    for path in write(report, runs, out_dir):
        print(path)
    for missing in report["missing"]:
        print(f"missing: {missing}")
    for repaired in report["repaired"]:
        print(f"repaired: {repaired}")


if __name__ == "__main__":
    cli.run(main)
