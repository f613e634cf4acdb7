"""The 156 reference solutions, submitted as samples, on the installed iverilog."""

from unittest import mock

from absl.testing import absltest

from eval import completions
from eval import judge as judge_lib
from eval import problems
from eval import sandbox
from eval import scoring
from eval import testing

# Icarus Verilog 11 (Debian 12); see ../shared/verilog-eval/README.md.
FAILING_ON_IVERILOG_11 = {
    "Prob082_lfsr32": "timeout",                 # the stimulus outruns the testbench's limit
    "Prob099_m2014_q6c": "error",                # testbench ports Y2/Y4 vs Y1/Y3
    "Prob141_count_clock": "timeout",
    "Prob151_review2015_fsm": "error",           # enum cast: "sorry: ... not yet supported"
    "Prob156_review2015_fancytimer": "error",
}


class ReferencesTest(absltest.TestCase):

    def test_references_pass_exactly_where_they_pass_on_iverilog_11(self):
        all_problems = problems.load(testing.dataset_dir())
        judge = judge_lib.Judge(sandbox.Sandbox(sandbox.BWRAP, sandbox.Limits()))
        self.assertIn("version 11.", judge_lib.iverilog_version(judge.iverilog))
        workers = scoring.default_workers()
        references = scoring.check_references(judge, all_problems, workers)
        failing = {pid: v.reason for pid, v in references.items() if not v.passed}
        self.assertEqual(failing, FAILING_ON_IVERILOG_11)

        # The same solutions as model answers go through extraction and the
        # sample path, with the reference's sample counts enforced.
        rows = [completions.Completion(p.id, 0, testing.reference_completion(p))
                for p in all_problems]
        results = scoring.judge_completions(
            judge, {p.id: p for p in all_problems}, rows, workers,
            scoring.expected_tb_samples(references), costs=scoring.reference_seconds(references))
        passed = {r.problem for r in results if r.verdict.passed}
        self.assertLen(passed, 151)
        self.assertEqual(passed, {p.id for p in all_problems} - set(FAILING_ON_IVERILOG_11))
        self.assertEqual({r.problem for r in results if r.verdict.upstream_pass}, passed)
        # Where the testbench draws its stimulus at random, each passed again under
        # a second stimulus, run to the testbench's end (eval/judge.py).
        second = [r for r in results if r.verdict.second_tb_samples is not None]
        self.assertGreater(len(second), 100)
        for r in second:
            self.assertEqual(r.verdict.second_tb_samples, r.verdict.tb_samples, r.problem)
        summary = scoring.summarize(results, references)
        self.assertEqual(summary["reference_failures"], sorted(FAILING_ON_IVERILOG_11))
        self.assertAlmostEqual(summary["pass_at_k"]["1"], 151 / 156)
        self.assertEqual(summary["pass_at_k_without_reference_failures"], {"1": 1.0})

    def test_every_reference_elaborates_in_the_isolation_harness(self):
        # No reference needs the harness (none may reach outside by its tokens);
        # run through it anyway, none may be refused.
        all_problems = problems.load(testing.dataset_dir())
        judge = judge_lib.Judge(sandbox.Sandbox(sandbox.BWRAP, sandbox.Limits()))
        with mock.patch.object(judge_lib.rtl, "reaches_outside", return_value=True) as isolate:
            references = scoring.check_references(judge, all_problems,
                                                  scoring.default_workers())
        self.assertLen(isolate.call_args_list, len(all_problems))
        failing = {pid: v.reason for pid, v in references.items() if not v.passed}
        self.assertEqual(failing, FAILING_ON_IVERILOG_11)


if __name__ == "__main__":
    absltest.main()
