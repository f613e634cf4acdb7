"""The run directory both training stacks write, and conversion reads.

    RUN_DIR/
      config.json        the resolved config (common/config_cli.py)
      run.json           what the run used: base model path, stack, effective
                         batch, steps, devices, tool versions; and `segments`,
                         the billed life of each process (training/common/billing.py)
      metrics.jsonl      one JSON object per logged step (`step`, `loss`, ...)
      tensorboard/       the same metrics as TensorBoard events
      wandb/, tracking.json   W&B's files and run id, when the config asks for
                         W&B (training/common/tracking.py)
      checkpoints/       Orbax (TPU) or HF Trainer/PEFT (GPU) checkpoints
      base_model/        the tiny random base of CPU runs (real runs name a Hub
                         id or directory in run.json instead)

Both stacks log the same metric names (METRIC_NAMES), so runs compare directly.
RUN_DIR is a local folder or a gs:// URL (common/storage.py); a run of several
processes (hosts) needs one they all share: a URL, or a shared file system.
"""

import importlib.metadata
import json
import os
import time

from common import cli
from common import jsonl
from common import storage
from training.common import tracking

CONFIG = "config.json"
RUN_INFO = "run.json"
METRICS = "metrics.jsonl"
TENSORBOARD = tracking.TENSORBOARD
CHECKPOINTS = "checkpoints"

# Per-step metrics, same names on both stacks; the totals are the run's so far,
# every step counted (logged or not: `log_every` changes no sum), continued
# across resumes from the checkpoint's step.
TOTAL_NAMES = ("total_step_time_s", "total_tokens", "total_trained_tokens")
METRIC_NAMES = (
    "step", "loss", "learning_rate", "grad_norm", "trained_tokens", "tokens",
    "trained_tokens_per_s", "tokens_per_s", "step_time_s", "mfu", *TOTAL_NAMES,
)
# A validation record (runs with a validation set), between the step records.
EVAL_METRIC_NAMES = ("step", "eval_loss", "eval_tokens")


class RunDirError(cli.UserError):
    """A run directory that cannot be used."""


def prepare(path):
    """Creates the run directory, failing early and clearly if it is not writable."""
    try:
        storage.probe(path)
    except storage.StorageError as e:
        raise RunDirError(str(e).replace("cannot write to ", "cannot write to the run "
                                         "directory ", 1)) from e
    storage.makedirs(storage.join(path, CHECKPOINTS))
    return path


SHARED_FS_FLAG = "--shared_fs"


def check_shared(path, hosts):
    """Refuses a local run directory for a run on several hosts (unless declared
    shared): each host would write its own checkpoints, and no host could resume."""
    if hosts > 1 and not storage.is_url(path):
        raise RunDirError(
            f"--workdir={path} is a local folder and this run has {hosts} hosts: each would "
            f"keep its own checkpoints and none could resume. Use a gs://BUCKET/... URL, or "
            f"pass {SHARED_FS_FLAG} if {path} is a file system all hosts mount (NFS, Filestore)")


def package_versions(names):
    """{distribution: version}, for the records a run or an export leaves."""
    return {name: importlib.metadata.version(name) for name in names}


def read_run_info(run_dir):
    path = storage.join(run_dir, RUN_INFO)
    if not storage.exists(path):
        raise RunDirError(f"{run_dir} is not a run directory (no {RUN_INFO})")
    return storage.read_json(path)


def _totals_at(records):
    """The totals of the last step record (the trainers write the record of each
    checkpoint's step); for a run directory written before the records carried
    them, the sums of the records (exact when every step was logged)."""
    steps = [r for r in records if "eval_loss" not in r]
    if steps and TOTAL_NAMES[0] in steps[-1]:
        return {name: steps[-1][name] for name in TOTAL_NAMES}
    sums = dict(zip(TOTAL_NAMES, ("step_time_s", "tokens", "trained_tokens")))
    return {total: sum(r.get(name, 0) for r in steps) for total, name in sums.items()}


class MetricsWriter:
    """Appends step metrics to metrics.jsonl and the config's trackers (TensorBoard
    always; training/common/tracking.py), process 0 only.

    On resume, lines for steps after the restored step are dropped first, so
    the file holds each step once; so is a torn last line that a killed run
    left (common/jsonl.py). In a gs:// run both are written to a local mirror
    and uploaded by `flush` (called at checkpoints) and every PUSH_EVERY_S.

    `count` adds every step to the totals (TOTAL_NAMES) that each record
    carries; a resume continues them from the record of its checkpoint's step,
    which the trainers always write.
    """

    PUSH_EVERY_S = 60
    # Uploaded every PUSH_EVERY_S; W&B's folder too at checkpoints and at the end.
    _PERIODIC = (METRICS, tracking.TENSORBOARD)
    _PUSHED = (*_PERIODIC, tracking.WANDB, tracking.STATE)

    def __init__(self, run_dir, resume_step=0, enabled=True, config=None):
        """`config`: the run's resolved config, whose `tracking` section picks the
        trackers (None: TensorBoard alone)."""
        self._enabled = enabled
        self.totals = dict.fromkeys(TOTAL_NAMES, 0)
        if not enabled:
            return
        self._mirror = storage.Mirror(run_dir, clear=True)
        self._mirror.pull([METRICS, tracking.STATE])
        self._path = os.path.join(self._mirror.local, METRICS)
        if os.path.exists(self._path):
            try:
                records, _ = jsonl.read(self._path)
            except jsonl.JsonlError as e:  # name the file where the run keeps it
                raise jsonl.JsonlError(str(e).replace(
                    self._path, storage.join(run_dir, METRICS))) from None
            kept = [r for r in records if r.get("step", 0) <= resume_step]
            with open(self._path + ".tmp", "w") as f:
                f.writelines(json.dumps(r) + "\n" for r in kept)
            os.replace(self._path + ".tmp", self._path)
            self.totals = _totals_at(kept)
        self._file = open(self._path, "a", buffering=1)
        self._trackers = tracking.open_trackers(config, self._mirror.local,
                                                run_dir.rstrip("/").rsplit("/", 1)[-1])
        self._mirror.push([tracking.STATE])  # a W&B run id: a resume continues that run
        self._pushed = time.time()

    def count(self, seconds, tokens, trained_tokens):
        """Adds one step (every step, logged or not) to the totals."""
        for name, value in zip(TOTAL_NAMES, (seconds, tokens, trained_tokens)):
            self.totals[name] += value

    def write(self, metrics):
        if not self._enabled:
            return
        record = {"time": time.time(), **metrics, **self.totals}
        self._file.write(json.dumps(record) + "\n")
        scalars = {f"train/{name}": value for name, value in metrics.items()
                   if name != "step" and isinstance(value, (int, float))}
        for tracker in self._trackers:
            tracker.log(scalars, metrics["step"])
        if self._mirror.remote and time.time() - self._pushed > self.PUSH_EVERY_S:
            self._file.flush()
            for tracker in self._trackers:
                tracker.flush()
            self._mirror.push(self._PERIODIC)
            self._pushed = time.time()

    def write_eval(self, step, loss, tokens):
        """A validation record: `eval_loss` (summed loss / trained tokens of the whole
        validation set) and `eval_tokens`, under the trackers' `eval/` names."""
        if not self._enabled:
            return
        values = dict(zip(EVAL_METRIC_NAMES, (step, float(loss), int(tokens))))
        self._file.write(json.dumps({"time": time.time(), **values}) + "\n")
        for tracker in self._trackers:
            tracker.log({"eval/loss": float(loss), "eval/tokens": int(tokens)}, step)

    def flush(self):
        """Makes what was written so far durable where the run lives."""
        if not self._enabled:
            return
        self._file.flush()
        for tracker in self._trackers:
            tracker.flush()
        self._mirror.push(self._PUSHED)
        self._pushed = time.time()

    def close(self):
        if self._enabled:
            self._file.close()
            for tracker in self._trackers:
                tracker.close()
            self._mirror.push(self._PUSHED)
