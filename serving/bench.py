"""Sweeps a vLLM server with vLLM's own serving benchmark.

    bazel run //serving:bench -- --config=v6e8.py --base_url=http://127.0.0.1:8000
"""

from absl import app

from tools import config_cli

_CONFIG = config_cli.define_config_flag(__file__)


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    config_cli.report_not_implemented("serving:bench", 7, _CONFIG.value)


if __name__ == "__main__":
    app.run(main)
