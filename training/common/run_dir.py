"""The run directory both training stacks write, and conversion reads.

    RUN_DIR/
      config.json        the resolved config (common/config_cli.py)
      run.json           what the run used: base model path, stack, effective
                         batch, steps, devices, tool versions
      metrics.jsonl      one JSON object per logged step (`step`, `loss`, ...)
      tensorboard/       the same metrics as TensorBoard events
      checkpoints/       Orbax (TPU) or HF Trainer/PEFT (GPU) checkpoints
      base_model/        the tiny random base of CPU runs (real runs name a Hub
                         id or directory in run.json instead)

Both stacks log the same metric names (METRIC_NAMES), so runs compare directly.
"""

import importlib.metadata
import json
import os
import time

from common import cli
from common import jsonl

CONFIG = "config.json"
RUN_INFO = "run.json"
METRICS = "metrics.jsonl"
TENSORBOARD = "tensorboard"
CHECKPOINTS = "checkpoints"

# Per-step metrics, same names on both stacks.
METRIC_NAMES = (
    "step", "loss", "learning_rate", "grad_norm", "trained_tokens", "tokens",
    "trained_tokens_per_s", "tokens_per_s", "step_time_s", "mfu",
)


class RunDirError(cli.UserError):
    """A run directory that cannot be used."""


def prepare(path):
    """Creates the run directory, failing early and clearly if it is not writable."""
    try:
        os.makedirs(os.path.join(path, CHECKPOINTS), exist_ok=True)
        probe = os.path.join(path, f".write_probe.{os.getpid()}")
        with open(probe, "w") as f:
            f.write("ok")
        os.remove(probe)
    except OSError as e:
        raise RunDirError(f"cannot write to the run directory {path}: {e.strerror}") from e
    return path


def write_json(path, value):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(value, f, indent=2, sort_keys=True)
        f.write("\n")
    os.replace(tmp, path)


def package_versions(names):
    """{distribution: version}, for the records a run or an export leaves."""
    return {name: importlib.metadata.version(name) for name in names}


def read_run_info(run_dir):
    path = os.path.join(run_dir, RUN_INFO)
    if not os.path.exists(path):
        raise RunDirError(f"{run_dir} is not a run directory (no {RUN_INFO})")
    with open(path) as f:
        return json.load(f)


class MetricsWriter:
    """Appends step metrics to metrics.jsonl and TensorBoard (process 0 only).

    On resume, lines for steps after the restored step are dropped first, so
    the file holds each step once; so is a torn last line that a killed run
    left (common/jsonl.py).
    """

    def __init__(self, run_dir, resume_step=0, enabled=True):
        self._enabled = enabled
        if not enabled:
            return
        self._path = os.path.join(run_dir, METRICS)
        if os.path.exists(self._path):
            records, _ = jsonl.read(self._path)
            with open(self._path + ".tmp", "w") as f:
                f.writelines(json.dumps(r) + "\n" for r in records
                             if r.get("step", 0) <= resume_step)
            os.replace(self._path + ".tmp", self._path)
        self._file = open(self._path, "a", buffering=1)
        from tensorboardX import SummaryWriter  # pylint: disable=import-outside-toplevel
        self._tensorboard = SummaryWriter(os.path.join(run_dir, TENSORBOARD))

    def write(self, metrics):
        if not self._enabled:
            return
        record = {"time": time.time(), **metrics}
        self._file.write(json.dumps(record) + "\n")
        for name, value in metrics.items():
            if name != "step" and isinstance(value, (int, float)) and value is not None:
                self._tensorboard.add_scalar(f"train/{name}", value, metrics["step"])

    def close(self):
        if self._enabled:
            self._file.close()
            self._tensorboard.close()
