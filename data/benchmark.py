"""Preprocessing throughput of the data pipeline, per core.

    bazel run //data:benchmark -- --rows=2000

Reads `synthetic:ROWS` (data/synthetic.py: CodeV-R1 rows with the real data
set's length profile under the embedded tokenizer, mean ~922 and p99 ~2553
tokens; about 15% of the tokens in the answer), then times the whole path a training run
takes: reading, response policy, chat rendering, tokenizing, masks, shuffle,
packing. Tokenization runs on one thread (RAYON_NUM_THREADS=1 unless set), so
the figure is per core. The goal is 100x what the reference's TPU run consumed
(763 tok/s). Also reports the non-padding fraction of padding vs packing.
"""

import json
import os
import time

# The tokenizer's thread pool reads this once, at import: one core by default.
os.environ.setdefault("RAYON_NUM_THREADS", "1")

# pylint: disable=wrong-import-position
from absl import app
from absl import flags

from common import cli
from common import config_cli
from data import sources
from data import packing
from data import pipeline
from data import tokenizer as tokenizer_lib

_ROWS = flags.DEFINE_integer("rows", 2000, "Synthetic rows.")
_MAX_SEQ_LEN = flags.DEFINE_integer("max_seq_len", 3072, "Sequence length.")
_OUTPUT_JSON = flags.DEFINE_string("output_json", None, "Also write the figures here.")

REFERENCE_TPU_TOKENS_PER_S = 763.0
GOAL_FACTOR = 100


def run(rows, max_seq_len):
    tokenizer = tokenizer_lib.build_tokenizer()
    config = pipeline.default_config()
    config.source = f"{sources.SYNTHETIC}{rows}"
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
    figures = run(_ROWS.value, _MAX_SEQ_LEN.value)
    print(json.dumps(figures, indent=2))
    print(f"\n{figures['tokens_per_s_per_core']:,.0f} tokens/s per core = "
          f"{figures['x_reference_tpu_training']:.0f}x the reference TPU training consumption "
          f"({REFERENCE_TPU_TOKENS_PER_S:.0f} tok/s); goal {GOAL_FACTOR}x")
    if _OUTPUT_JSON.value:
        with open(config_cli.user_path(_OUTPUT_JSON.value), "w") as f:
            json.dump(figures, f, indent=2)


if __name__ == "__main__":
    cli.run(main)
