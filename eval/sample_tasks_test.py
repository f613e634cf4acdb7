import json
import os
import re

from absl.testing import absltest

from data import codev
from data import sources
from eval import extract
from eval import judge as judge_lib
from eval import problems
from eval import protocols
from eval import sample_tasks
from eval import sandbox
from eval import scoring


def _judge():
    return judge_lib.Judge(sandbox.Sandbox(sandbox.BWRAP, sandbox.Limits()))


class HeaderTest(absltest.TestCase):

    def test_ansi_headers(self):
        header = sample_tasks.parse_header("""
            // a comment with module fake(
            module m #(parameter W = 8, parameter [3:0] D = (2 + 1)) (
                input  wire clk, rst_n,
                input  wire signed [W-1:0] a, b,  /* two of them */
                output reg  [W:0] y,
                output z
            );
            endmodule""")
        self.assertEqual(header.module, "m")
        self.assertEqual(header.parameters, (("W", "8"), ("D", "(2 + 1)")))
        self.assertEqual([(p.direction, p.name, p.range, p.signed) for p in header.ports], [
            ("input", "clk", "", False), ("input", "rst_n", "", False),
            ("input", "a", "[W-1:0]", True), ("input", "b", "[W-1:0]", True),
            ("output", "y", "[W:0]", False), ("output", "z", "", False)])

    def test_headers_it_cannot_use(self):
        for code, message in [
                ("module a(input x, output y); endmodule module b(); endmodule",
                 "expected one module, found 2"),
                ("module a(x, y); input x; output y; endmodule", "only ANSI-style"),
                ("module a(input x); endmodule", "has no output"),
                ("module a(inout x, output y); endmodule", "inout"),
                ("module a; endmodule", "no port list")]:
            with self.assertRaisesRegex(sample_tasks.SampleTaskError, message):
                sample_tasks.parse_header(code)

    def test_reset_names(self):
        self.assertEqual([sample_tasks._reset_level(n) for n in
                          ("rst", "rst_n", "reset", "areset", "arst_n", "srst", "clr", "rstn",
                           "en", "first")],
                         [1, 0, 1, 1, 0, 1, 1, 0, None, None])


class DatasetTest(absltest.TestCase):
    """The 40 sample tasks as a data set, judged by the real judge (iverilog)."""

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.dir = os.path.join(absltest.get_default_test_tmpdir(), "sample-tasks")
        cls.ids, cls.skipped = sample_tasks.write_dataset(sources.SAMPLE, cls.dir)
        cls.problems = problems.load(cls.dir)
        cls.judge = _judge()

    def test_every_row_is_a_problem_whose_reference_passes(self):
        rows = [r for r in codev.read_rows(sources.SAMPLE) if isinstance(r, codev.Row)]
        self.assertLen(self.ids, len(rows))
        self.assertEqual(self.skipped, {})
        self.assertEqual([p.id for p in self.problems], self.ids)
        verdicts = scoring.check_references(self.judge, self.problems, scoring.default_workers())
        failing = {pid: (v.reason, v.detail) for pid, v in verdicts.items() if not v.passed}
        self.assertEqual(failing, {})
        for verdict in verdicts.values():
            self.assertGreaterEqual(verdict.tb_samples, 200)  # every check point counted
        first = self.problems[0]
        self.assertEqual(first.id, "Prob001_mux4_8")
        self.assertIn("Design a module named TopModule", first.prompt())
        self.assertNotRegex(first.prompt(), r"\bmux4_8\b")

    def _verdict(self, problem_id, transform):
        problem = problems.problem(self.dir, problem_id)
        code = transform(problem.reference_as_sample())
        self.assertNotEqual(code, problem.reference_as_sample())
        return self.judge.judge(problem, code)

    def test_wrong_designs_fail(self):
        # Combinational: two select cases swapped.
        verdict = self._verdict("Prob001_mux4_8", lambda c: c.replace(
            "2'd2:    y = d2;", "2'd2:    y = d3;"))
        self.assertFalse(verdict.passed)
        self.assertRegex(verdict.detail, r"Mismatches: [1-9]\d* in")
        # Sequential: a synchronous reset that never clears.
        verdict = self._verdict("Prob022_dff_srst", lambda c: c.replace("q <= 1'b0;", "q <= d;"))
        self.assertFalse(verdict.passed)
        # Sequential: an output that is X where the reference drives a value.
        verdict = self._verdict("Prob022_dff_srst", lambda c: re.sub(
            r"q <= d;", "q <= 1'bx;", c))
        self.assertFalse(verdict.passed)

    def test_rewritten_in_another_style_still_passes(self):
        problem = problems.problem(self.dir, "Prob001_mux4_8")
        code = ("module TopModule(input [7:0] d0, d1, d2, d3, input [1:0] sel, "
                "output [7:0] y);\n  assign y = sel[1] ? (sel[0] ? d3 : d2) : "
                "(sel[0] ? d1 : d0);\nendmodule\n")
        self.assertTrue(self.judge.judge(problem, code).passed)


    def test_training_rows_ask_as_the_evaluation_asks_and_answer_correctly(self):
        with open(os.path.join(self.dir, problems.TRAINING_ROWS)) as f:
            rows = {row["id"]: row for row in map(json.loads, f)}
        self.assertEqual(sorted(rows), sorted(self.ids))
        for problem_id in ("Prob001_mux4_8", "Prob022_dff_srst"):
            problem = problems.problem(self.dir, problem_id)
            *asked, answer = rows[problem_id]["messages"]
            self.assertEqual(asked, protocols.messages("upstream", problem.prompt()))
            extracted = extract.extract(answer["content"])
            self.assertEqual(extracted.method, extract.BEGIN_DONE)
            self.assertTrue(self.judge.judge(problem, extracted.code).passed, problem_id)

if __name__ == "__main__":
    absltest.main()
