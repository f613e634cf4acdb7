"""The run directory both training stacks write, and conversion and the report read.

    RUN_DIR/
      config.json        the resolved config (common/config_cli.py)
      run.json           what the run used: base model path, stack, effective
                         batch, steps, devices, tool versions; and `segments`,
                         the billed life of each process (training/common/billing.py)
      metrics.jsonl      one JSON object per logged step (`step`, `loss`, ...)
      tensorboard/       the same metrics as TensorBoard events
      wandb/, tracking.json   W&B's files and run id, when the config asks for
                         W&B (training/common/tracking.py)
      (metrics.jsonl and the trackers are written by training/common/metrics.py)
      checkpoints/       Orbax (TPU) or HF Trainer/PEFT (GPU) checkpoints
      base_model/        the tiny random base of CPU runs (real runs name a Hub
                         id or directory in run.json instead)

Both stacks log the same metric names (METRIC_NAMES), so runs compare directly.
RUN_DIR is a local folder or a gs:// URL (common/storage.py); a run of several
processes (hosts) needs one they all share: a URL, or a shared file system.
"""

import importlib.metadata

from common import cli
from common import storage

CONFIG = "config.json"
RUN_INFO = "run.json"
METRICS = "metrics.jsonl"
TENSORBOARD = "tensorboard"
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


def check_shared(path, hosts, bucket_ok=True):
    """Refuses a local run directory for a run on several hosts (unless declared
    shared): each host would write its own checkpoints, and no host could resume.
    `bucket_ok`: whether the stack can share a gs:// run directory instead (the
    GPU stack cannot: every node writes its own checkpoint shards to disk)."""
    if hosts > 1 and not storage.is_url(path):
        instead = (f"Use a gs://BUCKET/... URL, or pass {SHARED_FS_FLAG} if {path} is a "
                   "file system all hosts mount (NFS, Filestore)" if bucket_ok else
                   f"Pass {SHARED_FS_FLAG} if {path} is a file system all machines mount "
                   "(NFS, Filestore, a bucket mounted with Cloud Storage FUSE)")
        raise RunDirError(
            f"--workdir={path} is a local folder and this run has {hosts} hosts: each would "
            f"keep its own checkpoints and none could resume. {instead}")


def package_versions(names):
    """{distribution: version}, for the records a run or an export leaves."""
    return {name: importlib.metadata.version(name) for name in names}


def read_run_info(run_dir):
    path = storage.join(run_dir, RUN_INFO)
    if not storage.exists(path):
        raise RunDirError(f"{run_dir} is not a run directory (no {RUN_INFO})")
    return storage.read_json(path)
