"""LoRA SFT of Gemma 4 on TPU: JAX, Tunix, Qwix, Optax, Orbax, Grain.

    bazel run //training/tpu:sft -- --config=v5p8.py --workdir=runs/v5p8
"""

from absl import app
from absl import flags

from tools import config_cli

_CONFIG = config_cli.define_config_flag(__file__)
_WORKDIR = flags.DEFINE_string("workdir", None, "Run directory: config, metrics, checkpoints.")


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    # Until the TPU training issue (#4) lands, the main job runs this far only.
    config_cli.report_not_implemented("training/tpu:sft", 4, _CONFIG.value, exit_code=0)


if __name__ == "__main__":
    app.run(main)
