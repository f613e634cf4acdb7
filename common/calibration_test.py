"""The calibration file: every run names a machine the table has, and every factor
it records is what its own predicted and measured figures give."""

import json

from absl.testing import absltest

from common import calibration
from common import machines


class CalibrationTest(absltest.TestCase):

    def test_runs_name_known_machines_and_their_figures(self):
        runs = calibration.runs()
        self.assertNotEmpty(runs)
        self.assertLen({run["id"] for run in runs}, len(runs))
        for run in runs:
            machine = machines.get(run["machine"])
            self.assertEqual(run["topology"], machine.topology, run["id"])
            self.assertEqual(run["predicted"]["peak_flops_per_chip"],
                             machine.peak_flops_per_chip, run["id"])
            self.assertEqual(run["predicted"]["hbm_bytes_per_s"],
                             machine.hbm_gbps_per_chip * 1e9, run["id"])
            for kind in ("predicted", "measured"):
                self.assertIn(kind, run["commands"])

    def test_factors_are_measured_over_predicted(self):
        for run in calibration.runs():
            predicted, measured, factors = run["predicted"], run["measured"], run["factors"]
            roofline = calibration.roofline_seconds(predicted)
            self.assertAlmostEqual(predicted["roofline_step_seconds"], roofline, places=3)
            self.assertAlmostEqual(factors["step_seconds_over_roofline"],
                                   measured["step_seconds"] / roofline, places=3)
            if "hours" in measured:  # a published run: its hours over its steps
                self.assertAlmostEqual(measured["step_seconds"],
                                       measured["hours"] * 3600 / measured["steps"], places=3)
                continue
            self.assertAlmostEqual(factors["bytes_per_chip_over_compile"],
                                   measured["bytes_per_chip"] / predicted["bytes_per_chip"],
                                   places=3)
            self.assertAlmostEqual(factors["bytes_per_chip_over_planner"],
                                   measured["bytes_per_chip"] /
                                   predicted["planner_bytes_per_chip"], places=3)
            # The binary adds no hidden per-step cost: sft's step within 10% of the benchmark's.
            self.assertLess(abs(measured["sft_step_seconds"] / measured["step_seconds"] - 1), 0.1)

    def test_factors_by_machine(self):
        self.assertEqual([run_id for run_id, _ in calibration.factors(
            "step_seconds_over_roofline", machine="tpu-v5litepod-1")],
            ["v5e-1x1-one_chip-2026-12-06"])
        self.assertEqual([run_id for run_id, _ in calibration.factors(
            "step_seconds_over_roofline", machine="gpu-h100x2")], ["study-h100x2-2605.25645"])
        self.assertLen(calibration.factors("step_seconds_over_roofline", generation="v5e"), 1)
        self.assertEqual(calibration.factors("step_seconds_over_roofline", generation="v6e"), [])

    def test_applicable_runs_by_platform(self):
        runs, scope = calibration.applicable("tpu")
        self.assertEqual({run["machine"] for run in runs}, {"tpu-v5litepod-1", "tpu-v5p-8"})
        self.assertEqual(scope, "TPU runs")
        runs, scope = calibration.applicable("gpu", exclude=["study-h100x2-2605.25645"])
        self.assertLen(runs, 2)  # no GPU run left: every other platform's
        self.assertIn("no GPU run", scope)
        self.assertEqual(calibration.spread([2.0, 1.0, 3.0]), (2.0, 1.0, 3.0))
        self.assertIsNone(calibration.spread([]))

    def test_a_file_that_is_not_one(self):
        path = self.create_tempfile(content="{\"run\": []}").full_path
        with self.assertRaisesRegex(calibration.CalibrationError, "not a calibration file"):
            calibration.runs(path)



class StepModelTest(absltest.TestCase):

    def test_the_chip_model_holds_on_the_shapes_it_was_not_fitted_to(self):
        # The bar of the step model: on held-out shapes, median error <= 10%, max <= 20%.
        model = calibration.step_model()
        errors = sorted(abs(h["error"]) for h in model["held_out"])
        self.assertGreaterEqual(len(model["fit"]) + len(errors), 8)
        self.assertGreaterEqual(len(errors), 4)
        self.assertLessEqual(errors[len(errors) // 2], 0.10, model["held_out"])
        self.assertLessEqual(errors[-1], 0.20, model["held_out"])
        with open(calibration.SHAPES_PATH, encoding="utf-8") as f:
            rows = json.load(f)["rows"]
        self.assertLen({r["shape"] for r in rows}, len(rows))
        for row in rows:  # what the roofline's parts were made of
            self.assertAlmostEqual(row["memory_seconds"], row["xla_bytes_accessed"] / 819e9,
                                   places=4)
            self.assertAlmostEqual(row["compute_seconds"],
                                   (row["xla_flops"] + row["kernel_flops"]) / 197e12, places=4)

    def test_a_known_line_is_found_and_its_range_comes_from_the_held_out_errors(self):
        rows = [{"shape": f"s{i}", "compute_seconds": c, "memory_seconds": m,
                 "step_seconds": 2 * c + 0.5 * m}
                for i, (c, m) in enumerate([(1.0, 0.5), (0.5, 1.0), (2.0, 0.1), (0.3, 0.3)])]
        rows[3]["step_seconds"] *= 1.25  # the held-out shape ran 25% slower than the line
        path = self.create_tempfile("shapes.json", content=json.dumps(
            {"rows": rows, "fit": ["s0", "s1", "s2"]})).full_path
        model = calibration.step_model(path)
        self.assertAlmostEqual(model["compute"], 2.0)
        self.assertAlmostEqual(model["memory"], 0.5)
        held, = model["held_out"]
        self.assertAlmostEqual(held["error"], 1 / 1.25 - 1)
        point, low, high = calibration.predict_step(model, 1.0, 1.0)
        self.assertAlmostEqual(point, 2.5)
        self.assertAlmostEqual(high, 2.5 * 1.25)  # as slow as the held-out shape ran
        self.assertAlmostEqual(low, 2.5)  # no held-out shape ran faster than predicted
        def with_rows(changed, fit=("s0", "s1", "s2")):
            return json.dumps({"rows": changed, "fit": list(fit)})

        twin = dict(rows[0], shape="s1")
        for content in ("[]", '{"rows": [], "fit": []}', with_rows(rows, fit=[r["shape"] for r
                                                                           in rows]),
                        with_rows([dict(rows[0], step_seconds="0.7")] + rows[1:]),
                        with_rows([dict(rows[0], step_seconds=0)] + rows[1:]),
                        with_rows([dict(rows[0], step_seconds=float("nan"))] + rows[1:]),
                        with_rows([rows[0], twin, rows[3]], fit=["s0", "s1"]),  # no spread
                        with_rows(rows, fit=["s0", "s1", "typo"]),
                        with_rows(rows + [rows[0]]),  # a name twice
                        with_rows([{"shape": f"s{i}", "compute_seconds": c, "memory_seconds": m,
                                    "step_seconds": 3 * m - 0.2 * c}  # more work, less time
                                   for i, (c, m) in enumerate([(1, 2), (2, 2), (1, 3), (1, 1)])])):
            bad = self.create_tempfile(content=content).full_path
            with self.assertRaisesRegex(calibration.CalibrationError, "^.*: "):
                calibration.step_model(bad)
        with self.assertRaisesRegex(calibration.CalibrationError, "does not grow with its work"):
            calibration.step_model(self.create_tempfile(content=with_rows(
                [{"shape": f"s{i}", "compute_seconds": c, "memory_seconds": m,
                  "step_seconds": 3 * m - 0.2 * c}
                 for i, (c, m) in enumerate([(1, 2), (2, 2), (1, 3), (1, 1)])])).full_path)


if __name__ == "__main__":
    absltest.main()
