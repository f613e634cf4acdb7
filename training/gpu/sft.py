"""LoRA SFT of Gemma 4 on GPU: PyTorch, TRL, PEFT, FSDP.

    bazel run //training/gpu:sft -- --config=h100x2.py --workdir=runs/h100x2
"""

from absl import app
from absl import flags

from tools import config_cli

_CONFIG = config_cli.define_config_flag(__file__)
_WORKDIR = flags.DEFINE_string("workdir", None, "Run directory: config, metrics, checkpoints.")


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    config_cli.report_not_implemented("training/gpu:sft", 5, _CONFIG.value)


if __name__ == "__main__":
    app.run(main)
