"""Predicts hours and dollars of a fine-tune on each machine before renting one.

    bazel run //report:plan -- --config.data.source=my.jsonl --out=plan
    bazel run //report:plan -- --machines=tpu-v5p-8,tpu-v6e-8,gpu-h100x2 --budget=100

Reads the recipe's data once (--config: report/configs/recipe.py, whose fields
each machine's own config takes: data, LoRA, optimizer, effective batch,
base), then for every machine (default: every TPU machine with a config for
the real base in training/tpu/configs, and every GPU machine, from
training/gpu/configs' config for its size or h100x2.py's with one process per
GPU) plans the run (report/planning.py): fits or why not, optimizer steps,
step time, billed hours and dollars on demand and on spot with the interval of
the measured runs that calibrate it, tokens/s, MFU, what limits it. Writes
the plan into --out as JSON, Markdown, self-contained HTML and a PNG plot
(hours against dollars, the intervals as bars) and prints the table. TPU
compiles and the data's token counts are kept in --cache_dir, so a second
plan of the same inputs compiles and counts nothing; the repository's own TPU
configs' steps ship compiled (compiled_steps.json), so a plan of them
compiles nothing even the first time.

The report shows a finished run's measured figures beside its plan:
`bazel run //report:report -- --runs=RUN --plan=OUT/plan.json`.
"""

import functools
import json
import logging
import os

from absl import app
from absl import flags
from absl import logging as absl_logging

from common import cli
from common import config_cli
from common import machines
from common import storage
from report import costs
from report import document
from report import planning

_CONFIG = config_cli.define_config_flag(__file__, default="recipe.py")
_MACHINES = flags.DEFINE_list("machines", [], "Machines to plan (common/machines.py names); "
                              "default: every training machine with a config.")
_OUT = flags.DEFINE_string("out", "plan", "Where plan.json, .md, .html and .png go.")
_TOKENIZER = flags.DEFINE_string(
    "tokenizer", "", "The tokenizer the data is counted with: a Hub id or directory; "
    "default: the base's; `embedded`: the repository's own (offline, Gemma 4's special tokens "
    "and chat template, a smaller vocabulary: counts differ from Gemma 4's by a few percent).")
DEFAULT_CACHE = os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"),
                             "gemma4-toolkit", "plan")
_CACHE = flags.DEFINE_string("cache_dir", DEFAULT_CACHE, "Where TPU compile results and the "
                             "data's token counts are kept (empty: nowhere).")
_CALIBRATE = flags.DEFINE_list(
    "calibrate_with", [], "Finished training run directories whose measured steps calibrate "
    "the plan beside common/calibration.json's runs.")
_EXCLUDE = flags.DEFINE_list("exclude_runs", [], "Calibration run ids left out (to test the "
                             "calibration on a run it did not see); `step_model` plans TPU "
                             "steps from the runs instead of the chip step model.")
_REFERENCE = flags.DEFINE_bool(
    "reference_settings", False, "Plan the reference study's settings: padded rows, and on "
    "TPU its step (tp=4, one row per replica, remat, dense attention, threefry masks).")
_REGION, _PRICES = costs.define_price_flags()
_DEADLINE = flags.DEFINE_float("deadline_hours", None, "Mark the machines that finish in time.")
_BUDGET = flags.DEFINE_float("budget", None, "Mark the machines within this many dollars.")
_DOWNLOAD = flags.DEFINE_float("download_gbytes_per_s", 0.2, "Assumed download rate of the "
                               "base (decimal GB/s) from the Hub or a bucket.")
_WARM = flags.DEFINE_bool("warm_compile_cache", False, "The TPU run finds its compilation "
                          "cache warm (a resumed run): no compile time billed.")
_CHECK = flags.DEFINE_bool(
    "check_extrapolation", False, "Also compile every extrapolated TPU step whole and print "
    "the extrapolation's error (minutes and GBs of host memory for 60 unrolled layers).")

HERE = os.path.dirname(os.path.abspath(__file__))
TPU_CONFIGS = os.path.join(HERE, "..", "training", "tpu", "configs")
GPU_CONFIGS = os.path.join(HERE, "..", "training", "gpu", "configs")
RECIPES = os.path.join(HERE, "configs")
# The compiled steps of the TPU configs above under the default recipe (//report:
# ship_compiled_steps writes it): a plan of them compiles nothing.
SHIPPED = os.path.join(HERE, "compiled_steps.json")
GPU_TEMPLATE = "h100x2.py"


def _configs(directory):
    """{machine name: (file, config)} of a configs folder, real bases only."""
    from gemma4 import base_model  # pylint: disable=import-outside-toplevel
    found = {}
    for name in sorted(os.listdir(directory)):
        if name.endswith(".py") and not name.startswith("_"):
            config = config_cli.load(name, directory)
            if config.model.name not in (base_model.TINY, base_model.RANDOM):
                found.setdefault(config.machine, (name, config))
    return found


def machine_configs(names):
    """[(machine, config file, its config)] for the machines asked for."""
    tpu, gpu = _configs(TPU_CONFIGS), _configs(GPU_CONFIGS)
    if not names:
        names = list(tpu) + [m.name for m in machines.MACHINES.values() if m.platform == "gpu"]
    out = []
    for name in names:
        machine = machines.get(name)  # an unknown name is an error here
        if machine.platform == "tpu":
            if name not in tpu:
                raise planning.PlanError(
                    f"no TPU config for {name} in training/tpu/configs (its mesh and batch "
                    f"split); configs exist for {', '.join(sorted(tpu))}")
            out.append((machine, *tpu[name]))
        elif machine.platform == "gpu":
            # A GPU machine without a config of its own: h100x2.py's, one process per GPU.
            file, config = gpu.get(name) or (f"{GPU_TEMPLATE} on {machine.chips} GPUs",
                                             gpu["gpu-h100x2"][1])
            config = config.copy_and_resolve_references()
            config.machine, config.num_processes = name, machine.chips
            out.append((machine, file, config))
        else:
            raise planning.PlanError(f"{name}: a CPU machine has nothing to plan")
    return out


def _read(recipe, tokenizer_name, cache_dir):
    """(tokenizer name, data source, planning.Data) of the recipe's data
    (data/counting.py: offline, the default recipe's data stood in for), its
    counts kept in `cache_dir`."""
    from data import counting  # pylint: disable=import-outside-toplevel
    try:
        return counting.read(recipe.data, functools.partial(planning.read_data,
                                                            cache_dir=cache_dir),
                             tokenizer=tokenizer_name, base=recipe.model.name)
    except counting.CountingError as e:
        raise planning.PlanError(str(e)) from None


def _dims(config):
    from gemma4 import base_model  # pylint: disable=import-outside-toplevel
    from gemma4 import gemma4_map  # pylint: disable=import-outside-toplevel
    from gemma4 import random_model  # pylint: disable=import-outside-toplevel
    if config.model.name == base_model.TINY:
        raise planning.PlanError("the tiny CPU model has no machine to plan for: set "
                                 "--config.model.name to a real base")
    hf_config, _ = random_model.base_config(config.model,
                                            config_cli.path_or_id(config.model.name))
    return gemma4_map.Dims.from_hf_config(hf_config)


def _reference(config, machine):
    if machine.platform == "tpu":
        from training.tpu import aot  # pylint: disable=import-outside-toplevel
        return aot.reference_config(config, machine.chips)
    config = config.copy_and_resolve_references()
    config.data.packing, config.remat = False, True
    config.batch.per_device_size, config.batch.effective_size = 1, 8
    return config


def _check(plan, machine, config, dims, layout, cache):
    """The extrapolated step against the whole step's compile."""
    whole = planning.tpu_step(machine, config, dims, layout, cache, whole=True)
    pairs = {"bytes_per_chip": (plan["bytes_per_device"], whole.bytes_per_device),
             "roofline_seconds": (plan["roofline_seconds"], whole.roofline_seconds),
             "xla_flops": (plan["step"]["xla_flops"], whole.details["xla_flops"]),
             "xla_bytes_accessed": (plan["step"]["xla_bytes_accessed"],
                                    whole.details["xla_bytes_accessed"])}
    return {name: {"extrapolated": a, "whole": b, "error": a / b - 1}
            for name, (a, b) in pairs.items()}


def own_steps(reference=False):
    """(machine, settings, config, dims) of every TPU step the repository's own
    configs plan under the default recipe, with our settings (and with
    `reference`, the reference's too): what //report:ship_compiled_steps ships."""
    recipe = config_cli.load("recipe.py", RECIPES)
    dims = _dims(recipe)
    for machine, _, machine_config in machine_configs(list(_configs(TPU_CONFIGS))):
        config = planning.apply_recipe(machine_config, recipe)
        yield machine, "ours", config, dims
        if reference:
            yield machine, "reference", _reference(config, machine), dims


def shipped_cache(cache_dir):
    """The plan's compile cache: `cache_dir`'s results, and read-only, SHIPPED's."""
    from training.tpu import extrapolate  # pylint: disable=import-outside-toplevel
    return extrapolate.Cache(cache_dir, shipped=extrapolate.read_shipped(SHIPPED))


def run_factor(run_dir, cache):
    """A finished run as a calibration run: its median step (metrics.jsonl, after
    the first, which compiles) over the roofline of its own config's step."""
    from common import jsonl  # pylint: disable=import-outside-toplevel
    try:
        local = (storage.fetch(run_dir, only=["config.json", "metrics.jsonl"])
                 if storage.is_url(run_dir) else run_dir)
        config = config_cli.read_resolved_config(local)
        records, _ = jsonl.read(os.path.join(local, "metrics.jsonl"))
    except (OSError, ValueError, storage.StorageError) as e:
        raise planning.PlanError(f"--calibrate_with={run_dir}: not a finished training run "
                                 f"directory ({e})") from None
    seconds = sorted([r["step_time_s"] for r in records if "step_time_s" in r][1:])
    if not seconds:
        raise planning.PlanError(f"--calibrate_with={run_dir}: metrics.jsonl holds fewer than "
                                 "two steps")
    machine = machines.get(config.machine)
    if machine.platform not in ("tpu", "gpu"):
        raise planning.PlanError(f"--calibrate_with={run_dir}: a run on {machine.name}, not "
                                 "on a TPU or GPU machine, calibrates nothing")
    config = config.copy_and_resolve_references()
    dims = _dims(config)
    if machine.platform == "tpu":
        fractions = {"non_padding_fraction": 1.0, "trained_fraction": 1.0}  # no role in it
        roofline = planning.tpu_step(machine, config, dims, fractions, cache).roofline_seconds
    else:
        roofline = planning.gpu_step(machine, config, dims).roofline_seconds
    median = seconds[len(seconds) // 2]
    return {"id": os.path.basename(os.path.normpath(run_dir)), "machine": machine.name,
            "factor": median / roofline, "source": run_dir}


def make_plan(recipe, names, *, tokenizer_name, cache_dir, run_dirs=(), exclude=(),
              reference=False, deadline=None, budget=None, download=0.2, warm=False,
              check=False, region=machines.PRICE_REGION, prices_file=""):
    """The plan as a dict (plan.json), priced for `region` (and `prices_file`)."""
    region = costs.use_prices(region, prices_file)
    chosen = machine_configs(names)
    dims = _dims(recipe)
    cache = shipped_cache(cache_dir)
    extra = [run_factor(d, cache) for d in run_dirs]
    tokenizer_name, source, data = _read(recipe, tokenizer_name, cache_dir)
    if data.cached:
        print("  its token counts from the plan's cache (the same files, tokenizer and data "
              "config as a plan before)", flush=True)
    rates = planning.measured_rates(download, warm)
    plans = []
    for machine, file, machine_config in chosen:
        print(f"planning {machine.name} ({file})...", flush=True)
        config = planning.apply_recipe(machine_config, recipe)
        if reference:
            config = _reference(config, machine)
        try:
            planning.hparams_check(config, machine)
            layout = planning.layout(data, config)
            if machine.platform == "tpu":
                step = planning.tpu_step(machine, config, dims, layout, cache)
            else:
                step = planning.gpu_step(machine, config, dims)
        except cli.UserError as e:  # this machine's config cannot run: said, the rest planned
            print(f"{machine.name}: {e}", flush=True)
            plans.append({**planning.refused(machine, str(e)), "config": file})
            continue
        plan = planning.plan_machine(machine, config, dims, layout, step, rates,
                                     exclude=exclude, extra=extra)
        plan["config"] = file
        if check and step.details.get("extrapolated"):
            plan["extrapolation_check"] = _check(plan, machine, config, dims, layout, cache)
        plans.append(plan)
    if all("layout" not in p for p in plans):
        raise planning.PlanError("no machine can run this recipe: " + "; ".join(
            f"{p['machine']}: {p['why']}" for p in plans))
    ranking = planning.mark(plans, deadline, budget)
    report = data.report
    return {"recipe": planning.recipe_summary(recipe), "reference_settings": reference,
            "data": {"source": source, "rows_read": report.rows_read,
                     "kept": report.kept, "dropped": dict(report.dropped),
                     "tokenizer": tokenizer_name, "counted_before": data.cached},
            "rates": vars(rates), "deadline_hours": deadline, "budget": budget,
            "prices": {"region": region, "file": prices_file},
            "plans": plans, "ranking": ranking,
            "cache": {"dir": cache_dir, "hits": cache.hits, "shipped": cache.shipped_hits,
                      "compiled": cache.misses}}


def _interval(value, fmt):
    if value is None:
        return "n/a"
    if abs(value["high"] - value["low"]) < 1e-9 * max(abs(value["point"]), 1):
        return fmt(value["point"])
    return f"{fmt(value['point'])} ({fmt(value['low'])} to {fmt(value['high'])})"


def _hours(hours):
    return f"{hours:,.2f} h"


def table_rows(plan):
    rows = []
    for p in plan["plans"]:
        if not p["fits"]:
            rows.append([p["machine"], "no: " + p["why"], *["-"] * 9])
            continue
        calibration = p["calibration"]
        rows.append([
            p["machine"], "yes", f"{p['layout']['steps']:,}", _interval(p["step_seconds"], lambda
                                                                         s: f"{s:.2f} s"),
            _interval(p["hours"], _hours), _interval(p["dollars"], document.money),
            _interval(p["spot_dollars"], document.money),
            f"{p['tokens_per_s']:,.0f}", f"{100 * p['mfu']:.1f}%" if p["mfu"] else "n/a",
            p["bound"],
            f"{calibration['count']} ({calibration['scope']})" if calibration["runs"]
            else calibration["scope"]])
    return rows


def _per_chip(value):
    return "n/a" if value is None else f"${value:.3f}/chip-h"


def price_rows(plan):
    """Each planned machine's price: per chip-hour (per GPU-hour), per VM, its source."""
    rows = []
    for p in plan["plans"]:
        price = p.get("price")
        if price:
            rows.append([p["machine"], _per_chip(price["on_demand"]), _per_chip(price["spot"]),
                         "n/a" if price["dollars_per_vm_hour"] is None else
                         f"{document.money(price['dollars_per_vm_hour'])}/h x {price['vms']}",
                         price["source"], price["date"] or "-",
                         "; ".join(dict.fromkeys(n for n in (price["note"], price["spot_note"])
                                                 if n)) or "-"])
    return rows


HEADER = ["machine", "fits", "steps", "step", "billed hours", "on demand", "spot",
          "tokens/s", "MFU", "limited by", "calibration"]


def blocks(plan, image):
    data = plan["data"]
    out = [("h", 1, "Plan: Gemma 4 LoRA fine-tune"),
           ("p", f"Data: {data['source']}, {data['kept']:,} of {data['rows_read']:,} rows kept "
                 f"(dropped {data['dropped'] or 'none'}), counted with {data['tokenizer']}'s "
                 "tokenizer." + (" Settings: the reference study's." if
                                 plan["reference_settings"] else "")),
           ("table", HEADER, table_rows(plan)),
           ("p", "Ranked by dollars: " + (", ".join(plan["ranking"]["by_dollars"]) or "none") +
                 ". By hours: " + (", ".join(plan["ranking"]["by_hours"]) or "none") + "." +
                 "".join(f" No price is recorded for {p['machine']} in "
                         f"{plan['prices']['region']} (common/machines.py; --prices gives "
                         "one): it is not in the dollar ranking or the plot." for p in plan["plans"]
                         if p["fits"] and not p["dollars"])),
           ("h", 2, f"Prices ({plan['prices']['region']})"),
           ("table", ["machine", "on demand", "spot", "per VM", "source", "date", "note"],
            price_rows(plan)),
           ("p", "A TPU step whose calibration says \"chip step model\" is the model "
                 "fitted to our step on one v5e chip at many shapes: a x its compute time "
                 "(XLA's counted FLOPs plus the kernels' at the chips' peak) + b x its memory "
                 "time (XLA's counted bytes at their HBM bandwidth), the range from the "
                 "model's errors on the single-chip shapes it was not fitted to (below); "
                 "collectives across chips and scanned layers were not among them. Any "
                 "other step (GPU; TPU with runs of your own) is the roofline times the mean "
                 "measured/roofline factor of the runs that calibrate it; the range is their "
                 "lowest and highest factor, a single value where one run is all there is. "
                 "Billed hours add the download, loading, compile, checkpoint saves and "
                 "validation (below).")]
    if plan["deadline_hours"] is not None or plan["budget"] is not None:
        header = ["machine"]
        header += [f"deadline {plan['deadline_hours']} h"] if plan["deadline_hours"] else []
        header += [f"budget ${plan['budget']}"] if plan["budget"] else []
        out.append(("table", header,
                    [[p["machine"]] + [p[key] for key, limit in (
                        ("meets_deadline", plan["deadline_hours"]),
                        ("within_budget", plan["budget"])) if limit]
                     for p in plan["plans"]]))
        out.append(("p", "yes: the whole interval meets it; maybe: the point does, not the "
                         "high end; no: neither (or it does not fit); no price: the machine "
                         "table records none."))
    out.append(("h", 2, "Billed time"))
    out.append(("table", ["machine", "download", "load", "compile", "steps", "checkpoints",
                          "validation", "total"],
                [[p["machine"], *[document.duration(p["billed_seconds"][k] / 3600) for k in
                                  ("download", "load", "compile", "steps", "checkpoints",
                                   "evaluation", "total")]]
                 for p in plan["plans"] if p["fits"]]))
    rates = plan["rates"]
    out.append(("p", f"Download at {rates['download_gbps']} GB/s (assumed: "
                     "--download_gbytes_per_s); loading at "
                     f"{rates['load_gbps']:.3f} GB/s and checkpoint saves at "
                     f"{rates['checkpoint_gbps']:.3f} GB/s, measured on {rates['source']}; "
                     "compile: the plan's own compile on this host, extended to the whole "
                     "model" + (" (zero: --warm_compile_cache)" if rates["warm_compile_cache"]
                                else "") + "; GPU runs compile nothing (eager PyTorch)."))
    out.append(("h", 2, "Calibration"))
    rows = []
    for p in plan["plans"]:
        for run in p["calibration"]["runs"]:
            rows.append([p["machine"], run["id"], run["machine"], f"{run['factor']:.3f}",
                         run["source"]])
    out.append(("table", ["plan", "run", "its machine", "measured / roofline", "from"], rows))
    model = next((p["calibration"]["model"] for p in plan["plans"]
                  if p.get("calibration", {}).get("model")), None)
    if model:
        out.append(("p", f"The TPU step model ({model['source']}): step = "
                         f"{model['compute']:.3f} x compute + {model['memory']:.3f} x memory "
                         f"seconds, fitted to {len(model['fit'])} shapes of our step on one "
                         f"v5e chip ({', '.join(model['fit'])}); on the shapes held out:"))
        out.append(("table", ["held-out shape", "measured", "predicted", "error"],
                    [[h["shape"], f"{h['measured']:.3f} s", f"{h['predicted']:.3f} s",
                      f"{100 * h['error']:+.1f}%"] for h in model["held_out"]]))
    if image:
        out.append(("img", image, "billed hours against on-demand dollars, with the "
                                  "calibration's intervals"))
    checks = [(p["machine"], p["extrapolation_check"]) for p in plan["plans"]
              if p.get("extrapolation_check")]
    if checks:
        out.append(("h", 2, "Extrapolation against the whole compile"))
        out.append(("table", ["machine", "figure", "extrapolated", "whole", "error"],
                    [[m, name, f"{v['extrapolated']:.5g}", f"{v['whole']:.5g}",
                      f"{100 * v['error']:+.2f}%"] for m, c in checks for name, v in c.items()]))
    cannot = [p for p in plan["plans"] if not p["fits"]]
    if cannot:
        out.append(("h", 2, "Does not fit"))
        for p in cannot:
            out.append(("p", f"{p['machine']}: {p['why']}."))
    return out


def plot(plan, out_dir):
    """hours against dollars, one point per priced machine: the PNG's path, or None."""
    priced = [p for p in plan["plans"] if p["fits"] and p["dollars"]]
    if not priced:
        return None
    import matplotlib  # pylint: disable=import-outside-toplevel
    matplotlib.use("Agg")
    from matplotlib import pyplot as plt  # pylint: disable=import-outside-toplevel
    figure, axis = plt.subplots(figsize=(7, 4.5))
    for p in priced:
        hours, dollars = p["hours"], p["dollars"]
        axis.errorbar([hours["point"]], [dollars["point"]],
                      xerr=[[hours["point"] - hours["low"]], [hours["high"] - hours["point"]]],
                      yerr=[[dollars["point"] - dollars["low"]],
                            [dollars["high"] - dollars["point"]]],
                      fmt="o" if p["platform"] == "tpu" else "s", capsize=4, label=p["machine"])
    if plan["deadline_hours"] is not None:
        axis.axvline(plan["deadline_hours"], linestyle="--", color="grey")
    if plan["budget"] is not None:
        axis.axhline(plan["budget"], linestyle="--", color="grey")
    axis.set_xlabel("billed hours")
    axis.set_ylabel("$ on demand")
    axis.legend(fontsize=8)
    path = os.path.join(out_dir, "plan.png")
    figure.savefig(path, dpi=100, bbox_inches="tight")
    plt.close(figure)
    return path


def write(plan, out_dir):
    mirror = storage.Mirror(out_dir, clear=True)
    local = mirror.local
    os.makedirs(local, exist_ok=True)
    image = plot(plan, local)
    doc = blocks(plan, image)
    files = {"plan.json": json.dumps(plan, indent=2) + "\n",
             "plan.md": document.markdown(doc) + "\n",
             "plan.html": document.html_page(doc, title="Plan")}
    document.write_files(local, files)
    mirror.push()
    return [storage.join(out_dir, name) for name in [*files, *(["plan.png"] if image else [])]]


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    absl_logging.set_verbosity(absl_logging.WARNING)
    logging.getLogger("training").setLevel(logging.INFO)
    from training.tpu import aot  # pylint: disable=import-outside-toplevel
    aot.use_libtpu()  # before anything starts JAX
    if _DOWNLOAD.value <= 0:
        raise app.UsageError(f"--download_gbytes_per_s={_DOWNLOAD.value}: a rate above 0")
    out_dir = config_cli.user_path(_OUT.value)
    storage.probe(out_dir)
    plan = make_plan(
        _CONFIG.value, _MACHINES.value, tokenizer_name=_TOKENIZER.value,
        cache_dir=config_cli.user_path(_CACHE.value) if _CACHE.value else "",
        run_dirs=[config_cli.user_path(d) for d in _CALIBRATE.value],
        exclude=_EXCLUDE.value, reference=_REFERENCE.value, deadline=_DEADLINE.value,
        budget=_BUDGET.value, download=_DOWNLOAD.value, warm=_WARM.value,
        check=_CHECK.value, region=_REGION.value,
        prices_file=config_cli.user_path(_PRICES.value) if _PRICES.value else "")
    rows = [HEADER] + table_rows(plan)
    widths = [max(len(str(r[i])) for r in rows) for i in range(len(HEADER))]
    for row in rows:
        print("  ".join(str(c).ljust(w) for c, w in zip(row, widths)).rstrip())
    for path in write(plan, out_dir):
        print(path)


if __name__ == "__main__":
    cli.run(main)
