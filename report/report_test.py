import json
import os
import subprocess

from absl.testing import absltest

from common import binaries
from common import gcs_emulator
from common import storage
from report import comparison
from report import runs as runs_lib


def _write(path, value):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        if path.endswith(".jsonl"):
            f.writelines(json.dumps(v) + "\n" for v in value)
        else:
            json.dump(value, f)


def fake_training(directory, stack, machine, step_seconds, losses, eval_losses=None, **info):
    """A run's files; `eval_losses` {step: loss} adds validation records after those steps;
    `info` adds run.json fields."""
    _write(os.path.join(directory, "run.json"), {"stack": stack, "machine": machine, **info})
    records = []
    for i, loss in enumerate(losses):
        records.append({"step": i + 1, "loss": loss, "grad_norm": 1.0, "tokens": 3600,
                        "trained_tokens": 900, "step_time_s": step_seconds, "mfu": 0.5})
        if i + 1 in (eval_losses or {}):
            records.append({"step": i + 1, "eval_loss": eval_losses[i + 1], "eval_tokens": 300})
    _write(os.path.join(directory, "metrics.jsonl"), records)
    return directory


def fake_serving(directory, machine, peak_by_rate):
    points = [{"status": "ok", "rate": rate, "output_throughput": tok_s, "median_ttft_ms": 50.0,
               "p99_ttft_ms": 90.0, "median_tpot_ms": 10.0, "p99_tpot_ms": 20.0}
              for rate, tok_s in peak_by_rate.items()]
    _write(os.path.join(directory, "summary.json"), {
        "record": {"machine": machine}, "input_lengths": {"4096": {
            "saturation_rate": max(peak_by_rate), "peak_output_tok_s": max(
                peak_by_rate.values()), "points": points}}})
    return directory


def fake_eval(directory, solved):
    _write(os.path.join(directory, "summary.json"), {
        "pass_at_k": {"1": 0.5}, "pass_at_k_interval_95": {"1": [0.2, 0.8]},
        "protocol": "upstream",
        "problems": {p: {"n": 1, "passed": int(p in solved)} for p in ("P1", "P2", "P3")}})
    return directory


def render(directories, out, *args):
    """//report:report over `directories`, as a user runs it."""
    env = binaries.child_env()
    return subprocess.run(binaries.command("//report:report", "--runs=" + ",".join(directories),
                                           f"--out={out}", *args),
                          env=env, capture_output=True, text=True, timeout=300, check=False)


class ReferenceTest(absltest.TestCase):
    """The paper's tables recomputed from its published inputs by the report's code."""

    def setUp(self):
        super().setUp()
        self.report = comparison.build(runs_lib.reference(), hours=(1.0, 24.0))
        self.training = {r["platform"]: r for r in self.report["training"]}
        self.serving = {r["platform"]: r["input_lengths"] for r in self.report["serving"]}
        self.owned = self.report["ownership"]["platforms"]

    def test_training(self):
        # The paper's hours are its billed (wall-clock) hours.
        self.assertEqual({r["hours_basis"] for r in self.report["training"]},
                         {runs_lib.PUBLISHED})
        self.assertEqual(round(self.training["TPU"]["cost"], 2), 56.11)
        self.assertEqual(round(self.training["GPU"]["cost"], 2), 119.23)
        self.assertEqual(round(self.report["training_ratios"]["gpu_cost_over_tpu"], 2), 2.12)
        # $ per 1M tokens processed (the paper's tokens/s): 6.12 vs 12.64.
        self.assertEqual(round(self.training["TPU"]["dollars_per_million_tokens"], 2), 6.12)
        self.assertEqual(round(self.training["GPU"]["dollars_per_million_tokens"], 2), 12.64)

    def test_serving(self):
        per_million = {p: {n: round(v["dollars_per_million_output_tokens"], 2)
                           for n, v in lengths.items()} for p, lengths in self.serving.items()}
        self.assertEqual((per_million["TPU"]["512"], per_million["GPU"]["512"]), (4.26, 4.12))
        self.assertEqual((per_million["TPU"]["4096"], per_million["GPU"]["4096"]), (4.96, 8.44))

    def test_ownership_and_the_day_claim(self):
        self.assertEqual((round(self.owned["TPU"]["at_hours"]["1"], 2),
                          round(self.owned["GPU"]["at_hours"]["1"], 2)), (77.63, 141.35))
        self.assertEqual(round(self.report["ownership"]["gpu_over_tpu_at_hours"]["1"], 2), 1.82)
        self.assertEqual((round(self.owned["TPU"]["at_hours"]["24"], 2),
                          round(self.owned["GPU"]["at_hours"]["24"], 2)), (572.59, 650.11))
        self.assertEqual(round(self.report["ownership"]["gpu_over_tpu_at_hours"]["24"], 2), 1.14)
        checks = {c["claim"]: c for c in self.report["checks"]}
        day = next(c for name, c in checks.items() if "a day of serving" in name)
        self.assertFalse(day["holds"])
        self.assertTrue(all(c["holds"] for c in checks.values() if c is not day))
        self.assertEqual(self.report["missing"], [])


class RunsReportTest(absltest.TestCase):

    def test_report_from_run_directories(self):
        tmp = self.create_tempdir().full_path
        directories = [
            fake_training(os.path.join(tmp, "tpu"), "tpu", "tpu-v5p-8", 2.0, [3.0, 2.0, 1.5],
                          eval_losses={2: 2.5, 3: 2.25},
                          data={"source": "/data/chats", "rows_read": 12000, "max_rows": 0,
                                "rows_capped": 0, "kept": 11990, "truncated": 0,
                                "dropped": {"too_long": 7, "empty": 3}}),
            fake_training(os.path.join(tmp, "gpu"), "gpu", "gpu-h100x2", 4.0, [3.0, 2.1, 1.6],
                          data={"source": "hf://datasets/zhuyaoyu/CodeV-R1-dataset/x.jsonl",
                                "rows_read": 10000, "max_rows": 10000, "rows_capped": 77000,
                                "kept": 9990, "truncated": 4, "dropped": {}}),
            fake_serving(os.path.join(tmp, "bench-tpu"), "tpu-v6e-8", {1.0: 500.0, 4.0: 1200.0}),
            fake_serving(os.path.join(tmp, "bench-gpu"), "gpu-h100x2", {1.0: 400.0, 4.0: 700.0}),
            fake_eval(os.path.join(tmp, "eval-tpu"), {"P1", "P2"}),
            fake_eval(os.path.join(tmp, "eval-gpu"), {"P2", "P3"}),
        ]
        out = os.path.join(tmp, "report")
        done = render(directories, out)
        self.assertEqual(done.returncode, 0, done.stderr[-3000:])
        with open(os.path.join(out, "report.json")) as f:
            report = json.load(f)
        training = {r["platform"]: r for r in report["training"]}
        # 3 steps of 3600 tokens in 6 s: 1800 tok/s; $16.80/h for 6 s.
        self.assertAlmostEqual(training["TPU"]["tokens_per_s"], 1800.0)
        self.assertAlmostEqual(training["TPU"]["trained_tokens_per_s"], 450.0)
        self.assertAlmostEqual(training["TPU"]["cost"], 16.80 * 6 / 3600)
        self.assertAlmostEqual(training["GPU"]["cost"], 22.12 * 12 / 3600)
        self.assertEqual(training["TPU"]["source"], os.path.join(directories[0], "metrics.jsonl"))
        # Validation records are not steps: the rates above ignore them.
        self.assertEqual((training["TPU"]["eval_loss"], training["GPU"]["eval_loss"]), (2.25, None))
        serving = {r["platform"]: r for r in report["serving"]}
        self.assertAlmostEqual(serving["TPU"]["input_lengths"]["4096"][
            "dollars_per_million_output_tokens"], 21.52 / (1200 * 3600 / 1e6))
        self.assertAlmostEqual(report["ownership"]["platforms"]["GPU"]["at_hours"]["24"],
                               22.12 * 12 / 3600 + 24 * 22.12)
        self.assertEqual(report["quality_differences"], [
            {"a": "eval-tpu", "b": "eval-gpu", "only_a": ["P1"], "only_b": ["P3"]}])
        self.assertEqual(report["missing"], [])
        for name in ("report.md", "report.html", "loss.png", "grad_norm.png", "serving.png",
                     "ownership.png"):
            self.assertTrue(os.path.exists(os.path.join(out, name)), name)
        with open(os.path.join(out, "report.html")) as f:
            page = f.read()
        self.assertEqual(page.count("data:image/png;base64,"), 4)  # self-contained
        with open(os.path.join(out, "report.md")) as f:
            text = f.read()
        for section in ("## Training", "## Serving", "## Cost of ownership", "## Quality"):
            self.assertIn(section, text)
        self.assertIn("(dashed: eval_loss on the validation set)", text)
        # What each run read of its data: every row, or the cap and what it left.
        self.assertIn("| TPU tpu-v5p-8 | /data/chats | 12,000 | 11,990 | too_long 7, empty 3 | "
                      "0 (no cap) | 0 |", text)
        self.assertIn("| 10,000 | 9,990 | none | 77,000 (first 10,000) | 4 |", text)

    def test_billed_time_prices_a_run_and_is_broken_down(self):
        tmp = self.create_tempdir().full_path
        # Logged every 5 steps: the records carry the run's totals over all 10 steps.
        segments = [
            {"start": 0.0, "resumed_from": 0, "first_step": [100.0, 1],
             "checkpoints": [[400.0, 5, 10.0]], "evaluations": [[300.0, 4, 20.0]],
             "heartbeat": [500.0, 7]},  # killed at step 7
            {"start": 1000.0, "resumed_from": 5, "first_step": [1050.0, 6],
             "checkpoints": [[1200.0, 10, 5.0]], "evaluations": [],
             "heartbeat": [1209.0, 10], "end": [1210.0, 10, "finished"]}]
        tpu = os.path.join(tmp, "tpu")
        _write(os.path.join(tpu, "run.json"), {"stack": "tpu", "machine": "tpu-v5p-8",
                                              "segments": segments})
        _write(os.path.join(tpu, "metrics.jsonl"), [
            {"step": step, "loss": 1.0, "tokens": 3600, "trained_tokens": 900,
             "step_time_s": 2.0, "mfu": 0.5, "total_step_time_s": 2.0 * step,
             "total_tokens": 3600 * step, "total_trained_tokens": 900 * step}
            for step in (5, 10)])
        gpu = fake_training(os.path.join(tmp, "gpu"), "gpu", "gpu-h100x2", 4.0, [3.0, 2.0])
        out = os.path.join(tmp, "report")
        done = render([tpu, gpu], out)
        self.assertEqual(done.returncode, 0, done.stderr[-3000:])
        with open(os.path.join(out, "report.json")) as f:
            training = {r["platform"]: r for r in json.load(f)["training"]}
        row = training["TPU"]
        self.assertEqual(row["hours_basis"], runs_lib.BILLED)
        self.assertAlmostEqual(row["hours"] * 3600, 500.0 + 210.0)  # both processes' lives
        self.assertAlmostEqual(row["cost"], 16.80 * 710 / 3600)
        self.assertAlmostEqual(row["step_hours"] * 3600, 20.0)  # 10 steps, not the 2 logged
        self.assertAlmostEqual(row["tokens_per_s"], 36000 / 20.0)
        self.assertAlmostEqual(row["startup_hours"] * 3600, 100.0 + 50.0)
        self.assertAlmostEqual(row["checkpoint_hours"] * 3600, 15.0)
        self.assertAlmostEqual(row["evaluation_hours"] * 3600, 20.0)
        self.assertAlmostEqual(row["lost_hours"] * 3600, 100.0)  # checkpoint 5 to the kill
        self.assertEqual((row["lost_steps"], row["segments"]), (2, 2))
        # A run directory from before segments were kept: step time, and said so.
        self.assertEqual(training["GPU"]["hours_basis"], runs_lib.STEPS_ONLY)
        self.assertAlmostEqual(training["GPU"]["cost"], 22.12 * 8 / 3600)
        with open(os.path.join(out, "report.md")) as f:
            text = f.read()
        self.assertIn("| TPU tpu-v5p-8 | tpu-v5p-8 | n/a | 710 s |", text)
        self.assertIn("| GPU gpu-h100x2 | gpu-h100x2 | n/a | 8 s * |", text)
        self.assertIn("* step time only: GPU gpu-h100x2.", text)
        self.assertIn("| TPU tpu-v5p-8 | 710 s | 20 s (3%) | 150 s (21%) | 15 s (2%) | "
                      "20 s (3%) | 100 s (14%), 2 steps | 2 |", text)

    def test_a_planned_run_beside_its_plan(self):
        tmp = self.create_tempdir().full_path
        tpu = fake_training(os.path.join(tmp, "tpu"), "tpu", "tpu-v5p-8", 2.0, [3.0, 2.0, 1.5])
        gpu = fake_training(os.path.join(tmp, "gpu"), "gpu", "gpu-h100x2", 4.0, [3.0, 2.0])
        plan = os.path.join(tmp, "plan.json")  # //report:plan's fields the report reads
        _write(plan, {"plans": [
            {"machine": "tpu-v5p-8", "fits": True, "tokens_per_s": 900.0,
             "hours": {"point": 1.0, "low": 0.5, "high": 2.0},  # billed: download, compile...
             "step_hours": {"point": 3 / 3600, "low": 2 / 3600, "high": 7 / 3600},
             "dollars": {"point": 0.014}, "calibration": {"count": 2}},
            {"machine": "gpu-h100x2", "fits": False}]})
        out = os.path.join(tmp, "report")
        done = render([tpu, gpu], out, f"--plan={plan}")
        self.assertEqual(done.returncode, 0, done.stderr[-3000:])
        with open(os.path.join(out, "report.json")) as f:
            planned, = json.load(f)["planned"]  # the GPU machine did not fit: no plan
        # The run kept step time only: 3 steps of 2 s against 3 s of planned steps;
        # 1800 tokens/s against 900.
        self.assertAlmostEqual(planned["hours_ratio"], 2.0)
        self.assertTrue(planned["in_interval"])
        self.assertAlmostEqual(planned["tokens_per_s_ratio"], 2.0)
        with open(os.path.join(out, "report.md")) as f:
            self.assertIn("| TPU tpu-v5p-8 | tpu-v5p-8 | steps only | 3 s (2 s to 7 s) | 6 s | "
                          "2.00 | yes |",
                          f.read())
        self.assertNotIn("priced for", done.stdout)
        # Every run read is beside its plan or said not to be.
        self.assertIn("missing: GPU gpu-h100x2: not beside a plan (", done.stdout)
        self.assertIn("has no plan that fits for gpu-h100x2)", done.stdout)
        # A plan priced otherwise than the report is said to be.
        done = render([tpu, gpu], out, f"--plan={plan}", "--region=europe-west4")
        self.assertEqual(done.returncode, 0, done.stderr[-3000:])
        self.assertIn("missing: the plan is priced for us-central1 (built-in prices), this "
                      "report for europe-west4 (built-in prices)", done.stdout)
        done = render([tpu], out, f"--plan={os.path.join(tmp, 'none.json')}")
        self.assertEqual(done.returncode, 1)
        self.assertIn("cannot read the plan", done.stderr)

    def test_unlike_runs_are_flagged_before_their_costs_are_compared(self):
        tmp = self.create_tempdir().full_path
        recipe = {"lora": {"rank": 64, "alpha": 64.0}, "optimizer": {"learning_rate": 1e-4}}
        v5p8 = {"packing": True, "attention": "splash", "remat": False, "per_device_batch": 2,
                "effective_batch": 8, "recipe": recipe}
        h100x2 = {"packing": False, "attention": "sdpa", "remat": True, "per_device_batch": 1,
                  "effective_batch": 8, "recipe": recipe}
        serving = [fake_serving(os.path.join(tmp, "bench-tpu"), "tpu-v6e-8", {4.0: 1200.0}),
                   fake_serving(os.path.join(tmp, "bench-gpu"), "gpu-h100x2", {4.0: 700.0})]

        def report(name, tpu, gpu):
            directories = [
                fake_training(os.path.join(tmp, name, "tpu"), "tpu", "tpu-v5p-8", 2.0, [3.0], **tpu),
                fake_training(os.path.join(tmp, name, "gpu"), "gpu", "gpu-h100x2", 4.0, [3.0], **gpu),
                *serving]
            out = os.path.join(tmp, name, "report")
            done = render(directories, out)
            self.assertEqual(done.returncode, 0, done.stderr[-3000:])
            with open(os.path.join(out, "report.json")) as f, \
                    open(os.path.join(out, "report.md")) as g:
                return json.load(f), g.read()

        data, text = report("unlike", v5p8, h100x2 | {
            "recipe": recipe | {"optimizer": {"learning_rate": 2e-4}}})
        self.assertEqual(data["unlike"], [
            "packing: TPU packed, GPU padded", "remat: TPU off, GPU on",
            "micro batch: TPU 2, GPU 1",
            "recipe optimizer.learning_rate: TPU 0.0001, GPU 0.0002"])
        self.assertIn("## Cost of ownership (unlike runs: packing, remat, micro batch, recipe "
                      "optimizer.learning_rate differ)", text)
        caveat = ("The TPU and GPU runs differ in more than their platform (packing: TPU "
                  "packed, GPU padded; ")
        self.assertIn(caveat, text)
        self.assertEqual(text.count("these ratios compare the two runs, not the two "
                                    "platforms. "), 2)  # the training and ownership ratios
        self.assertIn(caveat, text[text.index("GPU / TPU: ") - 400:])
        self.assertIn("| packed, splash, no remat, micro-batch 2 of 8 |", text)
        self.assertIn("| padded, sdpa, remat, micro-batch 1 of 8 |", text)
        # Packed on both, splash and sdpa both fused kernels: alike, no caveat.
        data, text = report("alike", v5p8 | {"per_device_batch": 1, "remat": True},
                            h100x2 | {"packing": True})
        self.assertEqual(data["unlike"], [])
        self.assertIn("## Cost of ownership\n", text)
        self.assertNotIn("differ in more than their platform", text)
        # The paper's runs state no setup: nothing is claimed either way.
        self.assertEqual(comparison.build(runs_lib.reference())["unlike"], [])

    def test_report_from_runs_in_a_bucket_into_a_bucket(self):
        tmp = self.create_tempdir().full_path
        local = [fake_training(os.path.join(tmp, "tpu"), "tpu", "tpu-v5p-8", 2.0, [3.0, 2.0]),
                 fake_eval(os.path.join(tmp, "eval-tpu"), {"P1"})]
        with gcs_emulator.running("bkt"):
            os.environ[storage.CACHE_ENV] = os.path.join(tmp, "cache")
            urls = [f"gs://bkt/runs/{os.path.basename(d)}" for d in local]
            for directory, url in zip(local, urls):
                storage.push(directory, url)
            done = render(urls, "gs://bkt/report")
            self.assertEqual(done.returncode, 0, done.stderr[-3000:])
            report = storage.read_json("gs://bkt/report/report.json")
            for name in ("config.json", "report.md", "report.html", "loss.png"):
                self.assertTrue(storage.exists(f"gs://bkt/report/{name}"), name)
        self.assertEqual(report["training"][0]["source"], "gs://bkt/runs/tpu/metrics.jsonl")
        self.assertAlmostEqual(report["training"][0]["tokens_per_s"], 1800.0)
        self.assertEqual(report["quality"][0]["label"], "eval-tpu")
        self.assertFalse(os.path.exists(os.path.join(os.getcwd(), "gs:")))

    def test_torn_last_lines_are_left_out_and_named(self):
        tmp = self.create_tempdir().full_path
        directories = [
            fake_training(os.path.join(tmp, "tpu"), "tpu", "tpu-v5p-8", 2.0, [3.0, 2.0, 1.5]),
            fake_training(os.path.join(tmp, "gpu"), "gpu", "gpu-h100x2", 4.0, [3.0, 2.1, 1.6]),
        ]
        for directory in directories:  # a run killed while appending step 4
            with open(os.path.join(directory, "metrics.jsonl"), "a") as f:
                f.write('{"step": 4, "loss": 1.4, "grad_no')
        out = os.path.join(tmp, "report")
        done = render(directories, out)
        self.assertEqual(done.returncode, 0, done.stderr[-3000:])
        with open(os.path.join(out, "report.json")) as f:
            report = json.load(f)
        training = {r["platform"]: r for r in report["training"]}
        self.assertAlmostEqual(training["TPU"]["tokens_per_s"], 1800.0)  # 3 whole steps
        self.assertEqual(report["repaired"], [
            f"{os.path.join(d, 'metrics.jsonl')}: a torn last line (a run stopped mid-write) "
            "was left out" for d in directories])
        with open(os.path.join(out, "report.md")) as f:
            self.assertIn("Repaired: " + report["repaired"][0], f.read())
        self.assertIn("dropped a torn last line", done.stderr)
        # A broken line that is not the last is no torn tail: one error line.
        path = os.path.join(directories[0], "metrics.jsonl")
        with open(path) as f:
            lines = f.readlines()
        with open(path, "w") as f:
            f.writelines([lines[0], lines[1][:20] + "\n", lines[2]])
        done = render(directories, out)
        self.assertEqual(done.returncode, 1)
        errors = [line for line in done.stderr.splitlines() if line.startswith("error: ")]
        self.assertEqual(len(errors), 1, done.stderr[-2000:])
        self.assertIn(f"{path}:2: not a JSON line", errors[0])

    def test_missing_inputs_are_said_missing(self):
        tmp = self.create_tempdir().full_path
        runs = runs_lib.load([fake_training(os.path.join(tmp, "tpu"), "tpu", "cpu", 1.0, [1.0])])
        report = comparison.build(runs)
        self.assertEqual(report["missing"], [
            "no GPU training run", "no serving sweep", "no evaluation",
            "no platform with both a training run and a serving sweep: no cost of ownership"])
        self.assertEqual(report["training"][0]["cost"], 0.0)  # the CPU machine is free

    def test_unknown_directory_is_a_user_error(self):
        tmp = self.create_tempdir().full_path
        with self.assertRaisesRegex(runs_lib.RunsError, "holds no run.json or summary.json"):
            runs_lib.load([tmp])


if __name__ == "__main__":
    absltest.main()
