"""LoRA SFT of Gemma 4 on TPU: JAX, Tunix, Qwix, Optax, Orbax, Grain.

    bazel run //training/tpu:sft -- --config=v5p8.py --workdir=runs/v5p8

Without --config it trains the tiny random Gemma 4 on the sample data on CPU
(8 virtual devices, mesh (2, 4)). Rerunning the same command resumes from the
newest checkpoint in --workdir.
"""

import logging

from absl import app
from absl import flags
from absl import logging as absl_logging

from common import cli
from common import config_cli

_CONFIG = config_cli.define_config_flag(__file__)
_WORKDIR = flags.DEFINE_string(
    "workdir", "runs/tpu-sft", "Run directory: config, metrics, checkpoints (resumed if present).")


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    # Orbax and JAX log every save at INFO; keep the console to our own lines.
    absl_logging.set_verbosity(absl_logging.WARNING)
    logging.getLogger("training").setLevel(logging.INFO)
    from training.tpu import trainer  # pylint: disable=import-outside-toplevel
    workdir = config_cli.user_path(_WORKDIR.value)
    step = trainer.train(_CONFIG.value, workdir)
    print(f"trained to step {step}; run directory {workdir}")


if __name__ == "__main__":
    cli.run(main)
