"""Turns training, serving and evaluation results into the TPU-vs-GPU comparison.

    bazel run //tools:report -- --runs=runs/v5p8,runs/h100x2 --out=report
"""

from absl import app

from tools import config_cli

_CONFIG = config_cli.define_config_flag(__file__)


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    # The report has no issue of its own yet; it parses its config only.
    config_cli.report_not_implemented("tools:report", "none yet", _CONFIG.value)


if __name__ == "__main__":
    app.run(main)
