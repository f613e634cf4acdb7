import json
import math
import os
import time

from absl.testing import absltest

from serving import plots
from serving import server_config
from serving import sweep
from serving.configs import v6e8


def _point(length, rate, throughput, ttft, status="ok"):
    return {"input_len": length, "rate": rate, "status": status,
            "output_throughput": throughput, "median_ttft_ms": ttft, "failed": 0}


class SweepTest(absltest.TestCase):

    def test_parse(self):
        self.assertEqual(sweep.parse_sweep("512,1024x1,4,inf"),
                         ((512, 1024), (1.0, 4.0, math.inf)))
        with self.assertRaisesRegex(sweep.SweepError, "must look like"):
            sweep.parse_sweep("512;1")

    def test_saturation_by_throughput_and_by_ttft(self):
        flat = [_point(512, 1, 100, 50), _point(512, 2, 190, 52), _point(512, 4, 195, 60)]
        self.assertEqual(sweep.saturation(flat), (2, 195))
        exploding = [_point(512, 1, 100, 50), _point(512, 2, 200, 70), _point(512, 4, 400, 400)]
        self.assertEqual(sweep.saturation(exploding), (2, 400))
        rising = [_point(512, 1, 100, 50), _point(512, 2, 200, 55)]
        self.assertEqual(sweep.saturation(rising), (None, 200))

    def test_cost(self):
        # training/common/recipe.md: a v6e-8 at 1206 output tok/s is $4.95 per 1M output
        # tokens (4.957 unrounded).
        price = server_config.dollars_per_hour(v6e8.get_config())
        self.assertAlmostEqual(sweep.cost_per_million_output_tokens(price, 1206), 4.957,
                               places=3)
        self.assertIsNone(sweep.cost_per_million_output_tokens(0, 100))

    def test_unreachable_server_fails_fast(self):
        started = time.time()
        with self.assertRaisesRegex(sweep.SweepError, "no vLLM server answers"):
            sweep.sweep(bench=["python3", "x"], base_url="http://127.0.0.1:9", model="m",
                        tokenizer="t", input_lens=(8,), rates=(1.0,), output_len=4,
                        num_prompts=1, num_warmups=0, seed=0, max_model_len=64,
                        out_dir=self.create_tempdir().full_path, record={},
                        dollars_per_hour=0, timeout_s=5)
        self.assertLess(time.time() - started, 30)

    def test_plots_overlay_two_runs(self):
        tmp = self.create_tempdir().full_path
        for label, scale in (("tpu", 1.0), ("gpu", 0.8)):
            run = os.path.join(tmp, label)
            os.makedirs(run)
            points = [_point(length, rate, scale * 100 * rate, 40 + rate)
                      for length in (512, 1024) for rate in (1, 2, math.inf)]
            summary = sweep.summarize(points, {"label": label}, 10.0)
            with open(os.path.join(run, "summary.json"), "w") as f:
                json.dump(summary, f)
        written = plots.plot([os.path.join(tmp, "tpu"), os.path.join(tmp, "gpu")],
                             os.path.join(tmp, "plots"))
        self.assertEqual([os.path.basename(p) for p in written], ["throughput.png", "ttft.png"])
        for path in written:
            with open(path, "rb") as f:
                self.assertEqual(f.read(8), b"\x89PNG\r\n\x1a\n")
            self.assertGreater(os.path.getsize(path), 10_000)


if __name__ == "__main__":
    absltest.main()
