"""VerilogEval v2 spec-to-rtl: sample through an OpenAI-compatible server, judge
with iverilog in a sandbox, report unbiased pass@k.

    bazel run //eval:verilog_eval -- --base_url=http://127.0.0.1:8000/v1 --model=m --out_dir=out
"""

from absl import app

from tools import config_cli

_CONFIG = config_cli.define_config_flag(__file__)


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    config_cli.report_not_implemented("eval:verilog_eval", 8, _CONFIG.value)


if __name__ == "__main__":
    app.run(main)
