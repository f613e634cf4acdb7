"""Compiles the TPU training step for the config's TPU topology, without a TPU.

    bazel run //training/tpu:compile -- --config=v5p8.py --workdir=runs/compile-v5p8
    bazel run //training/tpu:compile -- --config=v5p8.py --compare_reference

Builds the config's model, LoRA and optimizer state abstractly from the base
model's config.json alone (a Hub id, a directory or a config.json file; the
31B config ships with the repository), compiles exactly the step `sft` runs
for the machine's topology (common/machines.py) on compile-only devices,
and prints and writes WORKDIR/compile.json: XLA's bytes per chip against HBM
and against the planner, its FLOPs against training/common/flops.py, its
estimate of the step time, and the predicted tokens/s, trained tokens/s and
MFU. A step that does not fit in 90% of HBM exits 1 after writing the table.

Token fractions: a step holds examples x seq_len token positions, of which a
fraction are data (not padding) and a smaller fraction are trained (loss-masked
in). They come from the config's data, tokenized with the base's tokenizer,
unless given with --non_padding_fraction / --trained_fraction; without the Hub,
the default CodeV-R1 data is stood in for by rows of its token-length profile
(data/counting.py), so the compile runs offline with no flags.
--compare_reference also compiles the reference recipe's step on the same
machine (tp=4 and fsdp over the other chips, one row per replica, 8 rows per
step padded to the sequence length, threefry dropout masks) and prints the
ratio. A config with `scan_layers` scans over the decoder layers' repeating
block (training/tpu/layer_scan.py); --compare_unrolled adds the row of the
same step with every layer unrolled (60 unrolled layers of 31B compile in about
5 to 6 minutes on 2 cores and take ~13 GB of host memory).
compile.json also records the process's peak host memory, and each row the
peak once its step was compiled (before the compiles that only count a scan).
"""

import dataclasses
import json
import logging

from absl import app
from absl import flags
from absl import logging as absl_logging

from common import cli
from common import config_cli
from common import storage

_CONFIG = config_cli.define_config_flag(__file__, default="v5p8.py")
_WORKDIR = flags.DEFINE_string("workdir", "runs/tpu-compile",
                                "Where compile.json goes: a folder or a gs:// URL.")
_BASE_CONFIG = flags.DEFINE_string(
    "base_config", "", "The base model's config.json, its directory or a Hub id (default: "
    "the config's model.name; google/gemma-4-31B-it reads the copy in "
    "gemma4/hub_configs).")
_LAYERS = flags.DEFINE_list(
    "layers", [], "Keep only these layer indices of the base (e.g. 0,5: one sliding and one "
    "global layer of Gemma 4), for quick checks; default all.")
_NON_PADDING = flags.DEFINE_float(
    "non_padding_fraction", None, "Share of token positions holding data, for the config's "
    "packing setting (default: measured on the config's data).")
_TRAINED = flags.DEFINE_float(
    "trained_fraction", None, "Share of token positions that are trained (default: measured).")
_COMPARE = flags.DEFINE_bool(
    "compare_reference", False, "Also compile the reference recipe's step and print the ratio.")
_COMPARE_UNROLLED = flags.DEFINE_bool(
    "compare_unrolled", False, "Also compile the step with every decoder layer unrolled "
    "(--config.scan_layers=False) and print its row.")
_REF_NON_PADDING = flags.DEFINE_float(
    "reference_non_padding_fraction", None,
    "As --non_padding_fraction for the reference's padded rows (default: measured).")
_REF_TRAINED = flags.DEFINE_float(
    "reference_trained_fraction", None, "As --trained_fraction for the reference's rows.")

COMPILE_JSON = "compile.json"


class CompileError(cli.UserError):
    pass


def measured_fractions(config, base_name):
    """(non-padding, trained) shares of token positions of the config's data."""
    from data import counting  # pylint: disable=import-outside-toplevel
    from data import packing as packing_lib  # pylint: disable=import-outside-toplevel
    from data import pipeline  # pylint: disable=import-outside-toplevel
    from data import tokenizer as tokenizer_lib  # pylint: disable=import-outside-toplevel
    from gemma4 import base_model  # pylint: disable=import-outside-toplevel

    def fractions(data_config, tokenizer):
        sequences = pipeline.prepare(data_config, tokenizer).sequences
        trained = float(sequences["loss_mask"][:, 1:].sum()) / sequences["loss_mask"].size
        return packing_lib.non_padding_fraction(sequences), trained
    # The random base carries the embedded tokenizer (random_model.py).
    base = tokenizer_lib.EMBEDDED if base_name == base_model.RANDOM else base_name
    try:
        # Token fractions, not a step count: 1,000 rows of the profile give them.
        return counting.read(config.data, fractions, base=base, stand_in_rows=1000)[2]
    except counting.CountingError as e:
        raise CompileError(f"{e}, or pass --non_padding_fraction and --trained_fraction (and "
                           "--reference_* with --compare_reference)") from None


def _fractions(config, base_name, non_padding, trained):
    if non_padding is not None and trained is not None:
        return non_padding, trained
    return measured_fractions(config, base_name)


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    absl_logging.set_verbosity(absl_logging.WARNING)
    logging.getLogger("training").setLevel(logging.INFO)
    from training.tpu import aot  # pylint: disable=import-outside-toplevel
    aot.use_libtpu()  # before anything starts JAX
    from common import machines  # pylint: disable=import-outside-toplevel
    from gemma4 import base_model  # pylint: disable=import-outside-toplevel
    from gemma4 import gemma4_map  # pylint: disable=import-outside-toplevel
    from training.tpu import libtpu_flags  # pylint: disable=import-outside-toplevel
    from training.tpu import mesh_plan  # pylint: disable=import-outside-toplevel

    config = _CONFIG.value
    libtpu_flags.use(config)  # before libtpu starts
    workdir = config_cli.user_path(_WORKDIR.value)  # a folder or a gs:// URL
    storage.probe(workdir)  # before the minutes of compiling
    machine = machines.get(config.machine)
    base_name = _BASE_CONFIG.value or config.model.name
    if base_name == base_model.TINY:
        raise CompileError("the tiny CPU model has no TPU to compile for: use a TPU config "
                           "(--config=v5p8.py) or --base_config")
    from gemma4 import random_model  # pylint: disable=import-outside-toplevel
    hf_config, source = random_model.base_config(config.model, config_cli.path_or_id(base_name))
    dims = gemma4_map.Dims.from_hf_config(hf_config)
    if _LAYERS.value:
        try:
            types = tuple(dims.layer_types[int(i)] for i in _LAYERS.value)
        except (ValueError, IndexError):
            raise CompileError(f"--layers={','.join(_LAYERS.value)}: indices of the base's "
                               f"{dims.num_layers} layers") from None
        dims = dataclasses.replace(dims, layer_types=types)
    tokenizer_source = config.model.name
    rows = []
    plans = [(config, _NON_PADDING.value, _TRAINED.value, False)]
    if _COMPARE_UNROLLED.value:
        unrolled = config.copy_and_resolve_references()
        unrolled.scan_layers = not config.scan_layers
        plans.append((unrolled, _NON_PADDING.value, _TRAINED.value, False))
    if _COMPARE.value:
        plans.insert(0, (aot.reference_config(config, machine.chips), _REF_NON_PADDING.value,
                         _REF_TRAINED.value, True))
    measured = {}  # compiled_shape -> what XLA measured
    for plan_config, non_padding, trained, is_reference in plans:
        non_padding, trained = _fractions(plan_config, tokenizer_source, non_padding, trained)
        key = aot.compiled_shape(plan_config)
        if key not in measured:
            accumulation, micro_batch, seq_len = mesh_plan.batch_shape(plan_config)
            print(f"compiling {'the reference step' if is_reference else 'the step'} for "
                  f"{machine.topology} ({dims.num_layers} layers "
                  f"{'scanned' if plan_config.scan_layers else 'unrolled'}, mesh "
                  f"{plan_config.mesh.fsdp} x {plan_config.mesh.tp}, {micro_batch} x "
                  f"{accumulation} x {seq_len} tokens)...", flush=True)
            measured[key] = aot.compile_step(dims, plan_config, machine)
        row = aot.row(dims, plan_config, machine, measured[key],
                      non_padding_fraction=non_padding, trained_fraction=trained)
        row.update(packing=plan_config.data.packing, reference=is_reference,
                   base_config=source)
        rows.append(row)
    result = {"rows": rows, "host_peak_bytes": aot.host_peak_bytes()}
    if len(rows) == 1:
        result.update(rows[0])
    elif _COMPARE.value:
        ours, reference = rows[1], rows[0]
        result["trained_tokens_per_s_ratio"] = (
            ours["predicted_trained_tokens_per_s"] / reference["predicted_trained_tokens_per_s"])
    path = storage.join(workdir, COMPILE_JSON)
    storage.write_bytes(path,
                        (json.dumps(result, indent=2) + "\n").encode())
    print(aot.format_rows(rows))
    for row in rows:
        for kernel in row["analytic_kernels"]:
            print(f"{kernel['name']}: a Pallas kernel XLA's cost model does not see; its "
                  f"{kernel['flops']:.3g} FLOPs per step ({kernel['seconds']:.3f} s at peak) "
                  "are counted by hand and added to the step's")
        prediction = row["prediction"]
        if prediction["basis"] != "xla":
            print(f"step time: XLA's estimate is {row['xla_optimal_seconds']:.3g} s (unusable); "
                  f"predicted from the roofline ({row['roofline_seconds']:.3f} s), "
                  + (f"x {prediction['factor']:.2f} measured on {', '.join(prediction['runs'])}"
                     if "factor" in prediction else prediction["basis"]))
    if "trained_tokens_per_s_ratio" in result:
        print(f"predicted trained tokens/s, ours / reference: "
              f"{result['trained_tokens_per_s_ratio']:.2f}x")
    print(f"peak host memory: {result['host_peak_bytes'] / aot.GIB:.1f} GiB (through each "
          "row's step compile: " + ", ".join(f"{r['host_peak_bytes'] / aot.GIB:.1f}"
                                            for r in rows) + " GiB)")
    print(f"wrote {path}")
    too_big = [r for r in rows if not r["fits"] and not r["reference"]]
    if too_big:
        raise CompileError(f"the step needs {too_big[0]['per_chip_bytes'] / aot.GIB:.1f} GiB "
                           f"per chip, over {aot.HBM_LIMIT:.0%} of {machine.name}'s "
                           f"{machine.hbm_gib_per_chip} GiB HBM: lower the micro-batch or "
                           "sequence length, enable remat, or use more chips")


if __name__ == "__main__":
    cli.run(main)
