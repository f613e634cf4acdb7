"""Fixed-length training sequences from variable-length examples: padding or packing.

Both produce the same four int32 arrays of shape [num_sequences, seq_len]:
  input_ids    token ids, `pad_id` after the last segment;
  loss_mask    1 where the token is a training target (never on padding);
  segment_ids  1, 2, ... for the examples in a sequence, 0 on padding;
  positions    0, 1, ... restarting at every segment (RoPE positions).
Attention and loss never cross segments: consumers build their masks from
`segment_ids`, and a segment's first token is never a target (it would be
predicted from the previous segment).

Padding puts one example per sequence. Packing fills sequences first-fit, in
example order, over a window of open sequences, so it is deterministic and
keeps the shuffled order roughly intact.
"""

import numpy as np

FIELDS = ("input_ids", "loss_mask", "segment_ids", "positions")
_OPEN_WINDOW = 64  # sequences still accepting examples while packing


def _empty(num_sequences, seq_len, pad_id):
    out = {name: np.zeros((num_sequences, seq_len), np.int32) for name in FIELDS}
    out["input_ids"].fill(pad_id)
    return out


def _place(out, row, start, segment, example):
    end = start + len(example)
    out["input_ids"][row, start:end] = example.input_ids
    out["loss_mask"][row, start:end] = example.loss_mask
    out["loss_mask"][row, start] = 0
    out["segment_ids"][row, start:end] = segment
    out["positions"][row, start:end] = np.arange(len(example), dtype=np.int32)
    return end


def _check_lengths(examples, seq_len):
    for i, example in enumerate(examples):
        if len(example) > seq_len:
            raise ValueError(f"example {i} has {len(example)} tokens > seq_len {seq_len}")


def pad(examples, seq_len, pad_id):
    """One example per sequence."""
    _check_lengths(examples, seq_len)
    out = _empty(len(examples), seq_len, pad_id)
    for row, example in enumerate(examples):
        _place(out, row, 0, 1, example)
    return out


def pack_assignment(lengths, seq_len, window=_OPEN_WINDOW):
    """For each example, (sequence index, start offset), first-fit over `window` open bins."""
    assignment = []
    open_bins = []  # [sequence index, used length, segments]
    num_bins = 0
    for length in lengths:
        for entry in open_bins:
            if entry[1] + length <= seq_len:
                break
        else:
            entry = [num_bins, 0, 0]
            num_bins += 1
            open_bins.append(entry)
            if len(open_bins) > window:
                open_bins.pop(0)
        assignment.append((entry[0], entry[1], entry[2] + 1))
        entry[1] += length
        entry[2] += 1
    return assignment, num_bins


def pack(examples, seq_len, pad_id):
    """Several examples per sequence, each its own segment."""
    _check_lengths(examples, seq_len)
    assignment, num_sequences = pack_assignment([len(e) for e in examples], seq_len)
    out = _empty(num_sequences, seq_len, pad_id)
    for example, (row, start, segment) in zip(examples, assignment):
        _place(out, row, start, segment, example)
    return out


def pad_rows(sequences, multiple, pad_id):
    """`sequences` with empty rows (all padding, nothing trained) appended up to a
    multiple of `multiple` rows: a validation set that fills whole batches."""
    rows = len(sequences["input_ids"])
    extra = _empty(-rows % multiple, sequences["input_ids"].shape[1], pad_id)
    return {name: np.concatenate([sequences[name], extra[name]]) for name in FIELDS}


def non_padding_fraction(sequences):
    return float((sequences["segment_ids"] > 0).mean()) if sequences["segment_ids"].size else 0.0
