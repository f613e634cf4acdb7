import errno
import json
import os
from unittest import mock

import numpy as np
import torch
from absl.testing import absltest
from safetensors.torch import load_file
from safetensors.torch import save_file

from conversion import merge
from conversion import safetensors_stream
from gemma4 import lora_map

RANK = 4


def _weights(seed, rows, columns, dtype=torch.bfloat16):
    generator = torch.Generator().manual_seed(seed)
    return (0.05 * torch.randn(rows, columns, generator=generator)).to(dtype)


def _factors(seed, rows, columns):
    generator = torch.Generator().manual_seed(seed)
    return (torch.randn(RANK, columns, generator=generator),
            0.1 * torch.randn(rows, RANK, generator=generator))


def _peft(factors):
    out = {}
    for weight, (a, b) in factors.items():
        module = weight[:-len(".weight")]
        out[f"base_model.model.{module}.lora_A.weight"] = a.numpy()
        out[f"base_model.model.{module}.lora_B.weight"] = b.numpy()
    return out


def _base(directory, shards):
    """A checkpoint of `shards` ({file: {name: tensor}}) with its index."""
    os.makedirs(directory)
    weight_map = {}
    for file, tensors in shards.items():
        save_file(tensors, os.path.join(directory, file), metadata={"format": "pt"})
        weight_map.update({name: file for name in tensors})
    with open(os.path.join(directory, merge.INDEX), "w") as f:
        json.dump({"metadata": {}, "weight_map": weight_map}, f)
    with open(os.path.join(directory, "config.json"), "w") as f:
        json.dump({"model_type": "gemma4"}, f)
    return directory


def _half_ulp(values):
    """Half the bf16 spacing at each value (8 significant bits)."""
    exponent = np.floor(np.log2(np.maximum(np.abs(values), 1e-30)))
    return np.exp2(exponent - 8)


class MergeTest(absltest.TestCase):

    def setUp(self):
        super().setUp()
        self.directory = self.create_tempdir().full_path
        # Small blocks and tiles, so that partial blocks and tiles are exercised.
        for name, value in (("BLOCK_ELEMENTS", 7 * 40), ("TILE_ROWS", 2), ("TILE_COLUMNS", 16)):
            patcher = mock.patch.object(merge, name, value)
            patcher.start()
            self.addCleanup(patcher.stop)

    def test_bf16_merge_is_correctly_rounded_and_keeps_other_bytes(self):
        tensors = {
            "model-1.safetensors": {"embed.weight": _weights(0, 11, 40),
                                    "q.weight": _weights(1, 23, 40),
                                    "norm.weight": _weights(2, 1, 40)[0].contiguous()},
            "model-2.safetensors": {"down.weight": _weights(3, 40, 37),
                                    "fp32.weight": _weights(4, 9, 20, torch.float32)},
        }
        base = _base(os.path.join(self.directory, "base"), tensors)
        factors = {"q.weight": _factors(5, 23, 40), "down.weight": _factors(6, 40, 37),
                   "fp32.weight": _factors(7, 9, 20)}
        out = os.path.join(self.directory, "out")
        os.makedirs(out)
        merge.merge(base, out, _peft(factors), alpha=8.0)
        self.assertEqual(sorted(os.listdir(out)), sorted(os.listdir(base)))
        for file, shard in tensors.items():
            merged = load_file(os.path.join(out, file))
            for name, before in shard.items():
                after = merged[name]
                self.assertEqual(after.dtype, before.dtype, name)
                if name not in factors:
                    self.assertTrue(torch.equal(after, before), name)
                    continue
                a, b = (x.double() for x in factors[name])
                exact = (before.double() + (8.0 / RANK) * (b @ a)).numpy()
                error = np.abs(after.double().numpy() - exact)
                if before.dtype == torch.bfloat16:
                    # The fp32 sum rounded once to bf16: within half a bf16 step.
                    self.assertTrue(np.all(error <= _half_ulp(exact) * (1 + 1e-4)), name)
                else:
                    np.testing.assert_allclose(after.double().numpy(), exact, rtol=1e-6,
                                               atol=1e-7, err_msg=name)
                self.assertGreater(float(np.abs(exact - before.double().numpy()).max()), 1e-2)
        # Same header and layout: the shards differ from the base only inside merged tensors.
        with open(os.path.join(base, "model-1.safetensors"), "rb") as f:
            original = f.read()
        with open(os.path.join(out, "model-1.safetensors"), "rb") as f:
            written = f.read()
        header, _, start = safetensors_stream.read_header(os.path.join(base, "model-1.safetensors"))
        begin, end = (start + x for x in header["q.weight"]["data_offsets"])
        self.assertEqual(len(written), len(original))
        self.assertEqual(written[:begin] + written[end:], original[:begin] + original[end:])
        self.assertNotEqual(written[begin:end], original[begin:end])

    def test_check_passes_a_right_merge_and_names_a_wrong_one(self):
        base = _base(os.path.join(self.directory, "base"), {"model-1.safetensors": {
            "q.weight": _weights(0, 23, 40), "down.weight": _weights(3, 40, 37)}})
        factors = {"q.weight": _factors(5, 23, 40), "down.weight": _factors(6, 40, 37)}
        small = {name: (a, b * 1e-4) for name, (a, b) in factors.items()}

        def merged(name, peft, alpha):
            out = os.path.join(self.directory, name)
            os.makedirs(out)
            merge.merge(base, out, peft, alpha=alpha)
            return out

        excess, rounded_away, tensors = merge.check(base, _peft(factors), 8.0,
                                                    merged("right", _peft(factors), 8.0))
        self.assertEqual(tensors, 2)
        self.assertLessEqual(excess, merge.MERGED_EXCESS)
        self.assertLess(rounded_away, 0.01)  # a change far above bf16's resolution
        excess, _, _ = merge.check(base, _peft(factors), 8.0,
                                   merged("wrong", _peft(factors), 16.0))
        self.assertGreater(excess, 10 * merge.MERGED_EXCESS)
        # A change below bf16's resolution: merged right, but mostly rounded away.
        excess, rounded_away, _ = merge.check(base, _peft(small), 8.0,
                                              merged("small", _peft(small), 8.0))
        self.assertLessEqual(excess, merge.MERGED_EXCESS)
        self.assertGreater(rounded_away, 0.5)

    def test_bad_factors_name_the_tensor(self):
        base = _base(os.path.join(self.directory, "base"), {"model-1.safetensors": {
            "q.weight": _weights(0, 8, 16), "ids.weight": torch.zeros(8, 16, dtype=torch.int32)}})
        cases = {
            "q.weight: B \\(9, 4\\) @ A \\(4, 16\\) does not fit the base tensor \\(8, 16\\)":
                {"q.weight": _factors(1, 9, 16)},
            "ids.weight: cannot merge LoRA factors into a I32 tensor":
                {"ids.weight": _factors(1, 8, 16)},
            "no tensor k.weight": {"k.weight": _factors(1, 8, 16)},
        }
        for number, (message, factors) in enumerate(cases.items()):
            out = os.path.join(self.directory, f"out{number}")
            os.makedirs(out)
            with self.assertRaisesRegex(merge.MergeError, message):
                merge.merge(base, out, _peft(factors), alpha=8.0)
        lone_a = {k: v for k, v in _peft({"q.weight": _factors(1, 8, 16)}).items() if "_A" in k}
        with self.assertRaisesRegex(lora_map.LoraMapError, "q.weight: the adapter lacks lora_B"):
            merge.merge(base, out, lone_a, alpha=8.0)

    def test_a_failed_write_stops_the_merge_and_closes_every_file(self):
        base = _base(os.path.join(self.directory, "base"), {
            "model-1.safetensors": {"q.weight": _weights(0, 40, 16)},
            "model-2.safetensors": {"k.weight": _weights(1, 40, 16)}})
        factors = {"q.weight": _factors(2, 40, 16), "k.weight": _factors(3, 40, 16)}
        out = os.path.join(self.directory, "out")
        os.makedirs(out)
        open_before = len(os.listdir("/proc/self/fd"))
        writes = []

        def failing_write(fd, tensor, offset):
            writes.append(offset)
            if len(writes) == 3:
                raise OSError(errno.ENOSPC, "No space left on device")
            return write_at(fd, tensor, offset)

        write_at = safetensors_stream.write_at
        with mock.patch.object(safetensors_stream, "write_at", side_effect=failing_write):
            with self.assertRaisesRegex(OSError, "No space left"):
                merge.merge(base, out, _peft(factors), alpha=8.0)
        self.assertEqual(len(os.listdir("/proc/self/fd")), open_before)
        self.assertGreater(len(writes), 2)
        # And without the failure, it goes through.
        out = os.path.join(self.directory, "again")
        os.makedirs(out)
        merge.merge(base, out, _peft(factors), alpha=8.0)
        self.assertLen(os.listdir(out), 4)

    def test_copy_falls_back_to_reads_and_writes_across_file_systems(self):
        source = os.path.join(self.directory, "source")
        with open(source, "wb") as f:
            f.write(bytes(range(256)) * 100)
        target = os.path.join(self.directory, "target")
        refuse = mock.patch.object(os, "copy_file_range",
                                   side_effect=OSError(errno.EXDEV, "cross-device"))
        with refuse as copy_file_range, open(source, "rb") as src, open(target, "wb") as dst:
            safetensors_stream.copy_range(src.fileno(), dst.fileno(), 1000, 20000)
        copy_file_range.assert_called_once()
        with open(target, "rb") as f:
            self.assertEqual(f.read(), bytes(1000) + (bytes(range(256)) * 100)[1000:21000])


if __name__ == "__main__":
    absltest.main()
