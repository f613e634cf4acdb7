"""The TPU training step compiled ahead of time for a TPU topology, on any machine.

With libtpu installed, XLA compiles for a TPU slice that is not there:
`get_topology_desc` gives compile-only devices of the machine table's
topology (common/machines.py), the mesh is laid over them, and the step
that `sft` runs is built by the function training builds it with
(`state.build`, here on the abstract model: LoRA, optimizer state and batch
as shapes, each with its sharding), lowered and compiled. XLA then reports
the bytes each chip needs (`memory_analysis`) and the FLOPs and its own
estimate of the step time (`cost_analysis`). Nothing is allocated: the model
is built with `nnx.eval_shape`, so 31B costs no memory.

Pallas kernels (splash attention, training/tpu/forward.py) are custom calls
whose work XLA's cost model does not see: their FLOPs are counted by hand and
their time at the chips' peak is added to XLA's estimate (`analytic_kernels`
in each row says so).

XLA's cost model counts the body of a loop once. The accumulation `lax.scan`
(one micro-batch per iteration) is counted for one micro-batch, so the step's
FLOPs and time are the counted ones times the accumulation steps (the
optimizer update, a few element-wise passes over the LoRA factors, is then
counted that many times too: a slight overestimate of the step time). The
scan over the decoder layers' block (training/tpu/layer_scan.py) is counted
for one repeat, and the scan over each run of layers inside it (`scan_runs`)
for one layer: the step is compiled again without the runs' scans, and once
more with two repeats per loop iteration as well; the block's cost is the
difference, counted once per repeat. (Skipping the blocks instead would also
drop the backward pass of the output projection, which no LoRA factor would
then precede.) With the runs scanned, the counts are thus those of the same
layers run one after another: the same FLOPs, but not the inner loop's own
copies (on a v5e chip its step ran 1.09x slower). compile_test holds the
scanned FLOPs so counted to the unrolled step's.

XLA's TPU cost model has no time for RngBitGenerator, which draws LoRA
dropout's masks (`dropout_rng="rbg"`, training/tpu/config_base.py), nor for
the custom calls that split and combine its 64-bit state: each generator adds
-1 s, its "unknown", to the step's estimate, and with `dropout_rng_per_chip`
(each chip's generator seeded with a constant of its own) three more, for the
state split in two, offset and combined again. `cost` takes those back out,
so the generator's own time is not in the estimate (at 2 layers of `v5p8.py`
the estimate is then 0.0455 s against threefry's 0.0432 s; on a v5e chip,
rbg's step ran in 0.90x threefry's).

For v5e and v6e, XLA's estimate of the step is negative on libtpu 0.0.42.1
(unrolled too: -2070.7 s for `one_chip.py` on v5e:1x1, the same on the chip's
own compile). Those rows predict from the roofline instead (`roofline_seconds`:
the counted FLOPs at peak or the counted bytes at the machine table's HBM
bandwidth, whichever is longer) times what chips of that generation measured
against their roofline (common/calibration.json; `prediction` in each row says
which basis, factor and runs).

libtpu is this target's dependency (the train_tpu hub, in both modes): only
processes that depend on it can import it, and `use_libtpu` keeps JAX's own
backend on CPU so that none of them probes for TPU chips (test processes pin
JAX_PLATFORMS=cpu too, .bazelrc).
"""

import gc
import json
import logging
import os
import resource
import time

from common import calibration
from common import cli
from gemma4 import gemma4_map
from training.common import flops as flops_lib
from training.tpu import mesh_plan

log = logging.getLogger(__name__)

HBM_LIMIT = 0.9  # of each chip's HBM: the most a step may use


class AotError(cli.UserError):
    """No libtpu, a machine without a topology, or a run that does not fit."""


def use_libtpu():
    """Makes libtpu visible to JAX for compile-only TPU devices; call before JAX starts.

    JAX's own backend stays on CPU (JAX_PLATFORMS=cpu): without it, JAX would
    look for TPU chips on this machine.
    """
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    # libtpu asks the cloud metadata server for these otherwise, and warns.
    os.environ.setdefault("TPU_SKIP_MDS_QUERY", "1")
    os.environ.setdefault("TPU_WORKER_HOSTNAMES", "localhost")
    # Compile-only devices touch no chip, so processes need not take turns
    # (libtpu otherwise holds a lock file that a second process fails on).
    os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
    if os.environ.get("TPU_LIBRARY_PATH"):
        return os.environ["TPU_LIBRARY_PATH"]
    try:
        import libtpu  # pylint: disable=import-outside-toplevel
    except ImportError:
        raise AotError(
            "libtpu is not installed: compiling for a TPU topology needs it (under Bazel, "
            "//training/tpu:aot depends on it through the train_tpu hub; elsewhere, `pip "
            "install libtpu` or set TPU_LIBRARY_PATH to its libtpu.so)") from None
    return libtpu.get_library_path()


def topology_devices(topology):
    """Compile-only devices of `topology` ("v6e:2x4"). libtpu assumes hosts of
    2x2x1 chips at least; a one-chip slice (v5e:1x1, v6e:1x1) is a host of one."""
    from jax.experimental import topologies  # pylint: disable=import-outside-toplevel
    one_chip = all(side == "1" for side in topology.split(":")[-1].split("x"))
    bounds = {"chips_per_host_bounds": (1, 1, 1)} if one_chip else {}
    try:
        return topologies.get_topology_desc(platform="tpu", topology_name=topology,
                                            **bounds).devices
    except Exception as e:  # libtpu's errors are RuntimeErrors with long C++ traces
        raise AotError(f"libtpu cannot describe topology {topology!r}: "
                       f"{str(e).splitlines()[0]}") from e


def lower_step(dims, config, devices, scan_unroll=1):
    """The step `sft` runs for `config`, lowered for `devices` with abstract inputs
    (`scan_unroll`: repeats of the scanned block per loop iteration, for counting it)."""
    from training.tpu import sharding  # pylint: disable=import-outside-toplevel
    from training.tpu import state as state_lib  # pylint: disable=import-outside-toplevel

    mesh = sharding.make_mesh(config.mesh.fsdp, config.mesh.tp, devices)
    model = state_lib.abstract_model(dims, config)
    model.scan_unroll = scan_unroll
    # The schedule's length does not change a shape: any step count compiles the same.
    state = state_lib.build(model, mesh, config, total_steps=1000, dims=dims)
    batch, key = state_lib.abstract_inputs(state, config)
    return state.step.train.lower(state.lora, state.opt_state, state.base, state.rngs, batch,
                                  key)


def reference_config(config, chips):
    """`config` changed to the reference's step at the same sequence length, on
    `chips` chips: tp=4 (fsdp over the rest), one row per replica, 8 padded rows
    per step, remat, dense attention, all logits at once, and dropout masks from
    JAX's default generator (threefry2x32), as Tunix draws them. Its LoRA
    factors are float32, as ours (Qwix's default, the reference's, is bf16)."""
    reference = config.copy_and_resolve_references()
    reference.mesh.fsdp, reference.mesh.tp = max(1, chips // 4), 4
    reference.batch.per_device_size, reference.batch.effective_size = 1, 8
    reference.data.packing = False
    reference.remat, reference.attention.kernel, reference.loss_chunk = True, "dense", 0
    # (libtpu's per-chip generator flag, if ours asks for it, is the process's,
    # but threefry draws no generator's bits.)
    reference.dropout_rng, reference.dropout_rng_per_chip = "threefry2x32", False
    return reference


# Fields of a TPU config that the compiled step does not read: its data (but for
# the sequence length), when it saves, evaluates, logs and reports, and how the
# process exits on preemption.
_NOT_COMPILED = ("data", "checkpoint_every_steps", "checkpoints_to_keep", "compilation_cache",
                 "eval_every_steps", "heartbeat_s", "log_every", "preempted_exit_code",
                 "tracking")


def compiled_shape(config):
    """What the compiled step depends on: the config without the fields it does
    not read (`_NOT_COMPILED`), but for the sequence length (padded and packed
    rows of one length compile alike)."""
    shape = {name: value for name, value in config.to_dict().items()
             if name not in _NOT_COMPILED}
    return json.dumps({**shape, "seq_len": config.data.max_seq_len}, sort_keys=True,
                      default=str)


def memory_figures(analysis):
    """A compiled program's memory analysis as a dict of bytes per chip."""
    return {"argument": analysis.argument_size_in_bytes,
            "output": analysis.output_size_in_bytes, "alias": analysis.alias_size_in_bytes,
            "temp": analysis.temp_size_in_bytes}


def per_chip_bytes(memory):
    """What the program holds on a chip at its peak, from `memory_figures`."""
    return memory["argument"] + memory["output"] - memory["alias"] + memory["temp"]


def _unknown_costs(hlo):
    """How many -1 s XLA's TPU cost model put in a program's estimate: one per
    RngBitGenerator and one per custom call on its 64-bit state, but for the
    combine that hands each generator its state (counted on libtpu 0.0.42.1:
    12 generators in 2 layers of `v5p8.py`, -12 s; with
    `dropout_rng_per_chip`, 12 more combines and 24 splits, -48 s)."""
    generators = hlo.count(" rng-bit-generator(")
    splits = (hlo.count('custom_call_target="X64SplitLow"')
              + hlo.count('custom_call_target="X64SplitHigh"'))
    combines = hlo.count('custom_call_target="X64Combine"')
    return generators + splits + max(0, combines - generators)


def cost(compiled):
    """XLA's cost analysis of one compiled program, per chip, as a dict; its
    estimate without the -1 s of what it cannot cost (module docstring)."""
    analysis = compiled.cost_analysis()
    if isinstance(analysis, (list, tuple)):  # older JAX: one dict per program
        analysis = analysis[0]
    analysis = dict(analysis or {})
    unknown = _unknown_costs(compiled.as_text())
    if unknown and "optimal_seconds" in analysis:
        analysis["optimal_seconds"] += unknown
    return analysis


_COUNTED = ("flops", "bytes accessed", "optimal_seconds")


def _compile_costs(dims, config, devices, scan_unroll=1):
    """(seconds to lower and compile, memory analysis, XLA's counted costs)."""
    started = time.time()
    lowered = lower_step(dims, config, devices, scan_unroll)
    traced = time.time()
    compiled = lowered.compile()
    seconds = time.time() - started
    log.info("traced and lowered in %.0fs, compiled by XLA in %.0fs", traced - started,
             seconds - (traced - started))
    memory = compiled.memory_analysis()
    counted = cost(compiled)
    del compiled, lowered  # a 60-layer executable holds GBs of host memory
    gc.collect()
    return seconds, memory, {name: counted.get(name, 0.0) for name in _COUNTED}


def scan_trip_count(dims, config, devices, counted):
    """`counted` (one repeat of the scanned block, as XLA counts a loop) with the
    block counted once per repeat. The scans over the block's runs of layers
    (`scan_runs`; 31B: 5 sliding-window layers) are loops too, so the step is
    then compiled again without them (`scan_runs=False`): the block once, whole.
    Then it is compiled with two repeats per loop iteration (JAX unrolls an odd
    last repeat after the loop): the same program otherwise, so the difference
    is the block, once or (odd repeats) twice. Returns (costs, what was done,
    for the row)."""
    from training.tpu import layer_scan  # pylint: disable=import-outside-toplevel
    plan = layer_scan.Plan.of(dims.layer_types, config.scan_layers)
    if plan.repeats < 2:
        return counted, {"layers": plan.describe()}
    seconds, scanned = 0.0, counted
    nested = bool(config.scan_runs) and any(length > 1 for _, length in plan.runs)
    if nested:
        log.info("XLA counts a loop's body once: compiling the step again without the scans "
                 "over the block's runs of layers, to count each layer...")
        config = config.copy_and_resolve_references()
        config.scan_runs = False
        seconds, _, counted = _compile_costs(dims, config, devices)
    log.info("XLA counts the scanned block once: compiling the step again with two repeats "
             "per loop iteration, to count the block per repeat...")
    took, _, twice = _compile_costs(dims, config, devices, scan_unroll=2)
    block = {name: (twice[name] - counted[name]) / (1 + plan.repeats % 2)
             for name in _COUNTED}
    total = {name: counted[name] + (plan.repeats - 1) * block[name] for name in _COUNTED}
    return total, {"layers": plan.describe(), "period": plan.period,
                   "repeats": plan.repeats, "runs": plan.runs, "block_flops": block["flops"],
                   "runs_scanned": nested,
                   "counted_flops": scanned["flops"], "runs_unrolled_flops": counted["flops"],
                   "unrolled_by_2_flops": twice["flops"], "counting_seconds": seconds + took}


def compile_step(dims, config, machine):
    """Compiles the step of `config` for `machine`'s topology: what XLA measured.

    Everything that can be refused without compiling (the batch split, the
    mesh) is refused first.
    """
    if not machine.topology:
        raise AotError(f"machine {machine.name!r} has no TPU topology to compile for "
                       "(common/machines.py)")
    accumulation, micro_batch, _ = mesh_plan.batch_shape(config)
    mesh_plan.check(mesh_plan.Mesh.from_config(config), dims, machine.chips, micro_batch)
    devices = topology_devices(machine.topology)
    if len(devices) != machine.chips:
        raise AotError(f"topology {machine.topology} has {len(devices)} chips, the machine "
                       f"table says {machine.chips} for {machine.name}")
    seconds, memory, counted = _compile_costs(dims, config, devices)
    host_peak = host_peak_bytes()  # before the compiles that only count the scan
    log.info("compiled in %.0fs", seconds)
    counted, scan = scan_trip_count(dims, config, devices, counted)
    steps = accumulation  # the accumulation scan's body is counted once (module docstring)
    return {
        "memory": memory_figures(memory),
        "xla_flops": counted["flops"] * steps * machine.chips,
        "xla_bytes_accessed": counted["bytes accessed"] * steps * machine.chips,
        "optimal_seconds": counted["optimal_seconds"] * steps,
        "compile_seconds": seconds,
        "host_peak_bytes": host_peak,
        "scan": scan,
    }


def host_peak_bytes():
    """This process's peak resident memory so far (every compile it ran)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux


def row(dims, config, machine, measured, *, non_padding_fraction, trained_fraction):
    """The row of compile.json: XLA's figures against the planner, flops.py and HBM,
    and the throughput they predict for data with these token fractions."""
    memory = measured["memory"]
    per_chip = per_chip_bytes(memory)
    modules = gemma4_map.tunix_lora_modules(config.lora.target_modules)
    accumulation, micro_batch, seq_len = mesh_plan.batch_shape(config)
    remat, attention = bool(config.remat), config.attention.kernel
    positions = accumulation * micro_batch * seq_len  # token slots per optimizer step
    per_token = flops_lib.flops_per_token(dims, seq_len, config.lora.rank, modules)
    compiled_per_token = flops_lib.compiled_flops_per_token(
        dims, seq_len, config.lora.rank, modules, remat=remat,
        dense_attention=attention == "dense")
    kernels = analytic_kernels(dims, config, machine)
    scan = measured["scan"]  # period and repeats when a block was scanned
    scanned_layers = scan.get("period", 0) * scan.get("repeats", 0)
    # XLA gives a negative time when ops it cannot cost are left in the step (and
    # for v5e and v6e steps, always, on libtpu 0.0.42.1): then the roofline of its
    # counts, scaled by what the same generation's chips measured against theirs.
    xla_seconds = (measured["optimal_seconds"] + sum(k["seconds"] for k in kernels)
                   if measured["optimal_seconds"] > 0 else 0.0)
    compute, memory = roofline_parts(measured, kernels, machine)
    roofline = max(compute, memory)
    basis = prediction_basis(machine, xla_seconds, roofline)
    step_seconds = basis["seconds"]
    tokens_per_s = positions * non_padding_fraction / step_seconds if step_seconds else None
    hbm = machine.hbm_bytes_per_chip
    return {
        "topology": machine.topology, "machine": machine.name, "chips": machine.chips,
        "layers": dims.num_layers,
        "mesh": {"fsdp": config.mesh.fsdp, "tp": config.mesh.tp}, "seq_len": seq_len,
        "micro_batch": micro_batch, "accumulation": accumulation,
        "sequences_per_step": accumulation * micro_batch, "remat": remat,
        "attention": attention, "attention_block": config.attention.block,
        "loss_chunk": config.loss_chunk, "dropout_rng": config.dropout_rng,
        "dropout_rng_per_chip": bool(config.dropout_rng_per_chip),
        "per_chip_bytes": per_chip, "hbm_bytes": hbm,
        "hbm_fraction": per_chip / hbm if hbm else None, "fits": per_chip <= HBM_LIMIT * hbm,
        "memory": memory,
        "planner_bytes": mesh_plan.config_estimate(dims, config, scanned_layers)["total"],
        "xla_flops": measured["xla_flops"],
        "expected_compiled_flops": compiled_per_token * positions,
        "xla_optimal_seconds": measured["optimal_seconds"],
        "model_flops": per_token * positions * non_padding_fraction,
        "xla_bytes_accessed": measured["xla_bytes_accessed"],
        "optimal_seconds": step_seconds,  # the prediction: see "prediction"
        "roofline_seconds": roofline,
        "roofline_bound": "compute" if compute >= memory else "HBM bandwidth",
        "prediction": {k: v for k, v in basis.items() if k != "seconds"},
        "non_padding_fraction": non_padding_fraction, "trained_fraction": trained_fraction,
        "trained_tokens_per_step": positions * trained_fraction,
        "predicted_tokens_per_s": tokens_per_s,
        "predicted_trained_tokens_per_s": (positions * trained_fraction / step_seconds
                                           if step_seconds else None),
        "predicted_mfu": (flops_lib.mfu(tokens_per_s, per_token, machine.chips,
                                        machine.peak_flops_per_chip)
                          if tokens_per_s else None),
        "analytic_kernels": kernels,
        "compile_seconds": measured["compile_seconds"],
        # The process's high-water mark once this step was compiled: the step's own
        # peak when it is the process's first compile (the scanned row of
        # --compare_unrolled), else at most the largest compile so far.
        "host_peak_bytes": measured["host_peak_bytes"],
        "scan_layers": bool(config.scan_layers), "scan": measured["scan"],
    }


def roofline_parts(measured, kernels, machine):
    """(compute, memory) seconds of a step at the chips' limits: XLA's counted FLOPs
    (plus the kernels', counted by hand) at peak, and its counted bytes at the HBM
    bandwidth; (0, 0) where the machine table has no bandwidth for the chip."""
    if not machine.hbm_gbps_per_chip:
        return 0.0, 0.0
    flops = measured["xla_flops"] + sum(k["flops"] for k in kernels)
    return (flops / (machine.chips * machine.peak_flops_per_chip),
            measured["xla_bytes_accessed"] / (machine.chips * machine.hbm_gbps_per_chip * 1e9))


def roofline_seconds(measured, kernels, machine):
    """The step at the chips' limits: the longer of `roofline_parts`."""
    return max(roofline_parts(measured, kernels, machine))


def prediction_basis(machine, xla_seconds, roofline):
    """How the step time is predicted: {"seconds", "basis", and for a roofline the
    calibration it was scaled by}. `xla_seconds`, XLA's estimate plus the kernels,
    where it is positive; else the roofline times the mean measured/roofline factor
    of the runs on the same chip generation in common/calibration.json, or the bare
    roofline where none was measured."""
    if xla_seconds > 0:
        return {"seconds": xla_seconds, "basis": "xla"}
    if not roofline:
        return {"seconds": 0.0, "basis": "none"}
    factors = calibration.factors("step_seconds_over_roofline",
                                  generation=machine.topology.split(":")[0])
    if not factors:
        return {"seconds": roofline, "basis": "roofline, not calibrated (no measured run "
                "on this chip generation): the step at the chips' limits"}
    factor = sum(f for _, f in factors) / len(factors)
    return {"seconds": roofline * factor, "basis": "roofline x measured factor",
            "factor": factor, "runs": [run for run, _ in factors]}


def analytic_kernels(dims, config, machine):
    """The step's Pallas kernels, which XLA's cost model cannot see into, counted by
    hand: FLOPs over all chips and their time at the chips' peak (compute-bound
    at these block sizes, as XLA's own estimate assumes of its matmuls)."""
    if config.attention.kernel != "splash":
        return []
    from training.tpu import forward  # pylint: disable=import-outside-toplevel
    accumulation, micro_batch, seq_len = mesh_plan.batch_shape(config)
    flops = accumulation * micro_batch * forward.kernel_flops(
        dims, seq_len, config.attention.block, remat=bool(config.remat))
    return [{"name": "splash_attention", "flops": flops,
             "seconds": flops / (machine.chips * machine.peak_flops_per_chip),
             "counted": "by hand (forward.kernel_flops), at peak"}]


def compile_row(dims, config, machine, *, non_padding_fraction, trained_fraction):
    """compile_step, then its row."""
    return row(dims, config, machine, compile_step(dims, config, machine),
               non_padding_fraction=non_padding_fraction, trained_fraction=trained_fraction)


GIB = 2**30


def format_rows(rows):
    """The rows as an aligned text table."""
    header = ("mesh", "T", "mb x acc", "layers", "remat", "attention", "loss", "GiB/chip", "HBM %",
              "planner", "tok/s", "trained/s", "MFU", "compile s")
    lines = [header]
    for row in rows:
        mfu = row["predicted_mfu"]
        lines.append((
            f"{row['mesh']['fsdp']}x{row['mesh']['tp']}" + (" (ref)" if row.get("reference")
                                                              else ""),
            str(row["seq_len"]), f"{row['micro_batch']} x {row['accumulation']}",
            f"{row['layers']} " + ("scanned" if row["scan"].get("repeats") else "unrolled"),
            "yes" if row["remat"] else "no", row["attention"],
            f"chunk {row['loss_chunk']}" if row["loss_chunk"] else "full",
            f"{row['per_chip_bytes'] / GIB:.2f}",
            f"{100 * row['hbm_fraction']:.0f}%" if row["hbm_fraction"] is not None else "-",
            f"{row['planner_bytes'] / GIB:.2f}",
            f"{row['predicted_tokens_per_s']:.0f}" if row["predicted_tokens_per_s"] else "-",
            f"{row['predicted_trained_tokens_per_s']:.0f}"
            if row["predicted_trained_tokens_per_s"] else "-",
            f"{100 * mfu:.1f}%" if mfu is not None else "-",
            f"{row['compile_seconds']:.0f}"))
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    return "\n".join("  ".join(cell.rjust(w) for cell, w in zip(line, widths))
                     for line in lines)
