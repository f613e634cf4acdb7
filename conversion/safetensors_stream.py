"""Block-wise access to safetensors files without loading tensors whole.

The format is simple and public: an 8-byte little-endian header length, a JSON
header mapping each tensor name to its dtype, shape and byte offsets, then the
raw bytes. The `safetensors` package reads through a memory map (every page
read stays resident while the file is open) and writes a whole dict at once;
a merge through it holds about two shards. Here the merge keeps the base's
header and byte layout: untouched bytes are copied by the kernel
(`copy_file_range`), and merged tensors are read and written in row blocks.
"""

import errno
import json
import os
import struct

import torch

from common import cli

DTYPES = {
    "BF16": torch.bfloat16, "F16": torch.float16, "F32": torch.float32,
    "F64": torch.float64, "I64": torch.int64, "I32": torch.int32, "I16": torch.int16,
    "I8": torch.int8, "U8": torch.uint8, "BOOL": torch.bool,
}


class SafetensorsError(cli.UserError):
    pass


def read_header(path):
    """(header without __metadata__, metadata, byte offset where tensor data starts)."""
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        raw = f.read(8)
        if len(raw) < 8:
            raise SafetensorsError(f"{path}: too short to be a safetensors file")
        (length,) = struct.unpack("<Q", raw)
        if length > size - 8:
            raise SafetensorsError(f"{path}: header of {length} bytes exceeds the file")
        header = json.loads(f.read(length))
    metadata = header.pop("__metadata__", None) or {}
    data_start = 8 + length
    for name, info in header.items():
        if data_start + info["data_offsets"][1] > size:
            raise SafetensorsError(f"{path}: tensor {name} ends past the end of the file "
                                   "(truncated?)")
    return header, metadata, data_start


def read_into(fd, tensor, offset):
    """Fills the contiguous `tensor` with the bytes at `offset` of `fd`."""
    view = _bytes(tensor)
    done = 0
    while done < len(view):
        count = os.preadv(fd, [view[done:]], offset + done)
        if count <= 0:
            raise SafetensorsError("unexpected end of file")
        done += count


def write_at(fd, tensor, offset):
    """Writes the bytes of the contiguous `tensor` at `offset` of `fd`."""
    _pwrite_all(fd, _bytes(tensor), offset)


def copy_range(src_fd, dst_fd, offset, count):
    """Copies `count` bytes at `offset` of `src_fd` to the same offset of `dst_fd`,
    inside the kernel where it can (copy_file_range)."""
    end = offset + count
    copy = _copy_file_range
    while offset < end:
        try:
            copied = copy(src_fd, dst_fd, offset, end - offset)
        except OSError as e:
            if copy is not _copy_file_range or e.errno not in _NO_COPY_FILE_RANGE:
                raise
            copy = _read_write  # e.g. source and output on different file systems
            continue
        if copied <= 0:
            raise SafetensorsError("unexpected end of file")
        offset += copied


_NO_COPY_FILE_RANGE = {errno.EXDEV, errno.ENOSYS, errno.EOPNOTSUPP, errno.EINVAL}


def _copy_file_range(src_fd, dst_fd, offset, count):
    return os.copy_file_range(src_fd, dst_fd, count, offset, offset)


def _read_write(src_fd, dst_fd, offset, count):
    data = os.pread(src_fd, min(count, 1 << 24), offset)
    _pwrite_all(dst_fd, memoryview(data), offset)
    return len(data)


def _pwrite_all(fd, view, offset):
    done = 0
    while done < len(view):
        done += os.pwrite(fd, view[done:], offset + done)


def _bytes(tensor):
    return memoryview(tensor.view(torch.uint8).numpy()).cast("B")
