"""Preprocessing throughput of the data pipeline, per core.

    bazel run //data:benchmark -- --rows=2000

Builds a synthetic set with CodeV-R1's length profile (lognormal token counts
under the embedded tokenizer, mean ~922 and p99 ~2553; about 15% of the tokens
in the answer) in the CodeV-R1 schema, then times the whole path a training run
takes: reading, response policy, chat rendering, tokenizing, masks, shuffle,
packing. Tokenization runs on one thread (RAYON_NUM_THREADS=1 unless set), so
the figure is per core. The goal is 100x what the reference's TPU run consumed
(763 tok/s). Also reports the non-padding fraction of padding vs packing.
"""

import json
import os
import tempfile
import time

# The tokenizer's thread pool reads this once, at import: one core by default.
os.environ.setdefault("RAYON_NUM_THREADS", "1")

# pylint: disable=wrong-import-position
import numpy as np
from absl import app
from absl import flags

from common import cli
from common import config_cli
from data import codev
from data import sources
from data import synthetic
from data import packing
from data import pipeline
from data import tokenizer as tokenizer_lib

_ROWS = flags.DEFINE_integer("rows", 2000, "Synthetic rows.")
_MAX_SEQ_LEN = flags.DEFINE_integer("max_seq_len", 3072, "Sequence length.")
_OUTPUT_JSON = flags.DEFINE_string("output_json", None, "Also write the figures here.")

REFERENCE_TPU_TOKENS_PER_S = 763.0
GOAL_FACTOR = 100


def synthetic_rows(path, rows, tokenizer, seed=0, max_tokens=3000):
    """Rows of the CodeV-R1 schema whose token counts follow the real profile."""
    words = []
    for row in codev.read_rows(sources.SAMPLE):
        words += row.prompt.split() + row.response.split()
    tokens_per_word = len(tokenizer(" ".join(words))["input_ids"]) / len(words)
    rng = np.random.default_rng(seed)
    lengths = np.minimum(synthetic.lengths(rows, rng), max_tokens)
    with open(path, "w") as f:
        for length in lengths:
            picked = [words[i] for i in rng.choice(len(words), max(8, int(length / tokens_per_word)))]
            split = int(0.85 * len(picked))
            f.write(json.dumps({
                "system": "You are a Verilog expert.",
                "prompt": " ".join(picked[:split]),
                "response": "<think>\nreasoning\n</think>\n<answer>\n```verilog\n"
                            "module m(input a, output y);\n// " + " ".join(picked[split:]) +
                            "\nendmodule\n```\n</answer>",
            }) + "\n")


def run(rows, max_seq_len, workdir):
    tokenizer = tokenizer_lib.build_tokenizer()
    path = os.path.join(workdir, "synthetic.jsonl")
    synthetic_rows(path, rows, tokenizer)
    config = pipeline.default_config()
    config.source = path
    config.max_rows = 0
    config.max_seq_len = max_seq_len
    start = time.perf_counter()
    examples, report = pipeline.encode(config, tokenizer)
    ordered = pipeline.shuffled(examples, config.shuffle_seed)
    packed = packing.pack(ordered, max_seq_len, tokenizer.pad_token_id)
    seconds = time.perf_counter() - start
    padded = packing.pad(ordered, max_seq_len, tokenizer.pad_token_id)
    threads = int(os.environ["RAYON_NUM_THREADS"]) or os.cpu_count()
    per_core = report.total_tokens / seconds / threads
    return {
        "rows": report.rows_read, "kept": report.kept,
        "token_length": pipeline.length_percentiles(report.lengths),
        "mean_tokens": report.total_tokens / max(report.kept, 1),
        "trained_fraction": report.trained_tokens / max(report.total_tokens, 1),
        "seconds": seconds, "threads": threads,
        "tokens_per_s": report.total_tokens / seconds,
        "tokens_per_s_per_core": per_core,
        "x_reference_tpu_training": per_core / REFERENCE_TPU_TOKENS_PER_S,
        "goal_tokens_per_s_per_core": GOAL_FACTOR * REFERENCE_TPU_TOKENS_PER_S,
        "non_padding_fraction": {"padding": packing.non_padding_fraction(padded),
                                 "packing": packing.non_padding_fraction(packed)},
    }


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    with tempfile.TemporaryDirectory() as workdir:
        figures = run(_ROWS.value, _MAX_SEQ_LEN.value, workdir)
    print(json.dumps(figures, indent=2))
    print(f"\n{figures['tokens_per_s_per_core']:,.0f} tokens/s per core = "
          f"{figures['x_reference_tpu_training']:.0f}x the reference TPU training consumption "
          f"({REFERENCE_TPU_TOKENS_PER_S:.0f} tok/s); goal {GOAL_FACTOR}x")
    if _OUTPUT_JSON.value:
        with open(config_cli.user_path(_OUTPUT_JSON.value), "w") as f:
            json.dump(figures, f, indent=2)


if __name__ == "__main__":
    cli.run(main)
