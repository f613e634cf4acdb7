"""Reads the history of a W&B offline run (RUN_DIR/wandb/offline-run-*/run-ID.wandb),
for tests: what `wandb sync` would upload, without an account or a network.

The file is W&B's transaction log: a 7-byte header (":W&B", a magic number, a
version), then LevelDB's log format (32 KiB blocks of chunks, each with a 7-byte
header: CRC, length, type full/first/middle/last), each record one
`wandb_internal_pb2.Record` protocol buffer.
"""

import glob
import json
import os
import struct

_BLOCK = 32 * 1024
_CHUNK_HEADER = 7
_FULL, _FIRST, _MIDDLE, _LAST = 1, 2, 3, 4


def env(tmp):
    """W&B's own folders in a test's tmp dir (the sandbox keeps $HOME read-only)."""
    return {name: os.path.join(tmp, name.lower()) for name in
            ("WANDB_CONFIG_DIR", "WANDB_CACHE_DIR", "WANDB_DATA_DIR")}


def run_files(run_dir):
    """The offline runs' log files under run_dir/wandb/, oldest first (by when they
    were last written: two runs started in one second have names W&B orders
    otherwise)."""
    return sorted(glob.glob(os.path.join(run_dir, "wandb", "offline-run-*", "run-*.wandb")),
                  key=os.path.getmtime)


def _records(path):
    with open(path, "rb") as f:
        data = f.read()
    if data[:4] != b":W&B":
        raise ValueError(f"{path} is not a W&B run log")
    pos, pending = 7, b""
    while pos + _CHUNK_HEADER <= len(data):
        left = _BLOCK - pos % _BLOCK
        if left < _CHUNK_HEADER:  # a block's padding
            pos += left
            continue
        _, length, kind = struct.unpack("<IHB", data[pos:pos + _CHUNK_HEADER])
        if kind == 0:
            pos += left
            continue
        chunk = data[pos + _CHUNK_HEADER:pos + _CHUNK_HEADER + length]
        pos += _CHUNK_HEADER + length
        if kind == _FULL:
            yield chunk
        elif kind == _FIRST:
            pending = chunk
        elif kind == _MIDDLE:
            pending += chunk
        elif kind == _LAST:
            yield pending + chunk
            pending = b""


def read(path):
    """(run: {id, name, project, tags, config}, history: [{metric: value, '_step': n}])."""
    from wandb.proto import wandb_internal_pb2  # pylint: disable=import-outside-toplevel
    run, history = {}, []
    for data in _records(path):
        record = wandb_internal_pb2.Record()
        record.ParseFromString(data)
        kind = record.WhichOneof("record_type")
        if kind == "run":
            config = {item.key: json.loads(item.value_json) for item in record.run.config.update}
            run = {"id": record.run.run_id, "name": record.run.display_name,
                   "project": record.run.project, "tags": list(record.run.tags),
                   "config": {k: v.get("value", v) if isinstance(v, dict) else v
                              for k, v in config.items()}}
        elif kind == "history":
            history.append({item.key or "/".join(item.nested_key): json.loads(item.value_json)
                            for item in record.history.item})
    return run, history


def series(history, name):
    """{step: value} of one metric."""
    return {int(row["_step"]): row[name] for row in history if name in row}


def jsonl_series(records, name):
    """The same {step: value}, from metrics.jsonl records (loss for "train/" +
    "loss", eval_loss for "eval/" + "loss"), to compare with `series`."""
    key = name.replace("train/", "").replace("eval/", "eval_")
    return {r["step"]: r[key] for r in records if key in r}


def assert_holds_metrics(test, run_dir, steps):
    """A stack's run with W&B offline (tests): one offline run, named after the run
    directory, whose loss, learning rate, token and eval series are metrics.jsonl's."""
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        records = [json.loads(line) for line in f]
    files = run_files(run_dir)
    test.assertLen(files, 1)
    run, history = read(files[0])
    for name in ("train/loss", "train/learning_rate", "train/trained_tokens", "eval/loss"):
        test.assertEqual(series(history, name), jsonl_series(records, name), name)
    test.assertLen(series(history, "train/loss"), steps)
    test.assertEqual((run["name"], run["project"]),
                     (os.path.basename(run_dir), "gemma4-sft"))
    test.assertEqual(run["config"]["tracking"]["wandb_mode"], "offline")
