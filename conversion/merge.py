"""Streaming merge of a LoRA adapter into a sharded Hugging Face checkpoint.

For each weight W with factors A, B: W' = W + (alpha / r) * B @ A, computed in
float32 and cast back to W's dtype. Each output shard keeps its base shard's
header and byte layout, so the base's index serves unchanged (the reference
loaded all 62 GB and wrote one file). Bytes the adapter does not touch are
copied inside the kernel; each merged weight goes through in blocks of rows,
updated in place through a float32 tile that stays in cache. Peak memory is
the LoRA factors plus a few blocks, whatever the model size.

The disk and the CPUs work at the same time (_Pipeline): while one block is
computed, the next is read and the previous ones written, each by its own
thread, and each finished shard is fsynced while the next is merged. The base
and the output do not pile up in the page cache (_Files). When merge()
returns, the output is on disk.
Config, generation config, tokenizer and chat template are copied alongside.
"""

import collections
import concurrent.futures
import json
import os
import shutil

import ml_dtypes
import numpy as np
import torch

from common import cli
from conversion import safetensors_stream
from gemma4 import base_model
from gemma4 import lora_map

INDEX = "model.safetensors.index.json"
BLOCK_ELEMENTS = 1 << 23  # rows read and written at once: 16 MiB of bf16
TILE_ROWS, TILE_COLUMNS = 1024, 2048  # a float32 tile of 8 MiB stays in the last-level cache
COMPUTE_THREADS = 8  # at most; each runs torch single-threaded
READ_AHEAD = 1 << 26  # bytes of the base requested from the disk ahead of use
_COPY_CHUNK = 1 << 24  # untouched bytes are copied (and handed to the disk) in these
# `check`: the merged weights' largest error beyond their dtype's rounding, in units of
# that dtype's resolution at each weight (at least the weights' rms). A wrong merge
# misses by the adapter's change, a right one by float32's summation order alone.
MERGED_EXCESS = 0.1


class MergeError(cli.UserError):
    """Factors that do not fit the base checkpoint, named by tensor."""


def merge(base_dir, out_dir, peft_factors, alpha, progress=None):
    """Writes the merged checkpoint into `out_dir` (an existing, empty directory)."""
    files = base_model.safetensors_files(base_dir)
    deltas = lora_map.weight_factors(peft_factors)
    absent = sorted(set(deltas) - set(files))
    if absent:
        raise MergeError(f"the base checkpoint has no tensor {absent[0]} "
                         f"(and {len(absent) - 1} more) for the adapter's factors")
    with _Pipeline(progress) as pipeline:
        for path in sorted(set(files.values())):
            pipeline.shard(path, os.path.join(out_dir, os.path.basename(path)), deltas, alpha)
    for name in sorted(os.listdir(base_dir)):
        source = os.path.join(base_dir, name)
        if os.path.isfile(source) and not name.endswith(".safetensors"):
            shutil.copy2(source, os.path.join(out_dir, name))


_Block = collections.namedtuple("_Block", "offset first rows columns dtype a b scale")


def _plan(path, deltas, alpha):
    """(byte ranges copied unchanged, row blocks merged) of one shard."""
    header, _, data_start = safetensors_stream.read_header(path)
    copies, blocks, position = [], [], 0
    for name in sorted((n for n in header if n in deltas),
                       key=lambda n: header[n]["data_offsets"][0]):
        info = header[name]
        dtype = safetensors_stream.DTYPES.get(info["dtype"])
        if dtype is None or not dtype.is_floating_point:
            raise MergeError(f"{name}: cannot merge LoRA factors into a {info['dtype']} tensor")
        a, b = (torch.as_tensor(x, dtype=torch.float32) for x in deltas[name])
        shape = tuple(info["shape"])
        if a.shape[0] != b.shape[1] or (b.shape[0], a.shape[1]) != shape:
            raise MergeError(f"{name}: B {tuple(b.shape)} @ A {tuple(a.shape)} does not fit "
                             f"the base tensor {shape}")
        begin, end = (data_start + offset for offset in info["data_offsets"])
        copies.append((position, begin))
        position = end
        rows, columns = shape
        block_rows = max(1, min(rows, BLOCK_ELEMENTS // columns))
        for first in range(0, rows, block_rows):
            blocks.append(_Block(begin + first * columns * dtype.itemsize, first,
                                 min(block_rows, rows - first), columns, dtype, a, b,
                                 alpha / a.shape[0]))
    copies.append((position, os.path.getsize(path)))
    return [(begin, end) for begin, end in copies if end > begin], blocks


class _Pipeline:
    """Merges shards block by block, reading, computing and writing at once.

    A ring of RING block buffers, allocated once (fresh pages cost a page fault
    each): block i + 1 is read while block i is computed and blocks i - 1 and
    before are written; a buffer is reused once its write is done. A block's
    rows are split among up to COMPUTE_THREADS threads (one per core), each
    running torch single-threaded: OpenMP workers would spin between the short
    GEMMs and take the CPU the reading and writing threads need.
    """

    RING = 3

    def __init__(self, progress):
        self._progress = progress
        self._threads = {role: concurrent.futures.ThreadPoolExecutor(
            1, thread_name_prefix=f"merge-{role}") for role in ("read", "write", "sync")}
        compute = max(1, min(COMPUTE_THREADS, os.cpu_count() or 1))
        self._threads["compute"] = concurrent.futures.ThreadPoolExecutor(
            max(1, compute - 1), thread_name_prefix="merge-compute")
        self._ring = [[torch.empty(0, dtype=torch.uint8), None] for _ in range(self.RING)]
        self._turn = 0
        self._tiles = [torch.empty(0, dtype=torch.float32) for _ in range(compute)]
        self._closing = []

    def __enter__(self):
        self._torch_threads = torch.get_num_threads()
        torch.set_num_threads(1)
        return self

    def __exit__(self, *error):
        torch.set_num_threads(self._torch_threads)
        for executor in self._threads.values():
            executor.shutdown(wait=True)
        if error[0] is None:
            for future in self._closing:
                future.result()

    def shard(self, path, out_path, deltas, alpha):
        copies, blocks = _plan(path, deltas, alpha)
        files = _Files(path, out_path)
        try:
            for begin, end in copies:  # on the write thread: its disk time overlaps compute
                for start in range(begin, end, _COPY_CHUNK):
                    count = min(_COPY_CHUNK, end - start)
                    files.track(self._threads["write"].submit(files.copy, start, count))
                    self._advance(count)
            self._merge_blocks(files, blocks)
        except BaseException:
            files.close(sync=False)
            raise
        self._closing.append(self._threads["sync"].submit(files.close))

    def _merge_blocks(self, files, blocks):
        reading = self._read(files, blocks[0]) if blocks else None
        for number, block in enumerate(blocks):
            slot, weights = reading.result()
            if number + 1 < len(blocks):
                reading = self._read(files, blocks[number + 1])
            self._compute(block, weights)
            self._ring[slot][1] = files.track(
                self._threads["write"].submit(files.write, weights, block.offset))
            self._advance(weights.numel() * block.dtype.itemsize)

    def _read(self, files, block):
        slot = self._turn
        self._turn = (slot + 1) % self.RING
        buffer, writing = self._ring[slot]
        if writing is not None:
            writing.result()  # the buffer's last block is out
        size = block.rows * block.columns * block.dtype.itemsize
        if buffer.numel() < size:
            buffer = self._ring[slot][0] = torch.empty(size, dtype=torch.uint8)
        weights = buffer[:size].view(block.dtype).view(block.rows, block.columns)
        self._ring[slot][1] = None

        def read():
            files.read_into(weights, block.offset)
            return slot, weights
        return files.track(self._threads["read"].submit(read))

    def _compute(self, block, weights):
        """Rows split among the main thread and the compute threads."""
        parts = len(self._tiles)
        bounds = [block.rows * part // parts for part in range(parts + 1)]
        others = [self._threads["compute"].submit(self._compute_rows, block, weights,
                                                  bounds[part], bounds[part + 1], part)
                  for part in range(1, parts)]
        self._compute_rows(block, weights, bounds[0], bounds[1], 0)
        for other in others:
            other.result()

    def _compute_rows(self, block, weights, begin, end, tile_number):
        """Rows [begin, end) of a block, in float32 tiles of TILE_ROWS x TILE_COLUMNS."""
        size = min(end - begin, TILE_ROWS) * min(block.columns, TILE_COLUMNS)
        if self._tiles[tile_number].numel() < size:
            self._tiles[tile_number] = torch.empty(size, dtype=torch.float32)
        tile = self._tiles[tile_number]
        for row in range(begin, end, TILE_ROWS):
            rows = slice(row, min(row + TILE_ROWS, end))
            b = block.b[block.first + rows.start:block.first + rows.stop]
            for column in range(0, block.columns, TILE_COLUMNS):
                part = weights[rows, column:column + TILE_COLUMNS]
                fp32 = tile[:part.numel()].view(part.shape)
                fp32.copy_(part)
                fp32.addmm_(b, block.a[:, column:column + TILE_COLUMNS], alpha=block.scale)
                part.copy_(fp32)

    def _advance(self, count):
        if self._progress is not None:
            self._progress.update(count)


class _Files:
    """A base shard and its merged copy, which has the same byte layout.

    Page-cache advice keeps the disk busy and the cache small: the base is
    requested READ_AHEAD bytes ahead of use and dropped once used; written
    bytes are handed to the disk at once (POSIX_FADV_DONTNEED starts their
    writeback) instead of waiting for the kernel to throttle the writer.
    """

    def __init__(self, path, out_path):
        self._source = os.open(path, os.O_RDONLY)
        try:
            self._out = os.open(out_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except BaseException:
            os.close(self._source)
            raise
        os.posix_fadvise(self._source, 0, 0, os.POSIX_FADV_SEQUENTIAL)
        self._requested = 0
        self._pending = []

    def track(self, future):
        """Remembers a read or write in flight, so close() waits for it."""
        self._pending.append(future)
        return future

    def copy(self, offset, count):
        safetensors_stream.copy_range(self._source, self._out, offset, count)
        for fd in (self._source, self._out):
            os.posix_fadvise(fd, offset, count, os.POSIX_FADV_DONTNEED)

    def read_into(self, tensor, offset):
        self._read_ahead(offset)
        safetensors_stream.read_into(self._source, tensor, offset)
        os.posix_fadvise(self._source, offset, tensor.numel() * tensor.element_size(),
                         os.POSIX_FADV_DONTNEED)

    def write(self, tensor, offset):
        safetensors_stream.write_at(self._out, tensor, offset)
        os.posix_fadvise(self._out, offset, tensor.numel() * tensor.element_size(),
                         os.POSIX_FADV_DONTNEED)

    def _read_ahead(self, offset):
        end = offset + READ_AHEAD
        if end > self._requested:
            start = max(offset, self._requested)
            os.posix_fadvise(self._source, start, end - start, os.POSIX_FADV_WILLNEED)
            self._requested = end

    def close(self, sync=True):
        """After the reads and writes in flight; with `sync`, once the disk has it all."""
        try:
            for future in self._pending:
                if sync:
                    future.result()
                else:
                    concurrent.futures.wait([future])
            if sync:
                os.fsync(self._out)
                os.posix_fadvise(self._out, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(self._out)
            os.close(self._source)


def total_bytes(base_dir):
    return sum(os.path.getsize(p) for p in set(base_model.safetensors_files(base_dir).values()))


def fingerprint(base_dir):
    """sha256 of the base's index (or tensor names) and config: which base this is."""
    import hashlib  # pylint: disable=import-outside-toplevel
    digest = hashlib.sha256()
    index = os.path.join(base_dir, INDEX)
    if os.path.exists(index):
        with open(index, "rb") as f:
            digest.update(f.read())
    else:
        digest.update(json.dumps(sorted(base_model.safetensors_files(base_dir))).encode())
    with open(os.path.join(base_dir, "config.json"), "rb") as f:
        digest.update(f.read())
    return digest.hexdigest()


def _ulp(values, dtype):
    """The spacing of `dtype` at each of `values` (float32)."""
    _, exponent = np.frexp(values)
    return np.ldexp(np.float32(1.0), exponent - 1 - ml_dtypes.finfo(dtype).nmant)


def check(base_dir, peft_factors, alpha, merged_dir):
    """The merged export's weights against W + (alpha / r) B A recomputed here: (the
    largest error beyond the stored dtype's and float32's rounding, in units of the
    stored dtype's resolution at each weight (at least the weights' rms); rms of the
    stored dtype's rounding over rms of the adapter's change; tensors)."""
    from safetensors import safe_open  # pylint: disable=import-outside-toplevel
    base, merged = (base_model.safetensors_files(d) for d in (base_dir, merged_dir))
    excess, rounding, change = 0.0, 0.0, 0.0
    factors = lora_map.weight_factors(peft_factors)
    for name, (a, b) in factors.items():
        with safe_open(base[name], "np") as f:
            weight = f.get_tensor(name).astype(np.float32)
        with safe_open(merged[name], "np") as f:
            stored = f.get_tensor(name)
        rank, factor = a.shape[0], np.float32(alpha / a.shape[0])
        a, b = a.astype(np.float32), b.astype(np.float32)
        delta = factor * (b @ a)
        exact = weight + delta
        rounded = exact.astype(stored.dtype).astype(np.float32)
        # Allowed: the stored dtype's rounding, and float32's own in W + delta and in
        # the rank's sum (bounded by its terms' magnitudes: they may cancel).
        allowed = (_ulp(np.abs(exact), stored.dtype) + _ulp(np.abs(exact), np.float32)
                   + rank * _ulp(factor * (np.abs(b) @ np.abs(a)), np.float32))
        beyond = np.abs(stored.astype(np.float32) - exact) - allowed
        # In units of the stored dtype's resolution at each weight, floored at the
        # weights' rms (near 0 a resolution is tiny).
        rms = np.sqrt(np.mean(weight ** 2), dtype=np.float32)
        scale = _ulp(np.maximum(np.abs(exact), rms), stored.dtype)
        excess = max(excess, float((beyond / scale).max()))
        rounding += float(np.sum((rounded - exact) ** 2))
        change += float(np.sum(delta ** 2))
    return max(excess, 0.0), (rounding / change) ** 0.5 if change else 0.0, len(factors)
