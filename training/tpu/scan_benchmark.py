"""Scanned against unrolled decoder layers, run on the chips at hand.

    bazel run //training/tpu:scan_benchmark -- --config=v5p8.py      # on the v5p-8 itself
    bazel run //training/tpu:scan_benchmark -- --config=v5p8.py --config.mesh.tp=1 \\
        --config.batch.per_device_size=1 --layers=12 --width_divisor=2   # one v5e chip
    bazel run //training/tpu:scan_benchmark                          # tiny model, CPU

`//training/tpu:compile` predicts the step from XLA's cost model without a
TPU; this runs it. The config's base model (its config.json alone: no
weights are read) gets random weights, optionally cut to its first --layers
layers and narrowed by --width_divisor (hidden size, MLP width and head
counts divided) to fit the chips at hand: gemma4/random_model.py's,
the weights `sft` trains from with `--config=one_chip.py`. For each layout, in one process:
the config's step is traced and lowered, compiled (both timed), then run on
batches of random tokens with CodeV-R1's length profile (data/synthetic.py),
packed or padded as `config.data.packing` says. The step time is the median
over --steps steps after a warm-up one. Both layouts load the same weights
and LoRA factors, so their first losses agree (printed, and checked to 2%:
bf16 sums in another order).

--compilation_cache=DIR keeps compiled steps there (JAX's persistent cache,
as `sft` keeps its own): a second run of the same command loads them instead
of compiling, and says how many it loaded.
"""

import dataclasses
import gc
import logging
import statistics
import tempfile
import time

import jax
import numpy as np
from absl import app
from absl import flags
from absl import logging as absl_logging

from common import cli
from common import config_cli
from common import machines
from common import storage
from data import packing
from data import synthetic
from gemma4 import base_model
from gemma4 import gemma4_map
from gemma4 import random_model
from training.common import flops as flops_lib
from training.tpu import aot
from training.tpu import mesh_plan
from training.tpu import model as model_lib
from training.tpu import sharding
from training.tpu import state as state_lib
from training.tpu import train_step
from training.tpu import trainer

_CONFIG = config_cli.define_config_flag(__file__, default="cpu.py")
_BASE_CONFIG = flags.DEFINE_string(
    "base_config", "", "The base model's config.json, its directory or a Hub id (default: "
    "the config's model.name; the tiny CPU model's is written to a temporary folder).")
_LAYERS = flags.DEFINE_integer("layers", 0, "Keep the base's first N layers (0: all).")
_WIDTH_DIVISOR = flags.DEFINE_integer(
    "width_divisor", 1, "Divide the hidden size, MLP width and head counts by this.")
_STEPS = flags.DEFINE_integer("steps", 5, "Timed steps per layout (after one warm-up).")
_LAYOUTS = flags.DEFINE_list("layouts", ["scanned", "unrolled"], "Layouts to run, in order.")
_COMPILATION_CACHE = flags.DEFINE_string(
    "compilation_cache", "", "JAX's persistent compilation cache folder (default: none).")
_OUTPUT_JSON = flags.DEFINE_string("output_json", None, "Also write the figures here.")

LOSS_TOLERANCE = 0.02  # relative, first step, scanned against unrolled
# JAX's device_kind -> the machine table's entry with that chip (its peak, for MFU).
CHIP_MACHINES = {"TPU v5": "tpu-v5p-8", "TPU v5p": "tpu-v5p-8", "TPU v6 lite": "tpu-v6e-8",
                 "TPU v6e": "tpu-v6e-8"}
# Chips no machine config names: dense bf16 TFLOP/s (v5e spec sheet).
OTHER_PEAK_TFLOPS = {"TPU v5 lite": 197.0, "TPU v5e": 197.0}

log = logging.getLogger("training.tpu.scan_benchmark")


class BenchmarkError(cli.UserError):
    pass


def peak_flops_per_chip(device):
    """Dense bf16 FLOP/s of `device`'s chip; None when not known (a CPU)."""
    if device.device_kind in CHIP_MACHINES:
        return machines.get(CHIP_MACHINES[device.device_kind]).peak_flops_per_chip
    tflops = OTHER_PEAK_TFLOPS.get(device.device_kind)
    return tflops * 1e12 if tflops else None


def batches(config, dims, count, sharding_, seed=0):
    """`count` (step batch on the devices, data tokens in it) of random examples,
    packed or padded as the config's data is."""
    accumulation, micro, seq_len = mesh_plan.batch_shape(config)
    rows = accumulation * micro
    examples = synthetic.examples(rows * count * 4, seq_len, dims.vocab, seed)
    arrange = packing.pack if config.data.packing else packing.pad
    sequences = arrange(examples, seq_len, 0)
    if len(sequences["input_ids"]) < rows * count:
        raise BenchmarkError("too few rows for the steps asked for")
    out = []
    for step in range(count):
        part = slice(step * rows, (step + 1) * rows)
        batch = {name: jax.device_put(value[part].reshape(accumulation, micro, seq_len),
                                      sharding_) for name, value in sequences.items()}
        out.append((batch, int(np.count_nonzero(sequences["segment_ids"][part]))))
    return out


def run_layout(dims, config, mesh, scanned, steps):
    """One layout's figures: load, trace and lower, compile, then the steps."""
    config = config.copy_and_resolve_references()
    config.scan_layers = scanned
    started = time.perf_counter()
    model = model_lib.load(None, dims, mesh, config.model.dtype, config.lora, config.seed,
                           scan=scanned, tensors=random_model.tensors(dims, config.seed))
    state = state_lib.build(model, mesh, config, total_steps=1000, dims=dims)
    del model
    loaded = time.perf_counter()
    data = batches(config, dims, steps + 1, state.batch_sharding)
    lowered = state.step.train.lower(state.lora, state.opt_state, state.base, state.rngs,
                                     data[0][0], train_step.step_key(config, 0))
    traced = time.perf_counter()
    compiled = lowered.compile()
    done = time.perf_counter()
    memory = aot.memory_figures(compiled.memory_analysis())
    # XLA's own estimate and counts from this compile (the accumulation loop's body
    # counted once, as `//training/tpu:compile` counts it), beside the measured step.
    counted = aot.cost(compiled)
    estimate = counted.get("optimal_seconds", 0.0) * mesh_plan.batch_shape(config)[0]
    lora, opt_state = state.lora, state.opt_state
    seconds, losses, tokens = [], [], 0
    for step, (batch, data_tokens) in enumerate(data):
        begin = time.perf_counter()
        lora, opt_state, metrics = compiled(lora, opt_state, state.base, state.rngs, batch,
                                            train_step.step_key(config, step))
        metrics = jax.device_get(metrics)
        seconds.append(time.perf_counter() - begin)
        losses.append(float(metrics["loss"]))
        if step:
            tokens += data_tokens
        log.info("%s step %d: loss %.4f, %.3f s", "scanned" if scanned else "unrolled", step,
                 losses[-1], seconds[-1])
    timed = seconds[1:]
    step_seconds = statistics.median(timed)
    # What the chip held at its fullest (None where the platform does not say).
    device_peak = (jax.devices()[0].memory_stats() or {}).get("peak_bytes_in_use")
    result = {
        "layout": "scanned" if scanned else "unrolled",
        "layers": state.plan.describe(),
        "load_seconds": loaded - started,
        "trace_and_lower_seconds": traced - loaded,
        "xla_compile_seconds": done - traced,
        "first_step_seconds": seconds[0],
        "step_seconds": {"median": step_seconds, "min": min(timed), "max": max(timed)},
        "data_tokens_per_s": tokens / sum(timed),
        "losses": losses,
        "xla_bytes_per_chip": aot.per_chip_bytes(memory),
        "xla_estimated_step_seconds": estimate,
        # per chip, one accumulation step (and a scanned loop's body once)
        "xla_counted": {"flops": counted.get("flops", 0.0),
                        "bytes_accessed": counted.get("bytes accessed", 0.0)},
        "memory": memory,
        "device_peak_bytes": device_peak,
    }
    del state, compiled, lowered, lora, opt_state, data
    gc.collect()
    return result


def _with_mfu(result, dims, config, devices):
    _, _, seq_len = mesh_plan.batch_shape(config)
    per_token = flops_lib.flops_per_token(
        dims, seq_len, config.lora.rank, gemma4_map.tunix_lora_modules(config.lora.target_modules))
    result["mfu"] = flops_lib.mfu(result["data_tokens_per_s"], per_token, len(devices),
                                  peak_flops_per_chip(devices[0]))


def _dims(config, workdir, base_config, layers, width_divisor):
    base_name = base_config or config.model.name
    if base_name == base_model.TINY:
        from training.common import lifecycle  # pylint: disable=import-outside-toplevel
        base_name = lifecycle.materialize_base(config, workdir)
    hf_config, _ = random_model.base_config(config.model, config_cli.path_or_id(base_name))
    return gemma4_map.Dims.from_hf_config(
        random_model.shrink_config(hf_config, layers, width_divisor))


def run(config, workdir, steps, layouts, *, cache_dir="", base_config="", layers=0,
        width_divisor=1):
    """The figures of each layout in `layouts` ("scanned", "unrolled"), `steps`
    timed steps each; the model is `base_config`'s (default the config's) cut to
    `layers` and narrowed by `width_divisor`; `cache_dir`: JAX's persistent
    compilation cache (default none)."""
    unknown = sorted(set(layouts) - {"scanned", "unrolled"})
    if unknown:
        raise BenchmarkError(f"--layouts: unknown {unknown}; scanned, unrolled")
    if steps < 1:
        raise BenchmarkError("--steps must be at least 1")
    try:
        trainer.setup_devices(config)
    except machines.WrongMachine:
        pass  # the benchmark runs on the chips at hand: the config's mesh must fit them
    cache = trainer.CompilationCache()
    config.compilation_cache.enabled = bool(cache_dir)
    config.compilation_cache.min_compile_s = 0
    cache_path = cache.use(config, config_cli.user_path(cache_dir) if cache_dir else workdir)
    dims = _dims(config, workdir, base_config, layers, width_divisor)
    devices = jax.devices()
    mesh = sharding.make_mesh(config.mesh.fsdp, config.mesh.tp)
    accumulation, micro, seq_len = mesh_plan.batch_shape(config)
    print(f"{dims.num_layers} layers, hidden {dims.embed}, MLP {dims.mlp}, {dims.heads} "
          f"heads; {len(devices)} x {devices[0].device_kind}, mesh {config.mesh.fsdp} x "
          f"{config.mesh.tp}, {micro} x {accumulation} x {seq_len} tokens per step", flush=True)
    results = {"rows": [], "devices": f"{len(devices)} x {devices[0].device_kind}",
               "dims": dataclasses.asdict(dims)}
    for layout in layouts:
        row = run_layout(dims, config, mesh, layout == "scanned", steps)
        _with_mfu(row, dims, config, devices)
        results["rows"].append(row)
    if cache_path:
        cache.close()
    results["compilation_cache"] = {"dir": cache_dir or None, "hits": cache.hits,
                                    "stored": cache.stored}
    rows = {row["layout"]: row for row in results["rows"]}
    if len(rows) == 2:
        first = (rows["scanned"]["losses"][0], rows["unrolled"]["losses"][0])
        results["first_loss_relative_difference"] = abs(first[0] - first[1]) / abs(first[1])
        results["ratios_scanned_over_unrolled"] = {
            "xla_compile": (rows["scanned"]["xla_compile_seconds"] /
                            rows["unrolled"]["xla_compile_seconds"]),
            "step": (rows["scanned"]["step_seconds"]["median"] /
                     rows["unrolled"]["step_seconds"]["median"]),
            "xla_bytes_per_chip": (rows["scanned"]["xla_bytes_per_chip"] /
                                   rows["unrolled"]["xla_bytes_per_chip"]),
        }
    return results


def format_rows(results):
    lines = [f"{'layout':<9} {'trace+lower':>11} {'XLA':>8} {'step (med)':>10} "
             f"{'tokens/s':>9} {'MFU':>6} {'GiB/chip':>8}  first loss"]
    for row in results["rows"]:
        mfu = f"{row['mfu']:.1%}" if row["mfu"] is not None else "-"
        lines.append(f"{row['layout']:<9} {row['trace_and_lower_seconds']:>10.1f}s "
                     f"{row['xla_compile_seconds']:>7.1f}s {row['step_seconds']['median']:>9.3f}s "
                     f"{row['data_tokens_per_s']:>9.0f} {mfu:>6} "
                     f"{row['xla_bytes_per_chip'] / aot.GIB:>8.2f}  {row['losses'][0]:.4f}")
    ratios = results.get("ratios_scanned_over_unrolled")
    if ratios:
        lines.append(f"scanned / unrolled: XLA compile {ratios['xla_compile']:.2f}x, step "
                     f"{ratios['step']:.3f}x, bytes per chip {ratios['xla_bytes_per_chip']:.2f}x; "
                     f"first losses differ by {results['first_loss_relative_difference']:.2e}")
    cache = results["compilation_cache"]
    if cache["dir"]:
        lines.append(f"compilation cache {cache['dir']}: {cache['hits']} program(s) loaded, "
                     f"{cache['stored']} compiled and stored")
    return "\n".join(lines)


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    absl_logging.set_verbosity(absl_logging.WARNING)
    logging.getLogger("training").setLevel(logging.INFO)
    with tempfile.TemporaryDirectory() as workdir:
        results = run(_CONFIG.value, workdir, _STEPS.value, _LAYOUTS.value,
                      cache_dir=_COMPILATION_CACHE.value, base_config=_BASE_CONFIG.value,
                      layers=_LAYERS.value, width_divisor=_WIDTH_DIVISOR.value)
    print(format_rows(results))
    if _OUTPUT_JSON.value:
        storage.write_json(config_cli.user_path(_OUTPUT_JSON.value), results)
    difference = results.get("first_loss_relative_difference")
    if difference is not None and difference > LOSS_TOLERANCE:
        raise BenchmarkError(f"scanned and unrolled first losses differ by {difference:.2%} "
                             f"(over {LOSS_TOLERANCE:.0%}): the layouts do not run the same "
                             "model")


if __name__ == "__main__":
    cli.run(main)
