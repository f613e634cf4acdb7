"""The metrics of a run: metrics.jsonl (common/run_dir.py names it) and the config's
trackers, written by both training stacks."""

import json
import os
import time

from common import jsonl
from common import run_dir
from common import storage
from training.common import tracking


def _totals_at(records):
    """The totals of the last step record (the trainers write the record of each
    checkpoint's step); for a run directory written before the records carried
    them, the sums of the records (exact when every step was logged)."""
    steps = [r for r in records if "eval_loss" not in r]
    if steps and run_dir.TOTAL_NAMES[0] in steps[-1]:
        return {name: steps[-1][name] for name in run_dir.TOTAL_NAMES}
    sums = dict(zip(run_dir.TOTAL_NAMES, ("step_time_s", "tokens", "trained_tokens")))
    return {total: sum(r.get(name, 0) for r in steps) for total, name in sums.items()}


class MetricsWriter:
    """Appends step metrics to metrics.jsonl and the config's trackers (TensorBoard
    always; training/common/tracking.py), process 0 only.

    On resume, lines for steps after the restored step are dropped first, so
    the file holds each step once; so is a torn last line that a killed run
    left (common/jsonl.py). In a gs:// run both are written to a local mirror
    and uploaded by `flush` (called at checkpoints) and every PUSH_EVERY_S.

    `count` adds every step to the totals (run_dir.TOTAL_NAMES) that each record
    carries; a resume continues them from the record of its checkpoint's step,
    which the trainers always write.
    """

    PUSH_EVERY_S = 60
    # Uploaded every PUSH_EVERY_S; W&B's folder too at checkpoints and at the end.
    _PERIODIC = (run_dir.METRICS, run_dir.TENSORBOARD)
    _PUSHED = (*_PERIODIC, tracking.WANDB, tracking.STATE)

    def __init__(self, where, resume_step=0, enabled=True, config=None):
        """`where`: the run directory. `config`: the run's resolved config, whose
        `tracking` section picks the trackers (None: TensorBoard alone)."""
        self._enabled = enabled
        self.totals = dict.fromkeys(run_dir.TOTAL_NAMES, 0)
        if not enabled:
            return
        self._mirror = storage.Mirror(where, clear=True)
        self._mirror.pull([run_dir.METRICS, tracking.STATE])
        self._path = os.path.join(self._mirror.local, run_dir.METRICS)
        if os.path.exists(self._path):
            try:
                records, _ = jsonl.read(self._path)
            except jsonl.JsonlError as e:  # name the file where the run keeps it
                raise jsonl.JsonlError(str(e).replace(
                    self._path, storage.join(where, run_dir.METRICS))) from None
            kept = [r for r in records if r.get("step", 0) <= resume_step]
            with open(self._path + ".tmp", "w") as f:
                f.writelines(json.dumps(r) + "\n" for r in kept)
            os.replace(self._path + ".tmp", self._path)
            self.totals = _totals_at(kept)
        self._file = open(self._path, "a", buffering=1)
        self._trackers = tracking.open_trackers(config, self._mirror.local,
                                                where.rstrip("/").rsplit("/", 1)[-1])
        self._mirror.push([tracking.STATE])  # a W&B run id: a resume continues that run
        self._pushed = time.time()

    def count(self, seconds, tokens, trained_tokens):
        """Adds one step (every step, logged or not) to the totals."""
        for name, value in zip(run_dir.TOTAL_NAMES, (seconds, tokens, trained_tokens)):
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
        values = dict(zip(run_dir.EVAL_METRIC_NAMES, (step, float(loss), int(tokens))))
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
