"""Serves a (fine-tuned) Gemma 4 with vLLM on TPU, GPU or CPU.

    bazel run //serving:serve -- --config=v6e8.py --model=out/merged
"""

from absl import app

from tools import config_cli

_CONFIG = config_cli.define_config_flag(__file__)


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    config_cli.report_not_implemented("serving:serve", 7, _CONFIG.value)


if __name__ == "__main__":
    app.run(main)
