"""The two views of the prepared sequences: Grain for the TPU stack, `datasets` for TRL.

Both read the same arrays in the same order, so batch k holds the same tokens
and the same loss masks on both stacks (data/views_test.py checks it).

Grain: `grain_batches` yields global micro-batches in order; with several JAX
processes, each process gets its contiguous slice of every global batch, so the
slices concatenated in process order are exactly the single-process batch. The
iterator's state (`get_state`/`set_state`) is what checkpoints store.

Hugging Face: `hf_dataset` holds one row per sequence (`input_ids`,
`completion_mask`, `segment_ids`, `position_ids`), and `collate` turns rows into
the tensors a causal LM takes, with `labels` = -100 where nothing is trained.
"""

import grain
import numpy as np

from data import packing

IGNORE_INDEX = -100


def num_batches(sequences, batch_size):
    return len(sequences["input_ids"]) // batch_size  # drops the last partial batch


def grain_batches(sequences, batch_size, process_index=0, process_count=1):
    """A Grain MapDataset of this process's part of each global batch (dicts of arrays)."""
    if batch_size % process_count:
        raise ValueError(f"global batch {batch_size} does not split over {process_count} processes")
    local = batch_size // process_count

    def local_batch(step):
        start = step * batch_size + process_index * local
        return {name: sequences[name][start:start + local] for name in packing.FIELDS}

    return grain.MapDataset.range(num_batches(sequences, batch_size)).map(local_batch)


def hf_dataset(sequences):
    import datasets  # pylint: disable=import-outside-toplevel
    return datasets.Dataset.from_dict({
        "input_ids": sequences["input_ids"],
        "completion_mask": sequences["loss_mask"],
        "segment_ids": sequences["segment_ids"],
        "position_ids": sequences["positions"],
    })


def collate(rows):
    """Rows of `hf_dataset` -> the tensors a transformers causal LM takes.

    `labels` are the input ids where the loss mask is 1 and -100 elsewhere
    (transformers shifts them by one, as the TPU stack shifts its mask).
    `position_ids` restart at 0 with every segment and no `attention_mask` is
    passed: transformers then builds each layer's mask from the restarts (causal,
    within a segment, and within the window on sliding layers; for eager, sdpa
    and flex attention alike, and varlen lengths for flash attention), so a
    packed row's examples never see each other. Padding (position 0 after the
    last segment) is a run of one-token segments that nothing attends to.
    Padded rows take the same path: their one segment attends as under a
    padding mask.
    """
    import torch  # pylint: disable=import-outside-toplevel

    def stack(name):
        return torch.as_tensor(np.asarray([row[name] for row in rows], np.int64))

    input_ids = stack("input_ids")
    return {
        "input_ids": input_ids,
        "labels": torch.where(stack("completion_mask").bool(), input_ids, IGNORE_INDEX),
        "position_ids": stack("position_ids"),
    }
