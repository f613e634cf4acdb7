"""Shows what the data pipeline makes of a data set, before any training.

    bazel run //data:inspect -- --input=codev_r1_sft.jsonl --tokenizer=google/gemma-4-31B-it

Prints rows read, kept and dropped by reason (with row numbers), token-length
percentiles, the fraction of trained tokens, and how much of each sequence is
real tokens when padding vs packing at --max_seq_len. Fails if nothing would be
trained. --output_json writes the same figures as JSON.
"""

import json
import os

from absl import app
from absl import flags

from common import cli
from common import config_cli
from data import codev
from data import packing
from data import pipeline
from data import tokenizer as tokenizer_lib

_DEFAULTS = pipeline.default_config()
_INPUT = flags.DEFINE_string(
    "input", codev.SAMPLE, "A .jsonl or .parquet file, a Hub data set id, or 'sample'.")
_DATA_FILE = flags.DEFINE_string("data_file", _DEFAULTS.data_file, "File inside a Hub data set.")
_TOKENIZER = flags.DEFINE_string(
    "tokenizer", tokenizer_lib.EMBEDDED, "Tokenizer directory or Hub id; 'embedded' for the tiny one.")
_MAX_ROWS = flags.DEFINE_integer("max_rows", 0, "Read the first N rows only (0: all).")
_MAX_SEQ_LEN = flags.DEFINE_integer("max_seq_len", _DEFAULTS.max_seq_len, "Sequence length.")
_RESPONSE_POLICY = flags.DEFINE_enum(
    "response_policy", _DEFAULTS.response_policy, codev.RESPONSE_POLICIES, "Reasoning policy.")
_SYSTEM_POLICY = flags.DEFINE_enum(
    "system_policy", _DEFAULTS.system_policy, codev.SYSTEM_POLICIES, "System prompt policy.")
_LONG_ROWS = flags.DEFINE_enum(
    "long_rows", _DEFAULTS.long_rows, pipeline.LONG_ROW_POLICIES, "Rows over max_seq_len.")
_OUTPUT_JSON = flags.DEFINE_string("output_json", None, "Also write the figures to this file.")
_SHOW_ROWS = 10  # row numbers listed per drop reason in the text output


def figures(config, tokenizer):
    rows = codev.read_rows(config.source, config.data_file, config.max_rows)
    examples, report = pipeline.encode_rows(rows, pipeline.encoder_for(tokenizer, config), config)
    pad_id = tokenizer.pad_token_id
    return {
        "source": config.source,
        "rows_read": report.rows_read,
        "kept": report.kept,
        "dropped": {reason: report.dropped[reason] for reason in codev.SKIP_REASONS
                    if report.dropped[reason]},
        "dropped_rows": {reason: rows for reason, rows in report.dropped_rows.items()},
        "token_length": pipeline.length_percentiles(report.lengths),
        "total_tokens": report.total_tokens,
        "trained_tokens": report.trained_tokens,
        "trained_fraction": report.trained_tokens / max(report.total_tokens, 1),
        "max_seq_len": config.max_seq_len,
        "non_padding_fraction": {
            "padding": packing.non_padding_fraction(
                packing.pad(examples, config.max_seq_len, pad_id)),
            "packing": packing.non_padding_fraction(
                packing.pack(examples, config.max_seq_len, pad_id)),
        },
    }


def format_text(f):
    lines = [f"source          {f['source']}",
             f"rows read       {f['rows_read']}",
             f"kept            {f['kept']}",
             f"dropped         {sum(f['dropped'].values())}"]
    for reason, count in f["dropped"].items():
        rows = f["dropped_rows"][reason]
        listed = ", ".join(map(str, rows[:_SHOW_ROWS])) + (", ..." if len(rows) > _SHOW_ROWS else "")
        lines.append(f"  {reason:<13} {count}  (rows {listed})")
    lengths = f["token_length"]
    lines += [f"tokens per row  p50 {lengths['p50']}  p99 {lengths['p99']}  max {lengths['max']}",
              f"trained tokens  {f['trained_tokens']} of {f['total_tokens']} "
              f"({100 * f['trained_fraction']:.1f}%)",
              f"non-padding     padding {100 * f['non_padding_fraction']['padding']:.1f}%  "
              f"packing {100 * f['non_padding_fraction']['packing']:.1f}%  "
              f"at {f['max_seq_len']} tokens"]
    return "\n".join(lines)


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    config = pipeline.default_config()
    config.source = _INPUT.value if _INPUT.value == codev.SAMPLE else (
        config_cli.user_path(_INPUT.value) if os.path.exists(config_cli.user_path(_INPUT.value))
        else _INPUT.value)
    config.data_file = _DATA_FILE.value
    config.max_rows = _MAX_ROWS.value
    config.max_seq_len = _MAX_SEQ_LEN.value
    config.response_policy = _RESPONSE_POLICY.value
    config.system_policy = _SYSTEM_POLICY.value
    config.long_rows = _LONG_ROWS.value
    spec = _TOKENIZER.value
    if spec != tokenizer_lib.EMBEDDED and os.path.exists(config_cli.user_path(spec)):
        spec = config_cli.user_path(spec)
    result = figures(config, tokenizer_lib.load(spec))
    print(format_text(result))
    if _OUTPUT_JSON.value:
        path = config_cli.user_path(_OUTPUT_JSON.value)
        with open(path + ".tmp", "w") as out:
            json.dump(result, out, indent=2)
        os.replace(path + ".tmp", path)
    if result["trained_tokens"] == 0:
        raise codev.DataError(
            f"no token would be trained ({result['rows_read']} rows read, "
            f"{result['kept']} kept, dropped {result['dropped']})")


if __name__ == "__main__":
    cli.run(main)
