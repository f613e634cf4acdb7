"""Turns training, serving and evaluation results into the TPU-vs-GPU comparison.

    bazel run //tools:report -- --runs=runs/v5p8,runs/h100x2 --out=report

Not implemented yet (issue #15): it parses its flags and config, says so and
exits 1.
"""

from absl import app
from absl import flags

from tools.common import cli
from tools.common import config_cli

_CONFIG = config_cli.define_config_flag(__file__)
_RUNS = flags.DEFINE_list("runs", None, "Run directories: training, serving sweeps, evals.")
_OUT = flags.DEFINE_string("out", None, "Where the report is written.")


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    raise cli.UserError("//tools:report is not implemented yet (issue #15); nothing was "
                        f"written to {config_cli.user_path(_OUT.value)}")


if __name__ == "__main__":
    # Here, not at import: tests import this module under their own flags.
    flags.mark_flags_as_required(["runs", "out"])
    cli.run(main)
