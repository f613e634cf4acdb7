import json
import os
import threading

from absl.testing import absltest

from eval import completions
from eval import judge as judge_lib
from eval import problems
from eval import scoring


def _verdict(passed, reason=None, upstream=None, seconds=0.0):
    return judge_lib.Verdict(passed, reason or ("pass" if passed else "mismatch"),
                             passed if upstream is None else upstream, "." if passed else "R",
                             seconds=seconds)


def _result(problem, sample, passed, upstream=None):
    return scoring.Result(problem, sample, "h", "begin_done", _verdict(passed, upstream=upstream))


class FakeJudge:
    """Passes code containing 'good'; records what it was asked, in order."""

    def __init__(self):
        self.calls = []
        self._lock = threading.Lock()

    def judge(self, problem, code, expected_samples=None):
        del expected_samples
        with self._lock:
            self.calls.append((problem.id, code))
        return _verdict("good" in code)


def _problem(pid):
    return problems.Problem(pid, f"/p/{pid}_prompt.txt", f"/p/{pid}_ref.sv", f"/p/{pid}_test.sv")


class SummarizeTest(absltest.TestCase):

    def test_pass_at_k_problems_and_reference_failures(self):
        results = ([_result("A", i, i < 2) for i in range(5)] +      # 2 of 5
                   [_result("B", i, False) for i in range(5)] +      # 0 of 5
                   [_result("C", i, True, upstream=True) for i in range(5)])
        references = {"A": _verdict(True), "B": _verdict(False, "timeout"), "C": _verdict(True)}
        summary = scoring.summarize(results, references, asked_ks=[2, 9])
        self.assertEqual(set(summary["pass_at_k"]), {"1", "2", "5"})
        self.assertAlmostEqual(summary["pass_at_k"]["1"], (0.4 + 0 + 1) / 3)
        self.assertAlmostEqual(summary["pass_at_k"]["2"], (0.7 + 0 + 1) / 3)
        self.assertAlmostEqual(summary["pass_at_k"]["5"], (1 + 0 + 1) / 3)
        self.assertEqual(summary["problems"], {"A": {"n": 5, "passed": 2, "pass_at_1": 0.4},
                                               "B": {"n": 5, "passed": 0, "pass_at_1": 0.0},
                                               "C": {"n": 5, "passed": 5, "pass_at_1": 1.0}})
        for k, (low, high) in summary["pass_at_k_interval_95"].items():
            self.assertLessEqual(low, summary["pass_at_k"][k])
            self.assertGreaterEqual(high, summary["pass_at_k"][k])
        # Resampling 3 problems whose pass@1 is 0.4, 0 and 1: anything from all-B to all-C.
        low, high = summary["pass_at_k_interval_95"]["1"]
        self.assertLess(low, 0.3)
        self.assertGreater(high, 0.7)
        self.assertEqual(scoring.summarize(results, references, asked_ks=[2, 9]),
                         summary)  # seeded: the same intervals every time
        self.assertEqual(summary["reference_failures"], ["B"])
        self.assertEqual(summary["reference_failure_reasons"], {"B": "timeout"})
        self.assertAlmostEqual(summary["pass_at_k_without_reference_failures"]["1"], 0.7)
        self.assertEqual((summary["num_problems"], summary["num_samples"]), (3, 15))
        self.assertEqual(summary["reasons"], {"mismatch": 8, "pass": 7})

    def test_upstream_rule_reported_apart(self):
        results = [_result("A", 0, False, upstream=True), _result("A", 1, True)]
        summary = scoring.summarize(results, {"A": _verdict(True)})
        self.assertEqual(summary["pass_at_k"], {"1": 0.5, "2": 1.0})
        self.assertEqual(summary["pass_at_k_upstream_rule"], {"1": 1.0, "2": 1.0})

    def test_problem_differences(self):
        one = scoring.summarize([_result("A", 0, True), _result("B", 0, False),
                                 _result("C", 0, True)], {})
        other = scoring.summarize([_result("A", 0, False), _result("B", 0, True),
                                   _result("D", 0, True)], {})
        self.assertEqual(scoring.problem_differences(one, other),
                         {"only_a": ["A"], "only_b": ["B"]})

    def test_uneven_sample_counts_use_the_smallest_n(self):
        results = [_result("A", i, True) for i in range(5)] + [_result("B", 0, False)]
        summary = scoring.summarize(results, {}, asked_ks=[3])
        self.assertEqual(summary["pass_at_k"], {"1": 0.5})


class JudgeCompletionsTest(absltest.TestCase):

    def setUp(self):
        super().setUp()
        self.problems = {pid: _problem(pid) for pid in ("A", "B")}
        self.rows = [
            completions.Completion("A", 0, "[BEGIN]\ngood\n[DONE]"),
            completions.Completion("A", 1, "```verilog\ngood\n```"),   # same code as sample 0
            completions.Completion("B", 0, "[BEGIN]\nbad\n[DONE]"),
            completions.Completion("B", 1, "[BEGIN]\ngood\n[DONE]"),
            completions.Completion("A", 2, "nothing"),
        ]

    def test_identical_code_is_judged_once(self):
        fake = FakeJudge()
        results = scoring.judge_completions(fake, self.problems, self.rows, workers=2)
        self.assertLen(fake.calls, 4)
        self.assertEqual([(r.problem, r.sample, r.verdict.passed) for r in results],
                         [("A", 0, True), ("A", 1, True), ("B", 0, False), ("B", 1, True),
                          ("A", 2, False)])
        self.assertEqual(results[0].code_sha256, results[1].code_sha256)
        self.assertEqual([r.extraction for r in results],
                         ["begin_done", "fenced", "begin_done", "begin_done", "module_scan"])

    def test_without_dedup_every_sample_is_judged(self):
        fake = FakeJudge()
        scoring.judge_completions(fake, self.problems, self.rows, workers=2, dedup=False)
        self.assertLen(fake.calls, 5)

    def test_costliest_problems_first(self):
        fake = FakeJudge()
        results = scoring.judge_completions(fake, self.problems, self.rows, workers=1,
                                            dedup=False, costs={"A": 0.1, "B": 5.0})
        self.assertEqual([c[0] for c in fake.calls], ["B", "B", "A", "A", "A"])
        self.assertEqual([r.verdict.passed for r in results], [True, True, False, True, False])

    def test_unknown_problem(self):
        rows = [completions.Completion("Z", 0, "x")]
        with self.assertRaisesRegex(ValueError, "not in the data set"):
            scoring.judge_completions(FakeJudge(), self.problems, rows, workers=1)

    def test_write(self):
        out = self.create_tempdir().full_path
        results = scoring.judge_completions(FakeJudge(), self.problems, self.rows, workers=1)
        summary = scoring.summarize(results, {})
        scoring.write(out, results, summary)
        with open(os.path.join(out, scoring.RESULTS_FILE)) as f:
            rows = [json.loads(line) for line in f]
        self.assertLen(rows, 5)
        self.assertEqual(set(rows[0]), {
            "problem", "sample", "code_sha256", "extraction", "passed", "reason", "mismatches",
            "tb_samples", "upstream_pass", "upstream_class", "detail", "seconds",
            "second_tb_samples"})
        with open(os.path.join(out, scoring.SUMMARY_FILE)) as f:
            self.assertEqual(json.load(f), json.loads(json.dumps(summary)))
        self.assertEqual(sorted(os.listdir(out)), [scoring.RESULTS_FILE, scoring.SUMMARY_FILE])


if __name__ == "__main__":
    absltest.main()
