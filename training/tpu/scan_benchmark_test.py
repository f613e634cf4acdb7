"""The scan benchmark: the model it shrinks, its random weights, and a run of both
layouts on the tiny model (the same first loss; a rerun loads from the cache)."""

import os
import tempfile

import numpy as np
from absl.testing import absltest

from training.tpu import testing  # sets up 8 CPU devices first
# pylint: disable=wrong-import-order
from training.formats import base_model
from training.formats import gemma4_map
from training.tpu import scan_benchmark


def dims_31b():
    config, _ = base_model.config_only("google/gemma-4-31B-it")  # the copy shipped
    return gemma4_map.Dims.from_hf_config(config)


class ShrinkTest(absltest.TestCase):

    def test_cuts_layers_and_divides_widths(self):
        full = dims_31b()
        dims = scan_benchmark.shrink(full, layers=12, width_divisor=2)
        self.assertEqual((dims.embed, dims.mlp, dims.heads, dims.kv_heads,
                          dims.global_kv_heads), (2688, 10752, 16, 8, 2))
        self.assertEqual(dims.layer_types, full.layer_types[:12])
        self.assertEqual((dims.head_dim, dims.global_head_dim, dims.vocab),
                         (full.head_dim, full.global_head_dim, full.vocab))
        self.assertEqual(scan_benchmark.shrink(full), full)

    def test_refuses_what_does_not_divide_or_exist(self):
        with self.assertRaisesRegex(scan_benchmark.BenchmarkError,
                                    "does not divide global_kv_heads, heads, kv_heads"):
            scan_benchmark.shrink(dims_31b(), width_divisor=3)
        with self.assertRaisesRegex(scan_benchmark.BenchmarkError, "the base has 60 layers"):
            scan_benchmark.shrink(dims_31b(), layers=61)


class RandomTensorsTest(absltest.TestCase):

    def test_each_name_has_its_own_values_in_its_shape(self):
        dims = scan_benchmark.shrink(dims_31b(), layers=2, width_divisor=4)
        tensors = scan_benchmark.random_tensors(dims, seed=3)
        names = [n for n in gemma4_map.base_names(dims) if "layers.1." in n][:3]
        for name in names:
            value = tensors(name)
            self.assertEqual(value.shape, gemma4_map.expected_hf_shape(dims, name))
            np.testing.assert_array_equal(value, tensors(name))
            self.assertAlmostEqual(float(value.std()), 0.02, delta=0.002)
        self.assertFalse(np.array_equal(tensors(names[0]).ravel()[:64],
                                        tensors(names[1]).ravel()[:64]))


class RunTest(absltest.TestCase):

    def test_both_layouts_start_alike_and_a_rerun_loads_from_the_cache(self):
        with tempfile.TemporaryDirectory() as workdir:
            cache = os.path.join(workdir, "cache")
            results = scan_benchmark.run(testing.cpu_config(), workdir, 1,
                                         ["scanned", "unrolled"], cache_dir=cache)
            rows = {row["layout"]: row for row in results["rows"]}
            self.assertEqual(set(rows), {"scanned", "unrolled"})
            self.assertIn("scanned over", rows["scanned"]["layers"])
            self.assertEqual(rows["unrolled"]["layers"], "6 layers unrolled")
            # Float32 on the same weights: the loop body rounds some sums apart
            # (layer_scan_test's tolerance).
            self.assertLess(results["first_loss_relative_difference"], 1e-6)
            for row in rows.values():
                self.assertLen(row["losses"], 2)
                self.assertGreater(row["data_tokens_per_s"], 0)
                self.assertGreater(row["xla_bytes_per_chip"], 0)
                self.assertIsNone(row["mfu"])  # no peak known for a CPU
            self.assertGreater(results["compilation_cache"]["stored"], 0)
            self.assertIn("scanned / unrolled", scan_benchmark.format_rows(results))

            again = scan_benchmark.run(testing.cpu_config(), workdir, 1, ["scanned"],
                                       cache_dir=cache)
            self.assertGreater(again["compilation_cache"]["hits"], 0)
            self.assertEqual(again["compilation_cache"]["stored"], 0)
            self.assertEqual(again["rows"][0]["losses"], rows["scanned"]["losses"])


if __name__ == "__main__":
    absltest.main()
