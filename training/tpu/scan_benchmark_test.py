"""The scan benchmark: a run of both layouts on the tiny model (the same first loss;
a rerun loads from the cache). The model it shrinks and its random weights are
random_model's (gemma4/random_model_test.py)."""

import os
import tempfile

from absl.testing import absltest

from training.tpu import scan_benchmark
from training.tpu import testing  # sets up 8 CPU devices first


# An effective batch of 2 rows (one per data-parallel replica; cpu.py has 8): the
# same programs, a quarter of the work per step.
def _config():
    return testing.cpu_config(**{"batch.effective_size": 2})


class RunTest(absltest.TestCase):

    def test_both_layouts_start_alike_and_a_rerun_loads_from_the_cache(self):
        with tempfile.TemporaryDirectory() as workdir:
            cache = os.path.join(workdir, "cache")
            results = scan_benchmark.run(_config(), workdir, 1,
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

            again = scan_benchmark.run(_config(), workdir, 1, ["scanned"],
                                       cache_dir=cache)
            self.assertGreater(again["compilation_cache"]["hits"], 0)
            self.assertEqual(again["compilation_cache"]["stored"], 0)
            self.assertEqual(again["rows"][0]["losses"], rows["scanned"]["losses"])


if __name__ == "__main__":
    absltest.main()
