"""LoRA SFT of Gemma 4 on TPU: JAX, Tunix, Qwix, Optax, Orbax, Grain.

    bazel run //training/tpu:sft -- --config=v5p8.py --workdir=runs/v5p8

Without --config it trains the tiny random Gemma 4 on the sample data on CPU
(8 virtual devices, mesh (2, 4)). Rerunning the same command resumes from the
newest checkpoint in --workdir. On several hosts --workdir is a gs:// URL (or,
with --shared_fs, a file system every host mounts).
"""

import logging

from absl import app
from absl import flags
from absl import logging as absl_logging

from common import cli
from common import config_cli
from common import run_dir

_CONFIG = config_cli.define_config_flag(__file__)
_WORKDIR = flags.DEFINE_string(
    "workdir", "runs/tpu-sft", "Run directory: config, metrics, checkpoints (resumed if "
    "present); a local folder or a gs://BUCKET/... URL.")
_SHARED_FS = flags.DEFINE_bool(
    "shared_fs", False, "With several hosts: --workdir is a local path that every host mounts "
    "(NFS, Filestore); otherwise such a run needs a gs:// --workdir.")


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    # Orbax and JAX log every save at INFO; keep the console to our own lines.
    absl_logging.set_verbosity(absl_logging.WARNING)
    logging.getLogger("training").setLevel(logging.INFO)
    workdir = config_cli.user_path(_WORKDIR.value)
    # Before JAX is even imported: a refusal takes a second or two.
    if not _SHARED_FS.value:
        run_dir.check_shared(workdir, _CONFIG.value.distributed.num_processes)
    run_dir.prepare(workdir)  # no bucket, no credentials, no write access: one line
    from training.tpu import trainer  # pylint: disable=import-outside-toplevel
    step = trainer.train(_CONFIG.value, workdir, shared_fs=_SHARED_FS.value)
    print(f"trained to step {step}; run directory {workdir}")


if __name__ == "__main__":
    cli.run(main)
