"""Tensor-at-a-time reading and writing of safetensors files.

The `safetensors` package reads lazily through a memory map (every page read
stays resident while the file is open) and writes a whole dict at once, so a
merge through it holds about two shards. The format is simple and public: an
8-byte little-endian header length, a JSON header mapping each tensor name to
its dtype, shape and byte offsets, then the raw bytes. Reading with `pread`
and writing in header order keeps one tensor in memory at a time; the files
are ordinary safetensors files (export_test loads them with transformers).
"""

import json
import os
import struct

import torch

DTYPES = {
    "BF16": torch.bfloat16, "F16": torch.float16, "F32": torch.float32,
    "F64": torch.float64, "I64": torch.int64, "I32": torch.int32, "I16": torch.int16,
    "I8": torch.int8, "U8": torch.uint8, "BOOL": torch.bool,
}
NAMES = {dtype: name for name, dtype in DTYPES.items()}


class SafetensorsError(ValueError):
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


def read_tensor(fd, info, data_start):
    begin, end = info["data_offsets"]
    buffer = bytearray(end - begin)
    view = memoryview(buffer)
    done = 0
    while done < len(buffer):
        count = os.preadv(fd, [view[done:]], data_start + begin + done)
        if count <= 0:
            raise SafetensorsError("unexpected end of file")
        done += count
    tensor = torch.frombuffer(buffer, dtype=DTYPES[info["dtype"]]) if buffer else torch.empty(
        0, dtype=DTYPES[info["dtype"]])
    return tensor.reshape(info["shape"])


class Writer:
    """Writes tensors in the order of `layout` ({name: (dtype name, shape)})."""

    def __init__(self, path, layout, metadata=None):
        header, offset = {}, 0
        for name, (dtype, shape) in layout.items():
            size = DTYPES[dtype].itemsize * _numel(shape)
            header[name] = {"dtype": dtype, "shape": list(shape),
                            "data_offsets": [offset, offset + size]}
            offset += size
        if metadata:
            header["__metadata__"] = metadata
        encoded = json.dumps(header, separators=(",", ":")).encode()
        encoded += b" " * (-len(encoded) % 8)  # data starts 8-byte aligned
        self._order = list(layout)
        self._header = header
        self._file = open(path, "wb")
        self._file.write(struct.pack("<Q", len(encoded)) + encoded)

    def write(self, name, tensor):
        expected = self._order.pop(0) if self._order else None
        if name != expected:
            raise SafetensorsError(f"wrote {name}, expected {expected}")
        info = self._header[name]
        if NAMES[tensor.dtype] != info["dtype"] or list(tensor.shape) != info["shape"]:
            raise SafetensorsError(f"{name}: {tensor.dtype} {list(tensor.shape)} does not "
                                   f"match the header's {info['dtype']} {info['shape']}")
        if tensor.numel():
            self._file.write(memoryview(tensor.contiguous().view(torch.uint8).numpy()))

    def close(self):
        if self._order:
            raise SafetensorsError(f"{len(self._order)} tensors never written, e.g. "
                                   f"{self._order[0]}")
        self._file.close()


def _numel(shape):
    count = 1
    for dim in shape:
        count *= dim
    return count
