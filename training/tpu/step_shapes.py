"""The step at many shapes on the chip at hand, beside the roofline the planner gives it.

    bazel run //training/tpu:step_shapes -- --out=shapes.json                # on a v5e VM
    bazel run //training/tpu:step_shapes -- --shapes=one_chip,remat --out=shapes.json

What the planner's step model is fitted to and checked on (docs/performance.md,
"The step model"). Each shape is `one_chip.py` (Gemma 4 31B's first block at
half width, random weights, one chip) with a few fields changed: width,
depth, sequence length, micro-batch, accumulation, remat, attention, LoRA
rank, padded rows (`SHAPES`). The layers are unrolled, so XLA's counts of the
chip's own compile are the whole step's (a scanned loop's body is counted
once). For each shape, in one process: the step run on random tokens of
CodeV-R1's lengths (scan_benchmark.run_layout: the median of --steps after a
warm-up), and its roofline as the planner computes it (aot.row: the counted
FLOPs plus splash's counted by hand at the chip's peak, the counted bytes at
its HBM bandwidth). Writes one row per shape to --out as JSON, as it goes.
"""

import logging
import tempfile

from absl import app
from absl import flags
from absl import logging as absl_logging

from common import cli
from common import config_cli
from common import machines
from common import storage
from training.tpu import aot
from training.tpu import mesh_plan
from training.tpu import scan_benchmark
from training.tpu import sharding
from training.tpu import trainer
from training.tpu.configs import one_chip

# name -> (layers, width divisor, one_chip.py's fields changed). one_chip.py:
# 6 layers, half width, 3072 tokens x micro-batch 1 x 8 accumulation steps,
# packed, splash, no remat, LoRA rank 64.
SHAPES = {
    "one_chip": (6, 2, {}),
    "seq2048_mb2": (6, 2, {"data.max_seq_len": 2048, "batch.per_device_size": 2}),
    "seq1024_mb4": (6, 2, {"data.max_seq_len": 1024, "batch.per_device_size": 4}),
    "seq4096": (6, 2, {"data.max_seq_len": 4096, "batch.effective_size": 4}),
    "accumulation1": (6, 2, {"batch.effective_size": 1}),
    "remat": (6, 2, {"remat": True}),
    "padded": (6, 2, {"data.packing": False}),
    "dense_attention": (6, 2, {"attention.kernel": "dense", "data.max_seq_len": 2048}),
    "rank16": (6, 2, {"lora.rank": 16, "lora.alpha": 32.0}),
    "deep12_quarter_seq4096": (12, 4, {"data.max_seq_len": 4096}),
    "deep12_half_seq2048": (12, 2, {"data.max_seq_len": 2048, "batch.effective_size": 4}),
    "full_width_2": (2, 1, {"data.max_seq_len": 2048, "batch.effective_size": 4,
                            "remat": True}),
    # The reference study's step (aot.reference_config) on one chip, at 2048 tokens.
    "reference": (6, 2, {"data.max_seq_len": 2048, "data.packing": False, "remat": True,
                         "attention.kernel": "dense", "loss_chunk": 0,
                         "dropout_rng": "threefry2x32"}),
}

_SHAPES = flags.DEFINE_list("shapes", list(SHAPES), "Shapes to run (SHAPES), in order.")
FLAGS = flags.FLAGS  # --steps (timed steps after a warm-up) is scan_benchmark's
_OUT = flags.DEFINE_string("out", "step_shapes.json", "Where the rows go (JSON).")


class ShapesError(cli.UserError):
    pass


def shape_config(name):
    """(config, layers, width divisor) of the shape `name`."""
    if name not in SHAPES:
        raise ShapesError(f"unknown shape {name!r}; known: {', '.join(SHAPES)}")
    layers, divisor, fields = SHAPES[name]
    config = one_chip.get_config()
    config.model.random.layers, config.model.random.width_divisor = layers, divisor
    for dotted, value in fields.items():
        holder = config
        *path, last = dotted.split(".")
        for part in path:
            holder = holder[part]
        if last not in holder:  # the config is unlocked: a typo would add a field
            raise ShapesError(f"shape {name!r}: one_chip.py has no field {dotted!r}")
        holder[last] = value
    return config, layers, divisor


def roofline(dims, config, machine, measured):
    """The planner's view of a step the chip compiled (aot.row's figures)."""
    accumulation = mesh_plan.batch_shape(config)[0]
    counted = measured["xla_counted"]
    figures = {"memory": measured["memory"],
               "xla_flops": counted["flops"] * accumulation * machine.chips,
               "xla_bytes_accessed": counted["bytes_accessed"] * accumulation * machine.chips,
               "optimal_seconds": -1.0, "compile_seconds": measured["xla_compile_seconds"],
               "host_peak_bytes": 0, "scan": {}}
    row = aot.row(dims, config, machine, figures, non_padding_fraction=1.0,
                  trained_fraction=1.0)
    kernels = row["analytic_kernels"]
    compute, memory = aot.roofline_parts(figures, kernels, machine)
    return {"roofline_seconds": row["roofline_seconds"], "compute_seconds": compute,
            "memory_seconds": memory,
            "kernel_seconds": sum(k["seconds"] for k in kernels),
            "xla_flops": figures["xla_flops"], "kernel_flops": sum(k["flops"] for k in kernels),
            "xla_bytes_accessed": figures["xla_bytes_accessed"],
            "per_chip_bytes": row["per_chip_bytes"], "planner_bytes": row["planner_bytes"]}


def measure(name, workdir, steps):
    """One shape's row: what it is, the step measured, the roofline."""
    config, layers, divisor = shape_config(name)
    machine = machines.get(config.machine)
    # (the config's model.random cuts and narrows the base: nothing more here)
    dims = scan_benchmark._dims(config, workdir, "", 0, 1)  # pylint: disable=protected-access
    mesh = sharding.make_mesh(config.mesh.fsdp, config.mesh.tp)
    accumulation, micro, seq_len = mesh_plan.batch_shape(config)
    measured = scan_benchmark.run_layout(dims, config, mesh, False, steps)
    return {"shape": name, "layers": layers, "width_divisor": divisor,
            "hidden": dims.embed, "seq_len": seq_len, "micro_batch": micro,
            "accumulation": accumulation, "remat": bool(config.remat),
            "attention": config.attention.kernel, "packed": bool(config.data.packing),
            "lora_rank": config.lora.rank, "machine": machine.name,
            "step_seconds": measured["step_seconds"],
            "xla_compile_seconds": measured["xla_compile_seconds"],
            # the process's peak so far (every shape before this one included)
            "device_peak_bytes_so_far": measured["device_peak_bytes"],
            "data_tokens_per_s": measured["data_tokens_per_s"],
            **roofline(dims, config, machine, measured)}


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    absl_logging.set_verbosity(absl_logging.WARNING)
    logging.getLogger("training").setLevel(logging.INFO)
    for name in _SHAPES.value:
        shape_config(name)  # every name checked before the chip is opened
    out = config_cli.user_path(_OUT.value)
    config, _, _ = shape_config(_SHAPES.value[0])
    try:
        trainer.setup_devices(config)
    except machines.WrongMachine:
        pass  # measured on the chips at hand
    rows = []
    with tempfile.TemporaryDirectory() as workdir:
        for name in _SHAPES.value:
            try:
                row = measure(name, workdir, FLAGS.steps)
            except Exception as e:  # pylint: disable=broad-except
                row = {"shape": name, "error": f"{type(e).__name__}: {e}"[:2000]}
            rows.append(row)
            storage.write_json(out, {"rows": rows})
            if "error" in row:
                print(f"{name}: {row['error'][:300]}", flush=True)
            else:
                print(f"{name}: step {row['step_seconds']['median']:.3f} s, roofline "
                      f"{row['roofline_seconds']:.3f} s ({row['compute_seconds']:.3f} compute, "
                      f"{row['memory_seconds']:.3f} memory), factor "
                      f"{row['step_seconds']['median'] / row['roofline_seconds']:.3f}",
                      flush=True)
    print(out)


if __name__ == "__main__":
    cli.run(main)
