"""Whether two TPU runs ended alike: the same LoRA factors, bit for bit, and the
same loss and gradient norm at every step both logged.

    bazel run //training/tpu:compare_runs -- runs/whole runs/stopped
    bazel run //training/tpu:compare_runs -- runs/whole gs://BUCKET/stopped

What a resumed run is checked by (training/tpu/chip_check.sh: a run stopped by
SIGTERM and resumed against one that never stopped), and what says whether two
machines or two versions train the same. Compares each run's newest checkpoint
(or --step); exits 1, naming the arrays that differ and by how much, when they
are not equal.
"""

import json

import numpy as np
from absl import app
from absl import flags

from common import cli
from common import config_cli
from common import run_dir as run_dir_lib
from common import storage
from gemma4 import orbax_lora

_STEP = flags.DEFINE_integer("step", None, "The checkpoint step to compare (default: the "
                             "newest of the first run).")


class DifferentRuns(cli.UserError):
    pass


def checkpoint_steps(run_dir):
    steps = sorted(int(name) for name in storage.listdir(
        storage.join(run_dir, run_dir_lib.CHECKPOINTS)) if name.isdigit())
    if not steps:
        raise DifferentRuns(f"{run_dir} has no checkpoints")
    return steps


def step_metrics(run_dir):
    """{step: (loss, grad_norm)} of the run's metrics.jsonl (a resumed step: its last line)."""
    out = {}
    for line in storage.read_text(storage.join(run_dir, run_dir_lib.METRICS)).splitlines():
        record = json.loads(line)
        if "loss" in record and "step" in record:
            out[record["step"]] = (record["loss"], record.get("grad_norm"))
    return out


def _lora(run_dir, step):
    """The LoRA factors of checkpoint `step` (a gs:// run's copied to the local cache)."""
    lora = f"{run_dir_lib.CHECKPOINTS}/{step}/lora"
    local = storage.fetch(run_dir, only=[lora])
    return orbax_lora.read(storage.join(local, run_dir_lib.CHECKPOINTS, str(step)))


def compare(first, second, step=None):
    """(step, number of arrays, steps compared): raises DifferentRuns when they differ."""
    steps = checkpoint_steps(first)
    step = steps[-1] if step is None else step
    if step not in checkpoint_steps(second):
        raise DifferentRuns(f"{second} has no checkpoint at step {step} "
                            f"(it has {checkpoint_steps(second)})")
    ours, theirs = (_lora(run, step) for run in (first, second))
    if set(ours) != set(theirs):
        raise DifferentRuns(f"the runs' LoRA factors have other names: "
                            f"{sorted(set(ours) ^ set(theirs))[:5]}")
    differ = {name: float(np.max(np.abs(ours[name].astype(np.float64) -
                                        theirs[name].astype(np.float64))))
              for name in sorted(ours) if not np.array_equal(ours[name], theirs[name])}
    metrics = [step_metrics(run) for run in (first, second)]
    common_steps = sorted(set(metrics[0]) & set(metrics[1]))
    other = [s for s in common_steps if metrics[0][s] != metrics[1][s]]
    if differ or other:
        raise DifferentRuns(
            f"step {step}: {len(differ)} of {len(ours)} LoRA arrays differ" +
            "".join(f"\n  {name}: max |difference| {value:.3g}"
                    for name, value in list(differ.items())[:10]) +
            (f"\n  losses or gradient norms differ at steps {other[:10]}" if other else ""))
    return step, len(ours), len(common_steps)


def main(argv):
    if len(argv) != 3:
        raise app.UsageError("two run directories")
    first, second = (config_cli.user_path(path) for path in argv[1:])
    step, arrays, steps = compare(first, second, _STEP.value)
    print(f"the same: {arrays} LoRA arrays at step {step}, bit for bit; losses and gradient "
          f"norms of {steps} steps")


if __name__ == "__main__":
    cli.run(main)
