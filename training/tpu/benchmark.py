"""CPU train-step throughput of the tiny config: padding vs packing.

    bazel run //training/tpu:benchmark -- --steps=6

Rows follow CodeV-R1's length profile (lognormal, mean ~922 and p99 ~2553 of
3072 tokens, ~15% of tokens trained) scaled to the tiny config's max length,
so padding wastes what it wastes on the real run. Both modes run the same
compiled step on the same model in one process; the figure is trained tokens
per second after one warm-up step, and the ratio packing / padding.
"""

import json
import tempfile
import time

import jax
from absl import app
from absl import flags

from common import cli
from common import config_cli
from data import packing
from data import synthetic
from gemma4 import base_model
from gemma4 import gemma4_map
from training.common import lifecycle
from training.tpu import mesh_plan
from training.tpu import sharding
from training.tpu import train_step
from training.tpu import trainer
from training.tpu.configs import cpu

_STEPS = flags.DEFINE_integer("steps", 6, "Timed steps per mode (after one warm-up).")
_OUTPUT_JSON = flags.DEFINE_string("output_json", None, "Also write the figures here.")

GOAL_RATIO = 2.5


def run(steps, workdir):

    config = cpu.get_config()
    trainer.setup_devices(config)
    base_dir = lifecycle.materialize_base(config, workdir)
    dims = gemma4_map.Dims.from_hf_config(base_model.read_config(base_dir))
    mesh = sharding.make_mesh(config.mesh.fsdp, config.mesh.tp)
    state = trainer.load_state(base_dir, dims, mesh, config, total_steps=100)
    accumulation, micro, seq_len = mesh_plan.batch_shape(config)
    per_step = accumulation * micro
    examples = synthetic.examples(per_step * (steps + 1) * 4, seq_len, dims.vocab)
    results = {}
    for mode, arrange in (("padding", packing.pad), ("packing", packing.pack)):
        sequences = arrange(examples, seq_len, 0)
        # The step donates its inputs: each mode starts from its own copy.
        lora = jax.tree.map(lambda x: x.copy(), state.lora)
        opt_state = jax.tree.map(lambda x: x.copy(), state.opt_state)
        trained = 0
        started = None
        for step in range(steps + 1):
            rows = slice(step * per_step, (step + 1) * per_step)
            batch = {k: jax.device_put(v[rows].reshape(accumulation, micro, seq_len),
                                       state.batch_sharding) for k, v in sequences.items()}
            lora, opt_state, metrics = state.step.train(
                lora, opt_state, state.base, state.rngs, batch, train_step.step_key(config, step))
            metrics = jax.device_get(metrics)
            if step == 0:
                started = time.perf_counter()  # the first step compiles
            else:
                trained += int(metrics["trained_tokens"])
        seconds = time.perf_counter() - started
        results[mode] = {"trained_tokens_per_s": trained / seconds, "seconds": seconds,
                         "steps": steps,
                         "non_padding_fraction": packing.non_padding_fraction(sequences)}
    results["ratio_packing_over_padding"] = (results["packing"]["trained_tokens_per_s"] /
                                             results["padding"]["trained_tokens_per_s"])
    results["goal_ratio"] = GOAL_RATIO
    results["seq_len"] = seq_len
    return results


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    with tempfile.TemporaryDirectory() as workdir:
        results = run(_STEPS.value, workdir)
    print(json.dumps(results, indent=2))
    print(f"\npacking {results['packing']['trained_tokens_per_s']:.0f} vs padding "
          f"{results['padding']['trained_tokens_per_s']:.0f} trained tokens/s: "
          f"{results['ratio_packing_over_padding']:.2f}x (goal {GOAL_RATIO}x)")
    if _OUTPUT_JSON.value:
        with open(config_cli.user_path(_OUTPUT_JSON.value), "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    cli.run(main)
