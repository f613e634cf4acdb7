"""Exports a TPU run's Orbax LoRA checkpoint as a PEFT adapter and/or a merged model.

    bazel run //conversion:export -- --run_dir=runs/v5p8 --format=both --output_dir=out
"""

from absl import app

from tools import config_cli

_CONFIG = config_cli.define_config_flag(__file__)


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    config_cli.report_not_implemented("conversion:export", 6, _CONFIG.value)


if __name__ == "__main__":
    app.run(main)
