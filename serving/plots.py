"""Throughput and TTFT against request rate, one panel per input length, one
line per run, so that two runs (TPU and GPU, say) overlay.

    bazel run //serving:plot -- --runs=out/tpu,out/gpu --out=plots
"""

import json
import math
import os

from absl import app
from absl import flags

from common import cli

_RUNS = flags.DEFINE_list("runs", None, "Sweep output directories (each with summary.json).")
_OUT = flags.DEFINE_string("out", "plots", "Where to write the PNG files.")

FIGURES = (("output_throughput", "output tokens/s", "throughput.png"),
           ("median_ttft_ms", "median TTFT (ms)", "ttft.png"))


def _label(summary, path):
    record = summary.get("record", {})
    return record.get("label") or record.get("machine") or os.path.basename(path.rstrip("/"))


def plot(run_dirs, out_dir):
    """Writes throughput.png and ttft.png; returns their paths."""
    import matplotlib  # pylint: disable=import-outside-toplevel
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # pylint: disable=import-outside-toplevel
    runs = []
    for path in run_dirs:
        summary = _load(path)
        runs.append((_label(summary, path), summary))
    lengths = sorted({int(n) for _, s in runs for n in s["input_lengths"]})
    os.makedirs(out_dir, exist_ok=True)
    written = []
    for metric, axis, filename in FIGURES:
        figure, axes = plt.subplots(1, len(lengths), figsize=(4 * len(lengths), 3.4),
                                    squeeze=False)
        for panel, length in zip(axes[0], lengths):
            for label, summary in runs:
                points = [p for p in summary["input_lengths"].get(str(length), {}).get(
                    "points", []) if p["status"] == "ok"]
                rates = [p["rate"] for p in points]
                finite = [r for r in rates if not math.isinf(r)]
                top = 2 * max(finite) if finite else 1.0
                xs = [top if math.isinf(r) else r for r in rates]
                panel.plot(xs, [p[metric] for p in points], marker="o", label=label)
            panel.set_title(f"input {length} tokens")
            panel.set_xscale("log", base=2)
            panel.set_xlabel("request rate (req/s; rightmost: unlimited)")
            panel.set_ylabel(axis)
            panel.grid(True, alpha=0.3)
        axes[0][0].legend()
        figure.tight_layout()
        path = os.path.join(out_dir, filename)
        figure.savefig(path, dpi=110)
        plt.close(figure)
        written.append(path)
    return written


def _load(path):
    summary = os.path.join(path, "summary.json")
    if not os.path.exists(summary):
        raise cli.UserError(f"{path} is not a serving sweep (no summary.json)")
    with open(summary) as f:
        return json.load(f)


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    from common import config_cli  # pylint: disable=import-outside-toplevel
    for path in plot([config_cli.user_path(r) for r in _RUNS.value],
                     config_cli.user_path(_OUT.value)):
        print(path)


if __name__ == "__main__":
    cli.run(main)
