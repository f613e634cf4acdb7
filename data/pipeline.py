"""CodeV-R1 rows -> chat -> token ids + loss masks -> shuffled, padded or packed sequences.

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
from data import codev
from data import packing

LONG_ROW_POLICIES = ("drop", "truncate")
_CHUNK = 512  # rows rendered and tokenized per batched tokenizer call


def default_config():
    """The data fields of the training config (training/common/hparams.py adds them)."""
    c = config_dict.ConfigDict()
    c.source = "zhuyaoyu/CodeV-R1-dataset"  # Hub id, local .jsonl/.parquet, or "sample"
    c.data_file = "codev_r1_sft.jsonl"
    c.max_rows = 10_000  # the first N rows of the source; 0 reads all
    c.shuffle_seed = 42
    c.max_seq_len = 3072
    c.epochs = 1
    c.response_policy = "strip_thinking"  # or keep_thinking
    c.system_policy = "drop"  # or keep
    c.long_rows = "drop"  # or truncate
    c.packing = False
    return c


@dataclasses.dataclass
class Report:
    """What happened to the rows: the figures `//data:inspect` prints."""
    rows_read: int = 0
    kept: int = 0
    dropped: dict = dataclasses.field(default_factory=lambda: collections.Counter())
    dropped_rows: dict = dataclasses.field(default_factory=lambda: collections.defaultdict(list))
    lengths: list = dataclasses.field(default_factory=list)
    trained_tokens: int = 0

    def drop(self, number, reason):
        self.dropped[reason] += 1
        self.dropped_rows[reason].append(number)

    @property
    def total_tokens(self):
        return int(sum(self.lengths))


def encode_rows(rows, encoder, config, progress=None):
    """Encodes `Row`/`Skip` items into examples; bad rows are counted, never raised."""
    if config.long_rows not in LONG_ROW_POLICIES:
        raise codev.DataError(f"long_rows must be one of {LONG_ROW_POLICIES}, got {config.long_rows!r}")
    report = Report()
    examples = []
    pending = []  # (row number, messages)

    def flush():
        for (number, _), example in zip(pending, encoder.encode_many([m for _, m in pending])):
            if np.isin(example.input_ids, encoder.media_ids).any():
                report.drop(number, codev.MEDIA_TOKEN)
                continue
            if len(example) > config.max_seq_len:
                if config.long_rows == "drop":
                    report.drop(number, codev.TOO_LONG)
                    continue
                example = chat.Encoded(example.input_ids[:config.max_seq_len],
                                       example.loss_mask[:config.max_seq_len])
                if not example.loss_mask.any():
                    report.drop(number, codev.TOO_LONG)
                    continue
            report.kept += 1
            report.lengths.append(len(example))
            report.trained_tokens += int(example.loss_mask.sum())
            examples.append(example)
        if progress is not None:
            progress.update(len(pending))
        pending.clear()

    for item in rows:
        report.rows_read += 1
        if isinstance(item, codev.Skip):
            report.drop(item.number, item.reason)
            continue
        try:
            messages = codev.to_messages(item, config.response_policy, config.system_policy)
        except codev.SkipRow as skip:
            report.drop(item.number, skip.reason)
            continue
        pending.append((item.number, messages))
        if len(pending) >= _CHUNK:
            flush()
    flush()
    return examples, report


def encoder_for(tokenizer, config):
    """The chat encoder for `config`: thinking mode on when reasoning is kept."""
    kwargs = {"enable_thinking": True} if config.response_policy == "keep_thinking" else {}
    return chat.ChatEncoder(tokenizer, **kwargs)


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


def prepare(config, tokenizer, progress=None):
    """Reads, encodes, shuffles and pads/packs the data set `config` describes."""
    rows = codev.read_rows(config.source, config.data_file, config.max_rows)
    examples, report = encode_rows(rows, encoder_for(tokenizer, config), config, progress)
    if report.trained_tokens == 0:
        raise codev.DataError(
            f"no token to train on: {report.rows_read} rows read, {report.kept} kept, "
            f"dropped {dict(report.dropped)}")
    ordered = shuffled(examples, config.shuffle_seed, config.epochs)
    return Prepared(to_sequences(ordered, config, tokenizer.pad_token_id), report)


def length_percentiles(lengths):
    """p50, p99 and max of `lengths` (nearest rank); zeros when there are none."""
    names, percentiles = ("p50", "p99", "max"), (50, 99, 100)
    if not lengths:
        return dict.fromkeys(names, 0)
    values = np.percentile(np.asarray(lengths), percentiles, method="inverted_cdf")
    return {name: int(v) for name, v in zip(names, values)}
