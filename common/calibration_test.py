"""The calibration file: every run names a machine the table has, and every factor
it records is what its own predicted and measured figures give."""

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


if __name__ == "__main__":
    absltest.main()
