"""Shows what the data pipeline makes of a data set, before any training.

    bazel run //data:inspect -- --data.source=my_chats.jsonl --tokenizer=google/gemma-4-31B-it

`--data` is the training config's data section (data/pipeline.py), with the
same fields and defaults except the source (`sample`): `--data.format`,
`--data.columns`, `--data.max_seq_len`, ... Prints the format, rows read, kept
and dropped by reason (with row numbers and an example of why), rows left out
by `max_rows`, token-length percentiles, the fraction of trained tokens, and
how much of each sequence is real tokens when padding vs packing. Fails if
nothing would be trained. --output_json writes the same figures as JSON.
"""

import os

from absl import app
from absl import flags
from ml_collections import config_flags

from common import cli
from common import config_cli
from common import storage
from data import packing
from data import pipeline
from data import sources
from data import tokenizer as tokenizer_lib


def _defaults():
    config = pipeline.default_config()
    config.source = sources.SAMPLE
    return config


_DATA = config_flags.DEFINE_config_dict("data", _defaults(), "The data config to inspect.")
_TOKENIZER = flags.DEFINE_string(
    "tokenizer", tokenizer_lib.EMBEDDED, "Tokenizer directory or Hub id; 'embedded' for the tiny one.")
_OUTPUT_JSON = flags.DEFINE_string("output_json", None, "Also write the figures to this file.")
_SHOW_ROWS = 10  # row numbers listed per drop reason in the text output


def figures(config, tokenizer):
    examples, report = pipeline.encode(config, tokenizer)
    pad_id = tokenizer.pad_token_id
    return {
        "source": config.source,
        "format": report.format,
        "rows_read": report.rows_read,
        "max_rows": report.max_rows,  # the cap (0: none)
        "rows_capped": report.not_read,  # rows of the source past it, never read
        "truncated": report.truncated,
        "files": report.files,  # the data files read, in order
        "left_aside": report.left_aside,  # files of the folder or glob not read, and why
        "kept": report.kept,
        "dropped": {reason: report.dropped[reason] for reason in sources.SKIP_REASONS
                    if report.dropped[reason]},
        "dropped_rows": {reason: rows for reason, rows in report.dropped_rows.items()},
        "dropped_why": dict(report.first_detail),
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
    lines = [f"source          {f['source']}"]
    if len(f["files"]) > 1 or f["left_aside"]:
        shown = [os.path.basename(p) for p in f["files"][:_SHOW_ROWS]]
        lines.append(f"files read      {len(f['files'])}: {', '.join(shown)}"
                     + (", ..." if len(f["files"]) > _SHOW_ROWS else ""))
        whys = {}
        for name, why in f["left_aside"].items():
            whys.setdefault(why, []).append(os.path.basename(name))
        for why, names in sorted(whys.items()):
            lines.append(f"  left aside    {len(names)} ({why}): {', '.join(names[:_SHOW_ROWS])}"
                         + (", ..." if len(names) > _SHOW_ROWS else ""))
    lines += [
             f"format          {f['format']}",
             f"rows read       {f['rows_read']}"
             + (f"  ({f['rows_capped']} more not read: capped at data.max_rows="
                f"{f['max_rows']})" if f["rows_capped"] else "  (every row: none capped)"),
             f"kept            {f['kept']}",
             f"dropped         {sum(f['dropped'].values())}"]
    for reason, count in f["dropped"].items():
        rows = f["dropped_rows"][reason]
        listed = ", ".join(map(str, rows[:_SHOW_ROWS])) + (", ..." if len(rows) > _SHOW_ROWS else "")
        lines.append(f"  {reason:<13} {count}  (rows {listed})")
        if reason in f["dropped_why"]:
            lines.append(f"                e.g. {f['dropped_why'][reason]}")
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
    config = _DATA.value
    spec = _TOKENIZER.value
    if spec != tokenizer_lib.EMBEDDED and os.path.exists(config_cli.user_path(spec)):
        spec = config_cli.user_path(spec)
    result = figures(config, tokenizer_lib.load(spec))
    print(format_text(result))
    if _OUTPUT_JSON.value:
        storage.write_json(config_cli.user_path(_OUTPUT_JSON.value), result)
    if result["trained_tokens"] == 0:
        raise sources.DataError(
            f"no token would be trained ({result['rows_read']} rows read, "
            f"{result['kept']} kept, dropped {result['dropped']})")


if __name__ == "__main__":
    cli.run(main)
