import json
import os
import subprocess

from absl.testing import absltest

from common import binaries
from common import gcs_emulator
from common import storage
from eval import problems
from eval import testing

IDS = ["Prob001_zero", "Prob002_m2014_q4i", "Prob035_count1to10"]


def _run(*args):
    env = binaries.child_env()
    return subprocess.run(binaries.command("//eval:verilog_eval", *args), env=env,
                          capture_output=True, text=True, timeout=600, check=False)


def _load(out_dir, name):
    with open(os.path.join(out_dir, name)) as f:
        if name.endswith(".jsonl"):
            return [json.loads(line) for line in f]
        return json.load(f)


class VerilogEvalTest(absltest.TestCase):

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.problems = problems.load(testing.dataset_dir(), IDS)

    def test_scores_a_completions_file_without_a_server(self):
        zero, _, counter = self.problems
        rows = [
            {"problem": zero.id, "completion": testing.reference_completion(zero)},
            {"problem": zero.id, "completion": "```verilog\nmodule TopModule(output zero);\n"
                                               "assign zero = 1;\nendmodule\n```"},
            {"problem": counter.id, "completion": "<think>easy</think>\n" +
                                                  testing.reference_completion(counter)},
            {"problem": counter.id, "completion": "[BEGIN]\nmodule TopModule(\n[DONE]"},
            {"problem": counter.id, "completion": "```verilog\nmodule TopModule(output q);\n"
                                                  "initial $finish;\nendmodule\n```"},
        ]
        samples = os.path.join(self.create_tempdir().full_path, "completions.jsonl")
        with open(samples, "w") as f:
            f.write("".join(json.dumps(r) + "\n" for r in rows))
        out = self.create_tempdir().full_path
        result = _run(f"--samples={samples}", f"--out_dir={out}", "--workers=2")
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("pass@1 0.4167  pass@2 0.8333  (2 problems, 5 samples)", result.stdout)
        self.assertIn("verdicts: pass 2, mismatch 1, syntax_error 1, not_rtl 1",
                      result.stdout)
        self.assertIn("not RTL: $finish 1", result.stdout)

        summary = _load(out, "summary.json")
        self.assertEqual(summary["problems"],
                         {zero.id: {"n": 2, "passed": 1, "pass_at_1": 0.5},
                          counter.id: {"n": 3, "passed": 1, "pass_at_1": 1 / 3}})
        self.assertEqual(summary["not_rtl"], {"$finish": 1})
        self.assertEqual(summary["reference_failures"], [])
        self.assertIn("Icarus Verilog", summary["iverilog"])
        results = _load(out, "results.jsonl")
        self.assertEqual([(r["problem"], r["sample"], r["passed"], r["reason"]) for r in results],
                         [(zero.id, 0, True, "pass"), (zero.id, 1, False, "mismatch"),
                          (counter.id, 0, True, "pass"), (counter.id, 1, False, "syntax_error"),
                          (counter.id, 2, False, "not_rtl")])
        self.assertEqual(results[4]["detail"], "$finish (line 2)")
        self.assertEqual(len(results[0]["code_sha256"]), 64)
        config = _load(out, "config.json")
        self.assertEqual((config["samples"], config["workers"]), (samples, 2))

    def test_writes_its_results_into_a_bucket(self):
        zero = self.problems[0]
        samples = os.path.join(self.create_tempdir().full_path, "completions.jsonl")
        with open(samples, "w") as f:
            f.write(json.dumps({"problem": zero.id,
                                "completion": testing.reference_completion(zero)}) + "\n")
        os.environ[storage.CACHE_ENV] = self.create_tempdir().full_path
        with gcs_emulator.running("bkt"):
            result = _run(f"--samples={samples}", "--out_dir=gs://bkt/eval", "--workers=1")
            self.assertEqual(result.returncode, 0, result.stderr[-3000:])
            summary = storage.read_json("gs://bkt/eval/summary.json")
            self.assertTrue(storage.exists("gs://bkt/eval/results.jsonl"))
            self.assertEqual(storage.read_json("gs://bkt/eval/config.json")["out_dir"],
                             "gs://bkt/eval")
        self.assertEqual(summary["pass_at_k"], {"1": 1.0})

    def test_samples_from_a_server_then_resumes(self):
        by_spec = self.problems

        def answer(body, count):
            problem = testing.problem_of(body["messages"], by_spec)
            return 200, [testing.reference_completion(problem)] * count

        out = self.create_tempdir().full_path
        with testing.FakeChatServer(answer) as server:
            args = [f"--base_url={server.base_url}", f"--problems={','.join(IDS)}", "--n=2",
                    "--temperature=0.8", "--top_p=0.95", "--max_tokens=64", f"--out_dir={out}"]
            result = _run(*args)
            self.assertEqual(result.returncode, 0, result.stderr)
            self.assertLen(server.requests, 3)
            request = server.requests[0]
            self.assertEqual([m["role"] for m in request["messages"]], ["system", "user"])
            self.assertIn("Enclose your code with [BEGIN] and [DONE]",
                          request["messages"][1]["content"])
            summary = _load(out, "summary.json")
            self.assertEqual(summary["pass_at_k"], {"1": 1.0, "2": 1.0})
            self.assertEqual(sorted(summary["problems"]), IDS)
            self.assertLen(_load(out, "samples.jsonl"), 6)
            self.assertEqual(_load(out, "config.json")["model"], "fake-model")

            # The same command again: nothing is sampled twice, scores are the same.
            again = _run(*args)
            self.assertEqual(again.returncode, 0, again.stderr)
            self.assertLen(server.requests, 3)
            self.assertEqual(_load(out, "summary.json")["pass_at_k"], summary["pass_at_k"])

            # A smaller n scores the first n saved samples of each problem.
            fewer = _run(*[a if a != "--n=2" else "--n=1" for a in args])
            self.assertEqual(fewer.returncode, 0, fewer.stderr)
            self.assertLen(server.requests, 3)
            self.assertEqual({v["n"] for v in _load(out, "summary.json")["problems"].values()},
                             {1})

            # Other sampling settings on the same run directory are refused.
            changed = _run(*args[:-4], "--temperature=0.2", "--top_p=0.95",
                           "--max_tokens=64", f"--out_dir={out}")
            self.assertNotEqual(changed.returncode, 0)
            self.assertIn("temperature: saved 0.8, now 0.2", changed.stderr)
            self.assertLen(server.requests, 3)

    def test_reference_protocol(self):
        by_spec = self.problems

        def answer(body, count):
            # The reference asks for a ```verilog block; answer in one, with a
            # thinking block before it that must be ignored.
            code = testing.problem_of(body["messages"], by_spec).reference_as_sample()
            return 200, [f"<think>```verilog\nwrong\n```</think>```verilog\n{code}```"] * count

        out = self.create_tempdir().full_path
        with testing.FakeChatServer(answer) as server:
            result = _run(f"--base_url={server.base_url}", f"--problems={','.join(IDS)}",
                          "--n=2", "--protocol=reference", f"--out_dir={out}")
            self.assertEqual(result.returncode, 0, result.stderr)
            request = server.requests[0]
            self.assertEqual([m["role"] for m in request["messages"]], ["user"])
            self.assertIn("```verilog", request["messages"][0]["content"])
        summary = _load(out, "summary.json")
        self.assertEqual(summary["protocol"], "reference")
        self.assertEqual(summary["sampling"]["protocol"], "reference")
        self.assertEqual(summary["pass_at_k"], {"1": 1.0, "2": 1.0})
        self.assertEqual(summary["pass_at_k_interval_95"], {"1": [1.0, 1.0], "2": [1.0, 1.0]})
        self.assertEqual(summary["extraction"], {"fenced": 6})

    def test_flag_and_config_field_both_given(self):
        result = _run("--n=3", "--config.n=4", f"--out_dir={self.create_tempdir().full_path}")
        self.assertNotEqual(result.returncode, 0)
        self.assertIn("--n and --config.n both given", result.stderr)

    def test_out_dir_is_required(self):
        result = _run("--samples=/nonexistent.jsonl")
        self.assertNotEqual(result.returncode, 0)
        self.assertIn("--out_dir is required", result.stderr)


if __name__ == "__main__":
    absltest.main()
