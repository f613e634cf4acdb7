"""Rows -> conversations -> token ids + loss masks -> shuffled, padded or packed sequences.

This is the one implementation both training stacks consume (through the Grain
and Hugging Face views in data/views.py), so a row gets the same tokens and the
same trained positions on TPU and GPU.
"""

import collections
import dataclasses

import grain
import numpy as np
from ml_collections import config_dict

from data import chat
from data import formats
from data import packing
from data import sources

LONG_ROW_POLICIES = ("drop", "truncate")
_CHUNK = 512  # rows rendered and tokenized per batched tokenizer call


# The reference recipe's data: the first 10,000 rows of CodeV-R1's SFT file.
REFERENCE_SOURCE = "hf://datasets/zhuyaoyu/CodeV-R1-dataset/codev_r1_sft.jsonl"
REFERENCE_ROWS = 10_000
# `data.max_rows` of the reference configs: the reference's cap on the
# reference's source only; any other source is read whole.
REFERENCE_CAP = -1


def default_config():
    """The data fields of the training config (training/common/hparams.py adds them)."""
    c = config_dict.ConfigDict()
    # "sample", a file (.jsonl, .json, .parquet, .csv, .tsv; the text types also
    # .gz, .bz2, .xz or .zst), a folder of such files or a glob over them (split
    # by their names: data/sources.py), or a folder written by datasets, local or
    # gs://; a file, folder or glob of a Hub data set as
    # hf://datasets/OWNER/NAME/PATH; or a Hub data set id read by datasets.
    c.source = REFERENCE_SOURCE
    # messages, prompt_completion, alpaca, sharegpt, codev or text (data/formats.py);
    # auto: from the columns.
    c.format = "auto"
    c.columns = ""  # renames columns first: "question=prompt,answer=completion"
    c.roles = ""  # ShareGPT role names beyond the usual ones: "bot=assistant,person=user"
    c.encoding = "utf-8"  # of text files (JSON, JSON Lines, CSV, TSV), compressed or not
    c.subset = ""  # a Hub data set's subset (its config name)
    c.split = "train"  # the split of a Hub data set or of a datasets folder
    # The first N rows of the source (0: all), the rest counted as capped; -1
    # (REFERENCE_CAP, the reference configs'): REFERENCE_ROWS of REFERENCE_SOURCE
    # and every row of any other source.
    c.max_rows = 0
    c.shuffle_seed = 42
    c.max_seq_len = 3072
    c.epochs = 1
    c.turns = "all"  # train every assistant turn, or only the last ("last")
    c.response_policy = "strip_thinking"  # codev profile: or keep_thinking
    c.system_policy = "auto"  # keep or drop; auto drops them for codev only
    # A validation set for eval_loss: a seeded fraction of the rows held out, or
    # another source (a file, folder or Hub id; same format settings), or a
    # split of the source (or of eval_source). Empty/0: no validation.
    c.eval_fraction = 0.0
    c.eval_source = ""
    c.eval_split = ""
    c.long_rows = "drop"  # or truncate
    c.packing = False
    return c


@dataclasses.dataclass
class Report:
    """What happened to the rows: the figures `//data:inspect` prints."""
    rows_read: int = 0
    max_rows: int = 0  # the cap applied (row_cap), 0 for none
    not_read: int = 0  # rows of the source past the cap: capped, never read
    truncated: int = 0  # rows cut to data.max_seq_len (data.long_rows=truncate)
    files: list = dataclasses.field(default_factory=list)  # the data files read, in order
    left_aside: dict = dataclasses.field(default_factory=dict)  # folder/glob files not read
    format: str = ""
    kept: int = 0
    dropped: dict = dataclasses.field(default_factory=lambda: collections.Counter())
    dropped_rows: dict = dataclasses.field(default_factory=lambda: collections.defaultdict(list))
    first_detail: dict = dataclasses.field(default_factory=dict)  # reason -> an example
    lengths: list = dataclasses.field(default_factory=list)
    trained_tokens: int = 0

    def drop(self, number, reason, detail=""):
        self.dropped[reason] += 1
        self.dropped_rows[reason].append(number)
        if detail and reason not in self.first_detail:
            self.first_detail[reason] = f"row {number}: {detail}"

    @property
    def total_tokens(self):
        return int(sum(self.lengths))


def encode_rows(conversations, encoder, config, progress=None):
    """Encodes (row number, Conversation) and `Skip` items into examples; bad rows are
    counted, never raised."""
    if config.long_rows not in LONG_ROW_POLICIES:
        raise sources.DataError(f"long_rows must be one of {LONG_ROW_POLICIES}, got {config.long_rows!r}")
    report = Report()
    examples = []
    pending = []  # (row number, conversation)

    def flush():
        encoded = []
        try:
            encoded = encoder.encode_many([c for _, c in pending])
        except chat.TemplateError:  # find the rows the template cannot render, one by one
            for number, conversation in pending:
                try:
                    encoded += encoder.encode_many([conversation])
                except chat.TemplateError as e:
                    report.drop(number, sources.TEMPLATE, str(e))
                    encoded.append(None)
        for (number, _), example in zip(pending, encoded):
            if example is None:
                continue
            if np.isin(example.input_ids, encoder.media_ids).any():
                report.drop(number, sources.MEDIA_TOKEN,
                            "expected text only, found a media placeholder token (an image, "
                            "audio or video slot) in it")
                continue
            if len(example) > config.max_seq_len:
                if config.long_rows == "drop":
                    report.drop(number, sources.TOO_LONG,
                                f"expected at most data.max_seq_len={config.max_seq_len} tokens, "
                                f"found {len(example)} (or set data.long_rows=truncate)")
                    continue
                example = chat.Encoded(example.input_ids[:config.max_seq_len],
                                       example.loss_mask[:config.max_seq_len])
                report.truncated += 1
                if not example.loss_mask.any():
                    report.drop(number, sources.TOO_LONG,
                                f"expected a trained token in the first {config.max_seq_len} "
                                f"tokens, found none of {len(example)}")
                    continue
            report.kept += 1
            report.lengths.append(len(example))
            report.trained_tokens += int(example.loss_mask.sum())
            examples.append(example)
        if progress is not None:
            progress.update(len(pending))
        pending.clear()

    for item in conversations:
        report.rows_read += 1
        if isinstance(item, sources.Skip):
            report.drop(item.number, item.reason, item.detail)
        else:
            pending.append(item)
        if len(pending) >= _CHUNK:
            flush()
    flush()
    report.format = getattr(conversations, "format", None) or ""
    records = getattr(conversations, "records", None)
    if records is not None:
        report.not_read, report.max_rows = records.not_read, records.max_rows
        report.files, report.left_aside = list(records.files), dict(records.left_aside)
    return examples, report


def row_cap(config):
    """The number of rows of `config.source` read (0: all): `max_rows`, with
    REFERENCE_CAP resolved for the source."""
    if config.max_rows == REFERENCE_CAP:
        return REFERENCE_ROWS if config.source == REFERENCE_SOURCE else 0
    if config.max_rows < 0:
        raise sources.DataError(f"data.max_rows={config.max_rows}: a number of rows, 0 for "
                                f"all (or {REFERENCE_CAP}: the reference's {REFERENCE_ROWS:,} "
                                "rows of its CodeV-R1 file, all of any other source)")
    return config.max_rows


def encoder_for(tokenizer, config):
    """The chat encoder for `config`: thinking mode on when reasoning is kept."""
    kwargs = {"enable_thinking": True} if config.response_policy == "keep_thinking" else {}
    return chat.ChatEncoder(tokenizer, turns=config.turns, **kwargs)


def encode(config, tokenizer, progress=None):
    """Reads and encodes the data set `config` describes: (examples, Report)."""
    return encode_rows(formats.Conversations(config, row_cap(config)),
                       encoder_for(tokenizer, config), config, progress)


def shuffled(examples, seed, epochs=1):
    """Examples in training order: a Grain shuffle, reshuffled every epoch."""
    order = grain.MapDataset.range(len(examples)).shuffle(seed=seed).repeat(epochs)
    return [examples[order[i]] for i in range(len(order))]


def to_sequences(examples, config, pad_id):
    if config.packing:
        return packing.pack(examples, config.max_seq_len, pad_id)
    return packing.pad(examples, config.max_seq_len, pad_id)


@dataclasses.dataclass
class Prepared:
    sequences: dict  # packing.FIELDS -> int32 [num_sequences, max_seq_len]
    report: Report
    eval_sequences: dict = None  # the validation set, padded or packed; None without one
    eval_report: Report = None


def held_out(examples, fraction, seed):
    """(kept for training, held out): a seeded `fraction` of `examples`, at least one."""
    if not 0 < fraction < 1:
        raise sources.DataError(f"eval_fraction must be in (0, 1), got {fraction}")
    count = max(1, round(fraction * len(examples)))
    if count >= len(examples):
        raise sources.DataError(f"eval_fraction {fraction} of {len(examples)} rows leaves "
                                "nothing to train on")
    chosen = set(np.random.default_rng(seed).permutation(len(examples))[:count].tolist())
    return ([e for i, e in enumerate(examples) if i not in chosen],
            [e for i, e in enumerate(examples) if i in chosen])


def _summary(examples):
    return Report(rows_read=len(examples), kept=len(examples),
                  lengths=[len(e) for e in examples],
                  trained_tokens=sum(int(e.loss_mask.sum()) for e in examples))


def split_validation(config, tokenizer, examples):
    """(training examples, validation examples, validation report); None without one."""
    other = bool(config.eval_source or config.eval_split)
    if config.eval_fraction and other:
        raise sources.DataError("set data.eval_fraction, or data.eval_source/eval_split, "
                                "not both")
    if config.eval_fraction:
        examples, held = held_out(examples, config.eval_fraction, config.shuffle_seed)
        return examples, held, _summary(held)
    if not other:
        return examples, None, None
    eval_config = config_dict.ConfigDict(config.to_dict())
    eval_config.update(source=config.eval_source or config.source,
                       split=config.eval_split or config.split, max_rows=0)  # whole
    held, report = encode(eval_config, tokenizer)
    if report.trained_tokens == 0:
        raise sources.DataError(
            f"no token to evaluate on in {eval_config.source} (split {eval_config.split}): "
            f"{report.rows_read} rows read, dropped {dict(report.dropped)}")
    return examples, held, report


def prepare(config, tokenizer, progress=None):
    """Reads, encodes, shuffles and pads/packs the data set `config` describes, and its
    validation set (in source order) if it has one."""
    examples, report = encode(config, tokenizer, progress)
    if report.trained_tokens == 0:
        raise sources.DataError(
            f"no token to train on: {report.rows_read} rows read, {report.kept} kept, "
            f"dropped {dict(report.dropped)}")
    examples, held, eval_report = split_validation(config, tokenizer, examples)
    ordered = shuffled(examples, config.shuffle_seed, config.epochs)
    pad_id = tokenizer.pad_token_id
    return Prepared(to_sequences(ordered, config, pad_id), report,
                    None if held is None else to_sequences(held, config, pad_id), eval_report)


def length_percentiles(lengths):
    """p50, p99 and max of `lengths` (nearest rank); zeros when there are none."""
    names, percentiles = ("p50", "p99", "max"), (50, 99, 100)
    if not lengths:
        return dict.fromkeys(names, 0)
    values = np.percentile(np.asarray(lengths), percentiles, method="inverted_cdf")
    return {name: int(v) for name, v in zip(names, values)}
