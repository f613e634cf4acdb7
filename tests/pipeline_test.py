"""//:pipeline end to end on a small setting: both trainers learning two sample
tasks (the demo), export, vLLM on CPU serving the fine-tuned adapter, a one-point
sweep, evaluations of the base and the fine-tuned model on VerilogEval and on the
sample tasks, the report.

Checks that the fine-tuned model passes sample tasks the base does not, that the
report has every section with figures from this run, that a rerun skips every
finished stage, and that a removed stage output shows up in the report as missing.
"""

import json
import os
import re
import shutil
import subprocess

from absl.testing import absltest

from common import binaries
from common import repo
from report import pipeline as pipeline_lib

# A user's recipe file: the one docs/your-fine-tune.md shows, copied out of the
# repository, its CPU variant (`@cpu`) given to every stage.
RECIPE = os.path.join(os.environ["TEST_TMPDIR"], "elsewhere", "my_recipe.py")


def write_recipe():
    """The page's recipe file, written outside the repository; its path."""
    with open(os.path.join(repo.code_root(), "docs", "your-fine-tune.md")) as f:
        blocks = re.findall(r"```python\n(.*?)```", f.read(), re.S)
    (text,) = [b for b in blocks if b.startswith("# my_recipe.py")]
    os.makedirs(os.path.dirname(RECIPE), exist_ok=True)
    with open(RECIPE, "w") as f:
        f.write(text)
    return RECIPE


# The demo on two short sample tasks: both stacks learn their rows, greedy answers.
# The TPU stack on one CPU device (its steps twice as fast as on cpu.py's 2 x 4
# mesh, which k8s_rehearsal_test trains on). Every stage takes the recipe file.
ARGS = ("--demo", "--demo_steps=30", "--problems=Prob001_zero,Prob005_notgate",
        f"--tpu_config={RECIPE}:train@cpu", f"--gpu_config={RECIPE}:gpu@cpu",
        f"--serve_config={RECIPE}:serve@cpu",
        f"--eval_args=--config={RECIPE}:eval@cpu,--temperature=0.0,--max_tokens=128",
        "--train_args=--config.tracking.report_to=tensorboard",
        "--sample_problems=Prob008_parity_gen,Prob022_dff_srst", "--sweep=64x4",
        "--tpu_args=--config.cpu_devices=1,--config.mesh.fsdp=1,--config.mesh.tp=1")


def pipeline(workdir, *extra):
    tmp = os.environ["TEST_TMPDIR"]
    env = binaries.child_env(JAX_PLATFORMS="cpu", **{  # a read-only home
        name: os.path.join(tmp, name.lower())
        for name in ("VLLM_CACHE_ROOT", "XDG_CACHE_HOME", "HF_HOME")})
    return subprocess.run(binaries.command("//report:pipeline", f"--workdir={workdir}",
                                           *ARGS, *extra), env=env, capture_output=True,
                          text=True, timeout=1800, check=False)


class ServePlansTest(absltest.TestCase):

    def test_a_backend_without_lora_serves_the_merged_export_then_the_base(self):
        self.assertTrue(pipeline_lib.serves_adapters("cpu.py"))
        self.assertTrue(pipeline_lib.serves_adapters("h100x2.py"))
        self.assertFalse(pipeline_lib.serves_adapters("v6e8.py"))
        finetuned, base = pipeline_lib.FINETUNED, pipeline_lib.BASE
        self.assertEqual(pipeline_lib._serve_plans(True, "B", "E"), [
            ("B", [f"--adapter={finetuned}=E/adapter"], base, (base, finetuned))])
        self.assertEqual(pipeline_lib._serve_plans(False, "B", "E"), [
            ("E/merged", [], finetuned, (finetuned,)), ("B", [], base, (base,))])


class RecipePlanTest(absltest.TestCase):

    def test_the_plan_takes_the_recipe(self):
        recipe = write_recipe()
        out = self.create_tempdir().full_path
        done = subprocess.run(binaries.command(
            "//report:plan", f"--config={recipe}:train", "--machines=gpu-h100x2",
            "--tokenizer=embedded", "--config.data.source=synthetic:300", f"--out={out}"),
            env=binaries.child_env(), capture_output=True, text=True, timeout=900, check=False)
        self.assertEqual(done.returncode, 0, done.stderr[-3000:])
        with open(os.path.join(out, "plan.json")) as f:
            plan = json.load(f)
        self.assertEqual((plan["recipe"]["lora"]["rank"], plan["recipe"]["data"]["epochs"]),
                         (32, 2))
        self.assertTrue(plan["plans"][0]["fits"])


class PipelineTest(absltest.TestCase):

    def test_whole_system(self):
        write_recipe()
        workdir = os.path.join(absltest.get_default_test_tmpdir(), "pipeline")
        first = pipeline(workdir)
        logs = os.path.join(workdir, "logs")
        tails = "".join(f"\n== {name}\n{open(os.path.join(logs, name)).read()[-2000:]}"
                        for name in sorted(os.listdir(logs))) if os.path.isdir(logs) else ""
        self.assertEqual(first.returncode, 0, first.stdout + first.stderr[-3000:] + tails)
        print(first.stdout)  # each stage and its seconds
        with open(os.path.join(workdir, "tpu", "run.json")) as f:
            self.assertEqual(json.load(f)["devices"], 1)  # --tpu_args: the TPU trainer's
        # The recipe reached every stage: its training fields (those the demo does
        # not set), its serving config, its evaluation's n.
        for stack in ("tpu", "gpu"):
            with open(os.path.join(workdir, stack, "config.json")) as f:
                config = json.load(f)
            self.assertEqual((config["tracking"]["project"], config["data"]["epochs"] > 0),
                             ("my-chats", True), stack)
        with open(os.path.join(workdir, "eval-finetuned", "config.json")) as f:
            self.assertEqual(json.load(f)["n"], 1)
        with open(os.path.join(workdir, "report", "report.json")) as f:
            report = json.load(f)
        # Both training runs, on the CPU machine: figures from their metrics.
        self.assertEqual(sorted(r["platform"] for r in report["training"]), ["GPU", "TPU"])
        for row in report["training"]:
            self.assertGreater(row["tokens_per_s"], 0)
            self.assertEqual(row["machine"], "cpu")
        # The sweep of the fine-tuned model, and the evaluations of both models on
        # VerilogEval and on the sample tasks, compared model against model.
        (serving,) = report["serving"]
        self.assertGreater(serving["input_lengths"]["64"]["peak_output_tok_s"], 0)
        self.assertEqual({q["label"]: q["problems"] for q in report["quality"]}, {
            "eval-base": 2, "eval-finetuned": 2, "eval-sample-base": 2,
            "eval-sample-finetuned": 2})
        self.assertEqual(sorted((d["a"], d["b"]) for d in report["quality_differences"]), [
            ("eval-base", "eval-finetuned"), ("eval-sample-base", "eval-sample-finetuned")])
        # What was learned survives export, serving and evaluation: the fine-tuned
        # model reproduces the sample tasks it was trained on, the base does not.
        passed = {q["label"]: q["pass_at_k"]["1"] for q in report["quality"]}
        self.assertEqual(passed["eval-sample-base"], 0.0)
        self.assertGreater(passed["eval-sample-finetuned"], passed["eval-sample-base"])
        with open(os.path.join(workdir, "sample-tasks", "problems.txt")) as f:
            self.assertLen(f.read().split(), 40)
        # Only what a CPU run cannot have is missing: no TPU or GPU machine to pair.
        self.assertEqual(report["missing"], [
            "no platform with both a training run and a serving sweep: no cost of ownership"])
        with open(os.path.join(workdir, "report", "report.md")) as f:
            text = f.read()
        for section in ("## Training", "## Serving", "## Cost of ownership", "## Quality"):
            self.assertIn(section, text)
        for name in ("loss.png", "grad_norm.png", "serving.png", "report.html"):
            self.assertTrue(os.path.exists(os.path.join(workdir, "report", name)), name)

        # Rerun: every finished stage is skipped (no server is started either).
        again = pipeline(workdir)
        self.assertEqual(again.returncode, 0, again.stderr[-3000:])
        for stage in ("tpu_sft", "gpu_sft", "export", "bench", "eval"):
            self.assertIn(f"{stage}: complete, skipped", again.stdout)
        self.assertNotIn("starting vLLM", again.stdout)

        # A stage output removed: the report says so instead of inventing it.
        shutil.rmtree(os.path.join(workdir, "bench"))
        report_only = pipeline(workdir, "--stages=report")
        self.assertEqual(report_only.returncode, 0, report_only.stderr[-3000:])
        with open(os.path.join(workdir, "report", "report.json")) as f:
            self.assertIn("no serving sweep", json.load(f)["missing"])


if __name__ == "__main__":
    absltest.main()
