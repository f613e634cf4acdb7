import hashlib
import os
import shutil
import subprocess
from unittest import mock

from absl.testing import absltest

from eval import completions
from eval import judge
from eval import problems
from eval import rtl
from eval import sandbox
from eval import scoring
from eval import testing

ZERO_HEADER = "module TopModule(output zero);\n"


def _zero(body):
    return ZERO_HEADER + body + "\nendmodule\n"


def _report(n_mismatch, n_samples):
    return f"Mismatches: {n_mismatch} in {n_samples} samples"


class AnalyzeLogTest(absltest.TestCase):
    """Upstream's log rules, on logs written by hand."""

    def _class(self, log):
        return judge.analyze_log(log).upstream_class

    def test_upstream_classes(self):
        cases = {
            "a.sv:3: syntax error\nMismatches: 0 in 20 samples": "S",
            "a.sv:3: error: Unknown module type: TopModule\n": "m",
            "error: This assignment requires an explicit cast\n": "e",
            "a.sv:1: error: Sized numeric constant must have a size greater than zero": "0",
            "warning: always_comb process has no sensitivities\n" + _report(0, 9): "n",
            "a.sv:5: warning: @* found no sensitivities so it will never trigger.": "n",
            "a.sv:4: : q is declared here as wire.\n": "w",
            "error: Unable to bind wire/reg/memory `clk' in `tb.top'\n": "c",
            "error: Unable to bind wire/reg/memory `x' in `tb.top'\n": "p",
            "TIMEOUT\n" + _report(0, 20): "T",
            "1 error(s) during elaboration.\n" + _report(0, 20): "C",
            _report(0, 20): ".",
            _report(3, 20): "R",
            "Hint: nothing\n": "R",
        }
        for log, want in cases.items():
            with self.subTest(log=log):
                self.assertEqual(self._class(log), want)

    def test_report_line_must_be_exact(self):
        self.assertEqual(self._class("  " + _report(0, 20)), "R")
        self.assertEqual(self._class(_report(0, 20) + " (faked)"), "R")

    def test_counts_and_values(self):
        got = judge.analyze_log(f"{_report(0, 20)}\n{_report(0, 0)}\n")
        self.assertEqual((got.upstream_class, got.mismatches, got.tb_samples, got.report_lines),
                         (".", 0, 20, 2))

    def _verdict(self, log, status="preprocess 0\nisolate 0\ncompile 0\nsimulate 0\n",
                 expected=None,
                 timeout=False, limit=False, phase=None, outside=(), report=(0, 20)):
        run = sandbox.Run(0, timeout, 0.1, status, phase)
        return judge.verdict_from(log, status, run, limit, expected, outside=outside,
                                  report=report)

    def test_the_stamped_report_decides_not_the_log(self):
        clean = self._verdict(_report(0, 20), expected=20)
        self.assertTrue(clean.passed)
        self.assertEqual((clean.reason, clean.mismatches, clean.tb_samples), ("pass", 0, 20))
        for log, report, expected, reason in [
            (_report(0, 20), None, 20, judge.NO_REPORT),  # the sample ended it first
            (_report(0, 20), (3, 20), 20, judge.MISMATCH),  # a forged line, real errors
            (_report(0, 20), (0, 0), None, judge.NO_SAMPLES),
            (_report(0, 20), (0, 10), 20, judge.EARLY_FINISH),
        ]:
            with self.subTest(report=report):
                verdict = self._verdict(log, expected=expected, report=report)
                self.assertFalse(verdict.passed)
                self.assertTrue(verdict.upstream_pass)  # upstream would have passed these
                self.assertEqual(verdict.reason, reason)
        # Extra or missing `Mismatches:` lines do not matter once the stamp is there.
        self.assertTrue(self._verdict(f"{_report(0, 20)}\n{_report(0, 0)}", expected=20).passed)
        self.assertTrue(self._verdict("", expected=20).passed)

    def test_stamped_lines_are_found_and_removed(self):
        log = f"{_report(0, 20)}\nabc 0 20\nS3CRET 1 20\n  S3CRET 0 20\nS3CRET 0 20 x\n"
        kept, report = judge.stamped_report(log, "S3CRET")
        self.assertEqual(report, (1, 20))
        self.assertNotIn("\nS3CRET 1 20\n", kept)
        self.assertIn("  S3CRET 0 20", kept)  # not exactly the stamp: sample output
        self.assertIsNone(judge.stamped_report("S3CRET 0 20\nS3CRET 0 20", "S3CRET")[1])

    def test_sandbox_events_come_first(self):
        log = _report(0, 20)
        self.assertEqual(self._verdict(log, timeout=True).reason, judge.WALL_TIMEOUT)
        self.assertEqual(self._verdict(log, limit=True).reason, judge.LOG_LIMIT)
        compiled = "preprocess 0\nisolate 0\ncompile 0\n"
        self.assertEqual(self._verdict(log, "", phase=0).reason, judge.COMPILE_TIMEOUT)
        self.assertEqual(self._verdict(log, "preprocess 0\n", phase=1).reason,
                         judge.COMPILE_TIMEOUT)
        self.assertEqual(self._verdict(log, "preprocess 0\nisolate 0\n", phase=2).reason,
                         judge.COMPILE_TIMEOUT)
        self.assertEqual(self._verdict(log, compiled, phase=3).reason, "timeout")
        self.assertEqual(self._verdict(log, compiled + "simulate 152\n").reason,
                         judge.CPU_LIMIT)
        self.assertEqual(self._verdict(log, compiled + "simulate 153\n").reason,
                         judge.LOG_LIMIT)
        # A simulator that crashed or was killed otherwise, whatever it printed.
        crashed = self._verdict(log, compiled + "simulate 139\n")
        self.assertEqual((crashed.reason, crashed.detail),
                         (judge.SIMULATOR_ERROR, "vvp exited with 139"))
        reached = self._verdict(log, outside=["tb.stats1.errors"])
        self.assertEqual((reached.passed, reached.reason, reached.upstream_pass),
                         (False, judge.OUTSIDE_REFERENCE, True))
        self.assertIn("tb.stats1.errors", reached.detail)

    def test_outside_references_from_the_isolated_elaboration(self):
        isolated = ("s.sv:3: error: Could not find variable ``good1.zero'' in "
                    "``g4_isolation_1.top_module1''\n"
                    "s.sv:4: error: Unable to bind wire/reg/memory `tb.good1.zero' in "
                    "`g4_isolation_1.top_module1'\n"
                    "s.sv:5: error: Unable to bind wire/reg/memory `unit_zero' in "
                    "`g4_isolation_1.top_module1'\n"
                    "s.sv:6: error: Unknown module type: RefModule\n")
        # Failing alone while the full compile succeeds is reaching outside.
        self.assertEqual(judge.outside_references(isolated, {"isolate": 2, "compile": 0}),
                         ["RefModule", "good1.zero", "tb.good1.zero", "unit_zero"])
        self.assertEqual(judge.outside_references("x.sv:1: error: something new\n",
                                                  {"isolate": 1, "compile": 0}),
                         ["x.sv:1: error: something new"])
        # Failing in both is a compile error, judged as upstream; so is not isolating.
        self.assertEqual(judge.outside_references(isolated, {"isolate": 2, "compile": 1}), [])
        self.assertEqual(judge.outside_references("", {"isolate": 0, "compile": 0}), [])
        # Fails closed: an isolated elaboration that exits 0 but warns about a name
        # or scope it cannot resolve reached outside (the old judge trusted the 0).
        warned = "s.sv:7: warning: Cannot find scope `good1' in `g4_isolation_1.top_module1'\n"
        self.assertEqual(judge.outside_references(warned, {"isolate": 0, "compile": 0}),
                         ["good1"])
        self.assertEqual(judge.outside_references("s.sv:2: warning: Some other thing.\n",
                                                  {"isolate": 0, "compile": 0}), [])
        self.assertEqual(self._verdict(_report(4, 20), report=(4, 20)).reason, judge.MISMATCH)
        self.assertEqual(self._verdict("", report=None).reason, judge.NO_REPORT)

    def test_the_isolation_harness_mirrors_the_testbench(self):
        testbench = ("module tb;\n  // TopModule commented (x);\n"
                     "  TopModule top_module1 (.a(a));\n  TopModule #(.W(8)) wide [1:0] (.a(a));\n"
                     "endmodule\n")
        self.assertEqual(judge.isolation_harness(testbench, "h"),
                         "module h;\n  TopModule top_module1 ();\n"
                         "  TopModule wide ();\nendmodule\n")
        with open(os.path.join(testing.dataset_dir(), "Prob001_zero_test.sv")) as f:
            self.assertIn("TopModule top_module1 ();", judge.isolation_harness(f.read(), "h"))

    def test_names_a_design_could_reach_upward(self):
        self.assertEqual(judge.upward_names(
            "module tb;\n function automatic integer f(input a); f = a; endfunction\n"
            " function [3:0] g; input x; g = x; endfunction\n"
            " function logic [7:0] h (input x); return x; endfunction\n"
            " task automatic t; endtask\n task wait_for_end_of_timestep; endtask\n"
            " initial begin : blk end\n initial fork : fk join\n"
            " // task commented; \n initial $display(\"task quoted;\");\nendmodule\n"),
            {"f", "g", "h", "t", "wait_for_end_of_timestep", "blk", "fk"})
        with open(os.path.join(testing.dataset_dir(), "Prob001_zero_test.sv")) as f:
            self.assertEqual(judge.upward_names(f.read()),
                             {"wavedrom_start", "wavedrom_stop", "wait_for_end_of_timestep"})

    def test_what_a_testbench_declares_outside_its_modules(self):
        self.assertFalse(judge.declares_outside_modules(
            "`timescale 1 ps/1 ps\n`define OK 12\n`define LONG 1 \\\n  + 2\n/* c */\n"
            "module stimulus_gen; endmodule\nmodule tb(); wire x; endmodule\n"
            "primitive p(o, a); output o; input a; table 0:1; 1:0; endtable endprimitive\n"))
        for declaration in ("logic unit_zero = 1'b0;", "typedef int t;",
                            "package tb_pkg; localparam x = 0; endpackage",
                            "function int f(); return 0; endfunction"):
            with self.subTest(declaration=declaration):
                self.assertTrue(judge.declares_outside_modules(
                    "module tb; endmodule\n" + declaration))
        for name in os.listdir(testing.dataset_dir()):  # VerilogEval's: none
            if name.endswith(".sv"):
                with open(os.path.join(testing.dataset_dir(), name)) as f:
                    self.assertFalse(judge.declares_outside_modules(f.read()), name)


# A testbench of our own for weakness 4: the first %d samples directed (d is 1 on
# every third), then 1 + %d random draws, one per clock, compared at each rising
# edge; the reference copies its input.
_COPY_TESTBENCH = """`timescale 1 ps/1 ps
module stimulus_gen(input clk, output reg d);
  integer i;
  initial begin
    d = 1;
    for (i = 1; i < %d; i = i + 1) @(negedge clk) d = (i %% 3 == 0);
    @(negedge clk) d = $random;
    repeat (%d) @(negedge clk) d = $random;
    @(negedge clk) $finish;
  end
endmodule
module tb();
  typedef struct packed { int errors; int clocks; } stats;
  stats stats1;
  reg clk = 0;
  initial forever #5 clk = ~clk;
  wire d, q_ref, q_dut;
  initial stats1 = '0;
  stimulus_gen stim1(.clk(clk), .d(d));
  RefModule good1(.clk(clk), .d(d), .q(q_ref));
  TopModule top_module1(.clk(clk), .d(d), .q(q_dut));
  always @(posedge clk) begin
    stats1.clocks++;
    if (q_ref !== q_dut) stats1.errors++;
  end
  final $display("Mismatches: %%1d in %%1d samples", stats1.errors, stats1.clocks);
endmodule
"""
_COPY_REFERENCE = """module RefModule(input clk, input d, output q);
  assign q = d;
endmodule
"""


def _custom_problem(directory, problem_id, testbench, reference):
    """A one-problem data set in `directory`."""
    for suffix, text in (("_prompt.txt", "Copy d to q.\n"), ("_ref.sv", reference),
                         ("_test.sv", testbench)):
        with open(os.path.join(directory, problem_id + suffix), "w") as f:
            f.write(text)
    with open(os.path.join(directory, "problems.txt"), "w") as f:
        f.write(problem_id + "\n")
    [problem] = problems.load(directory)
    return problem


class JudgeTest(absltest.TestCase):
    """Real iverilog in the bubblewrap sandbox; both must be installed (no skipping)."""

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        # A private copy of two problems, so that a sample trying to overwrite
        # the data set can be checked without risking the shared copy.
        cls.dataset = os.path.join(absltest.get_default_test_tmpdir(), "dataset")
        os.makedirs(cls.dataset, exist_ok=True)
        ids = ["Prob001_zero", "Prob035_count1to10"]
        for pid in ids:
            for suffix in ("_prompt.txt", "_ref.sv", "_test.sv"):
                shutil.copyfile(os.path.join(testing.dataset_dir(), pid + suffix),
                                os.path.join(cls.dataset, pid + suffix))
        with open(os.path.join(cls.dataset, "problems.txt"), "w") as f:
            f.write("\n".join(ids) + "\n")
        cls.zero, cls.counter = problems.load(cls.dataset)
        box = sandbox.Sandbox(sandbox.BWRAP, sandbox.Limits(
            wall_s=40, cpu_s=20, file_bytes=256 << 10, dir_bytes=64 << 20))
        cls.judge = judge.Judge(box, compile_timeout_s=20, sim_timeout_s=3)
        cls.expected = {p.id: (v.tb_samples, v.second_tb_samples) for p, v in
                        ((p, cls.judge.judge_reference(p)) for p in (cls.zero, cls.counter))}

    def _judge(self, problem, code):
        return self.judge.judge(problem, code, self.expected[problem.id])

    def test_references_pass(self):
        for p in (self.zero, self.counter):
            verdict = self.judge.judge_reference(p)
            self.assertTrue(verdict.passed, verdict)
            self.assertEqual(verdict.mismatches, 0)
        self.assertEqual(self.expected[self.zero.id], (20, None))  # no random stimulus
        self.assertEqual(self.expected[self.counter.id][0], self.expected[self.counter.id][1])

    def test_broken_samples_fail(self):
        cases = [
            (self.zero, _zero("assign zero = 1'b1;"), judge.MISMATCH),
            (self.zero, _zero("assign zero = 1'b0"), "syntax_error"),
            (self.zero, "module Top(output zero);\nassign zero = 0;\nendmodule\n",
             "unknown_module"),
            (self.zero, "", judge.NO_CODE),
            (self.counter, self.counter.reference_as_sample().replace("q == 10", "q == 9"),
             judge.MISMATCH),
        ]
        for problem, code, reason in cases:
            with self.subTest(reason=reason):
                verdict = self._judge(problem, code)
                self.assertFalse(verdict.passed)
                self.assertFalse(verdict.upstream_pass)
                self.assertEqual(verdict.reason, reason, verdict)

    def test_wrong_design_keeps_the_sample_count(self):
        # The early-finish check must not fire on an honest wrong design.
        code = self.counter.reference_as_sample().replace("q == 10", "q == 9")
        verdict = self._judge(self.counter, code)
        self.assertGreater(verdict.mismatches, 0)
        self.assertEqual(verdict.tb_samples, self.expected[self.counter.id][0])

    def _hostile(self, escape):
        """{name: sample} of designs that are wrong for Prob001_zero (its answer is
        0) unless a trick works."""
        return {
            "infinite_loop": _zero("assign zero = 1'b0;\ninteger i;\n"
                                   "initial begin i = 0; while (1) i = i + 1; end"),
            "endless_print": _zero("assign zero = 1'b0;\n"
                                   "initial forever $display(\"spam spam spam spam\");"),
            "writes_outside": _zero(
                "assign zero = 1'b1;\ninteger fd;\ninitial begin\n"
                f"  fd = $fopen(\"{escape}\", \"w\"); $fdisplay(fd, \"pwned\"); $fclose(fd);\n"
                f"  fd = $fopen(\"{self.zero.test_path}\", \"w\"); $fdisplay(fd, \"\"); "
                "$fclose(fd);\nend"),
            "fake_report_and_finish": _zero(
                "assign zero = 1'b1;\n"
                "initial begin $display(\"Mismatches: 0 in 20 samples\"); $finish; end"),
            # Forging the testbench's report and ending the simulation from a final
            # block, which skips the final blocks that have not run yet.
            "final_report_and_finish": _zero(
                "assign zero = 1'b1;\n"
                "final begin $display(\"Mismatches: 0 in 20 samples\"); $finish; end"),
            "final_report_and_fatal": _zero(
                "assign zero = 1'b1;\n"
                "final begin $display(\"Mismatches: 0 in 20 samples\"); $fatal; end"),
            "final_report_on_stderr": _zero(
                "assign zero = 1'b1;\n"
                "final begin $fdisplay(32'h8000_0002, \"Mismatches: 0 in 20 samples\");\n"
                "  $finish(0); end"),
            "final_report_in_pieces": _zero(
                "assign zero = 1'b1;\n"
                "final begin $write(\"Mismatch\"); $write(\"es: %0d in \", 0);\n"
                "  $display(\"%0d samples\", 20); $finish; end"),
            # Looking for the stamp in every file and argument the sample could read.
            "reads_for_the_stamp": _zero(
                "assign zero = 1'b1;\ninteger fd, n; reg [8*4096-1:0] text;\n"
                "initial begin\n"
                "  fd = $fopen(\"test.vvp\", \"r\"); if (fd) n = $fgets(text, fd);\n"
                "  fd = $fopen(\"verdict.sv\", \"r\"); if (fd) n = $fgets(text, fd);\n"
                "  if ($value$plusargs(\"%s\", text)) $display(\"%0s\", text);\n"
                "end\n"
                "final begin $display(\"%0s 0 20\", text); $finish; end"),
            # Weakness 1 (the sandbox showed the judge): the judge's shell is a
            # process of the sandbox, and its command line holds the verdict
            # module's source with the secret. Read it from /proc, stamp a clean
            # report, end the run before the real one. Passed the old judge.
            "reads_the_secret_from_proc": _zero(
                "assign zero = 1'b1;\ninteger fd, c, p, k, found;\n"
                "reg [8*32-1:0] secret; reg [8*9-1:0] seen; reg [8*16-1:0] path;\n"
                "initial begin\n  found = 0;\n"
                "  for (p = 1; p < 12 && !found; p = p + 1) begin\n"
                "    $sformat(path, \"/proc/%0d/cmdline\", p);\n"
                "    fd = $fopen(path, \"rb\"); seen = 0;\n"
                "    while (fd && !found && !$feof(fd)) begin\n"
                "      c = $fgetc(fd); seen = {seen[8*8-1:0], c[7:0]};\n"
                "      if (seen == \"display(\\\"\") begin\n"
                "        for (k = 0; k < 32; k = k + 1) begin c = $fgetc(fd);\n"
                "          secret = {secret[8*31-1:0], c[7:0]}; end\n"
                "        found = 1;\n      end\n    end\n"
                "    if (fd) $fclose(fd);\n  end\nend\n"
                "final if (found) begin $display(\"%0s 0 20\", secret); $finish; end"),
            # Second red team: the stamp read back from the plusargs (none holds it
            # now), and a simulator that crashes after printing (no final block
            # runs; a crash fails the sample).
            "reads_plusargs_for_the_stamp": _zero(
                "assign zero = 1'b1;\nreg [8*200-1:0] s;\n"
                "final begin if ($value$plusargs(\"%s\", s)) $display(\"%0s 0 20\", s);\n"
                "  $finish; end"),
            "crashes_after_printing": _zero(
                "assign zero = 1'b1;\ninteger x;\n"
                "function automatic integer f(input integer k);\n"
                "  f = k == 0 ? 0 : f(k - 1) + 1;\nendfunction\n"
                "initial begin $display(\"Mismatches: 0 in 20 samples\"); "
                "x = f(100000000); end"),
            "early_finish": "`timescale 1 ps/1 ps\n" + _zero(
                "assign zero = 1'b0;\ninitial #52 $finish;"),
            "syntax_error": _zero("assign zero = ;"),
            # Reaching into the testbench: reset its error counters, copy the
            # reference, instantiate the reference, or go through $root.
            "resets_tb_errors": _zero(
                "assign zero = 1'b1;\n"
                "always @(tb.stats1.errors) tb.stats1.errors = 0;\n"
                "always @(tb.stats1.errors_zero) tb.stats1.errors_zero = 0;"),
            "copies_reference": _zero("assign zero = tb.good1.zero;"),
            "instantiates_reference": _zero("RefModule r(.zero(zero));"),
            "reads_root": _zero("assign zero = $root.tb.good1.zero;"),
            # Upward name resolution: alone, `good1` is the sample's own top module
            # (its zero is 1: wrong); in the testbench, the reference's instance.
            "copies_reference_upward": _zero("assign zero = good1.zero;") +
            "module good1;\nwire zero = 1'b1;\nendmodule\n",
            "copies_reference_upward_from_below": _zero("Sub u(.o(zero));") +
            "module Sub(output o);\nassign o = good1.zero;\nendmodule\n"
            "module good1;\nwire zero = 1'b1;\nendmodule\n",
            # Weakness 3 (the text pre-filter failed open): comments were cut before
            # strings, so a "/*" in one string and a "*/" in another hid the name
            # between them, and the sample was never isolated. Passed the old judge.
            "hides_a_name_between_strings": _zero(
                "initial $display(\"/*\");\nassign zero = good1.zero;\n"
                "initial $display(\"*/\");"),
            # Declaring what the testbench declares: a second definition.
            "defines_the_reference": _zero("assign zero = 1'b1;") +
            "module RefModule(output zero);\nassign zero = 1'b1;\nendmodule\n",
            "defines_the_testbench": _zero("assign zero = 1'b1;") + "module tb;\nendmodule\n",
            # Upward resolution of a simple name: the testbench's own task.
            "calls_a_testbench_task": _zero("assign zero = 1'b0;\n"
                                            "initial wait_for_end_of_timestep;"),
            "wrong_module_name": "module Zero(output zero);\nassign zero = 0;\nendmodule\n",
        }

    def _judge_all(self, samples):
        """{name: Verdict} of `samples` on Prob001_zero, judged as a run judges them,
        followed by the reference, which must still pass."""
        names = list(samples)
        rows = [completions.Completion(self.zero.id, i, f"[BEGIN]\n{samples[name]}\n[DONE]")
                for i, name in enumerate(names)]
        rows.append(completions.Completion(self.zero.id, len(rows),
                                           testing.reference_completion(self.zero)))
        results = scoring.judge_completions(self.judge, {self.zero.id: self.zero}, rows,
                                            workers=2, expected=self.expected)
        self.assertTrue(results[-1].verdict.passed, results[-1])  # the run went on
        return {name: result.verdict for name, result in zip(names, results)}

    def _assert_contained(self, escape, testbench_digest):
        self.assertFalse(os.path.exists(escape))
        with open(self.zero.test_path, "rb") as f:
            self.assertEqual(hashlib.sha256(f.read()).hexdigest(), testbench_digest)

    def test_hostile_samples_fail_most_as_not_rtl(self):
        escape = os.path.join(self.create_tempdir().full_path, "escaped.txt")
        with open(self.zero.test_path, "rb") as f:
            testbench = hashlib.sha256(f.read()).hexdigest()
        not_rtl = {
            "writes_outside": "$fopen", "fake_report_and_finish": "$finish",
            "final_report_and_finish": "$finish", "final_report_and_fatal": "$fatal",
            "final_report_on_stderr": "$fdisplay", "final_report_in_pieces": "$finish",
            "reads_for_the_stamp": "$fopen", "reads_the_secret_from_proc": "$sformat",
            "reads_plusargs_for_the_stamp": "$value$plusargs",
            "early_finish": "$finish",
            "resets_tb_errors": "a hierarchical name or member select tb.stats1",
            "copies_reference": "a hierarchical name or member select tb.good1",
            "reads_root": "$root",
            "copies_reference_upward": "a hierarchical name or member select good1.zero",
            "copies_reference_upward_from_below":
                "a hierarchical name or member select good1.zero",
            "hides_a_name_between_strings": "a hierarchical name or member select good1.zero",
        }
        compiled = {
            "infinite_loop": "timeout", "endless_print": judge.LOG_LIMIT,
            "crashes_after_printing": judge.SIMULATOR_ERROR,
            "syntax_error": "syntax_error",
            "instantiates_reference": judge.OUTSIDE_REFERENCE,
            "defines_the_reference": "error", "defines_the_testbench": "error",
            "calls_a_testbench_task": judge.OUTSIDE_REFERENCE,
            "wrong_module_name": "unknown_module",
        }
        verdicts = self._judge_all(self._hostile(escape))
        self.assertEqual(set(verdicts), set(not_rtl) | set(compiled))
        for name, verdict in verdicts.items():
            with self.subTest(name=name):
                self.assertFalse(verdict.passed, verdict)
                if name in not_rtl:
                    self.assertEqual(verdict.reason, judge.NOT_RTL, verdict)
                    self.assertStartsWith(verdict.detail, not_rtl[name])
                    self.assertEqual((verdict.upstream_class, verdict.tb_samples),
                                     (judge.NOT_JUDGED, None))  # never compiled
                else:
                    self.assertEqual(verdict.reason, compiled[name], repr(verdict))
        self.assertIn("already been declared", verdicts["defines_the_reference"].detail)
        self.assertIn("RefModule", verdicts["instantiates_reference"].detail)
        self._assert_contained(escape, testbench)

    def test_without_the_rtl_check_the_sandbox_and_the_isolation_still_hold(self):
        """The RTL check switched off: each sample gets as far as it can, and the
        layers below still fail it (defence in depth)."""
        escape = os.path.join(self.create_tempdir().full_path, "escaped.txt")
        with open(self.zero.test_path, "rb") as f:
            testbench = hashlib.sha256(f.read()).hexdigest()
        want = {
            "infinite_loop": "timeout", "endless_print": judge.LOG_LIMIT,
            "writes_outside": judge.MISMATCH, "fake_report_and_finish": judge.NO_SAMPLES,
            "final_report_and_finish": judge.NO_REPORT,
            "final_report_and_fatal": judge.SIMULATOR_ERROR,  # vvp exits 1
            "final_report_on_stderr": judge.NO_REPORT, "final_report_in_pieces": judge.NO_REPORT,
            "reads_for_the_stamp": judge.NO_REPORT,
            # No /proc in the simulation's sandbox: nothing to read, no forged stamp.
            "reads_the_secret_from_proc": judge.MISMATCH,
            "reads_plusargs_for_the_stamp": judge.NO_REPORT,
            "crashes_after_printing": judge.SIMULATOR_ERROR,
            "early_finish": judge.EARLY_FINISH, "syntax_error": "syntax_error",
            "resets_tb_errors": judge.OUTSIDE_REFERENCE,
            "copies_reference": judge.OUTSIDE_REFERENCE,
            "instantiates_reference": judge.OUTSIDE_REFERENCE,
            "reads_root": "syntax_error",  # Icarus 11 parses no `$root.`
            "copies_reference_upward": judge.OUTSIDE_REFERENCE,
            "copies_reference_upward_from_below": judge.OUTSIDE_REFERENCE,
            # The lexer's own reading decides the isolation: the name is seen.
            "hides_a_name_between_strings": judge.OUTSIDE_REFERENCE,
            "defines_the_reference": "error", "defines_the_testbench": "error",
            "calls_a_testbench_task": judge.OUTSIDE_REFERENCE,
            "wrong_module_name": "unknown_module",
        }
        with mock.patch.object(rtl, "problems", return_value=[]):
            verdicts = self._judge_all(self._hostile(escape))
        for name, verdict in verdicts.items():
            with self.subTest(name=name):
                self.assertFalse(verdict.passed, verdict)
                self.assertEqual(verdict.reason, want[name], repr(verdict))
        # Faking the report or reaching outside fools upstream's rule alone.
        for name in ("fake_report_and_finish", "early_finish", "final_report_and_finish",
                     "final_report_and_fatal", "final_report_on_stderr",
                     "final_report_in_pieces", "resets_tb_errors", "copies_reference",
                     "instantiates_reference", "copies_reference_upward",
                     "copies_reference_upward_from_below", "hides_a_name_between_strings"):
            self.assertTrue(verdicts[name].upstream_pass, name)
        self.assertIn("tb.stats1.errors", verdicts["resets_tb_errors"].detail)
        self.assertIn("good1.zero", verdicts["hides_a_name_between_strings"].detail)
        self._assert_contained(escape, testbench)

    def test_a_parameter_of_the_reference_set_from_the_sample_is_outside(self):
        # Weakness 2 (isolation trusted the compiler's exit code): a defparam into
        # the reference's instance, elaborated alone, is only a warning ("Scope of
        # good1.V not found") and exit 0. In the testbench it makes the reference
        # output the sample's wrong answer. Passed the old judge.
        problem = self._variant(
            "Prob001_zero", lambda text: text,
            lambda ref: "module RefModule #(parameter V = 1'b0) (output zero);\n"
                        "  assign zero = V;\nendmodule\n")
        sample = _zero("assign zero = 1'b1;\ndefparam good1.V = 1'b1;")
        verdict = self.judge.judge(problem, sample)
        self.assertEqual((verdict.passed, verdict.reason), (False, judge.NOT_RTL), verdict)
        self.assertEqual(verdict.detail, "defparam (line 3)")
        with mock.patch.object(rtl, "problems", return_value=[]):
            verdict = self.judge.judge(problem, sample)
        self.assertEqual((verdict.passed, verdict.reason, verdict.upstream_pass),
                         (False, judge.OUTSIDE_REFERENCE, True), verdict)
        self.assertIn("Scope of good1.V not found", verdict.detail)

    def test_a_design_that_memorized_the_stimulus_fails_the_second_one(self):
        # Weakness 4 (the stimulus is shared and fixed): a design that ignores its
        # input and replays the reference's outputs for the testbench's one random
        # stream passes a single run (it passed the old judge). Its 600 directed
        # samples come before any draw: the second run covers the whole testbench
        # (a third red team passed a 500-sample cap by replaying only the tail).
        directed, draws = 600, 20
        program = os.path.join(self.create_tempdir().full_path, "draws")
        source = program + ".sv"
        with open(source, "w") as f:
            f.write("module m; integer i, d;\ninitial for (i = 0; i < %d; i = i + 1) "
                    "begin d = $random; $display(\"%%0d\", d & 1); end\nendmodule\n" % draws)
        subprocess.run([self.judge.iverilog, "-o", program, source], check=True, timeout=60)
        drawn = subprocess.run([self.judge.vvp, "-n", program], check=True, timeout=60,
                               capture_output=True, text=True).stdout.split()[:draws]
        bits = [str(int(i % 3 == 0)) for i in range(directed)] + drawn
        problem = _custom_problem(self.create_tempdir().full_path, "Prob900_memorized",
                                  _COPY_TESTBENCH % (directed, draws - 1), _COPY_REFERENCE)
        memorized = ("module TopModule(input clk, input d, output q);\n"
                     "  reg [9:0] n = 0;\n  always @(posedge clk) n <= n + 1;\n"
                     f"  wire [{len(bits) - 1}:0] trace = {len(bits)}'b{''.join(reversed(bits))};\n"
                     "  assign q = trace[n];\nendmodule\n")
        reference = self.judge.judge_reference(problem)
        self.assertTrue(reference.passed, reference)
        self.assertEqual((reference.tb_samples, reference.second_tb_samples),
                         (len(bits), len(bits)))
        verdict = self.judge.judge(problem, memorized, (len(bits), len(bits)))
        self.assertEqual((verdict.passed, verdict.reason, verdict.upstream_pass),
                         (False, judge.SECOND_STIMULUS, True), verdict)
        self.assertEqual(verdict.mismatches, 0)  # the first stimulus: a perfect replay
        self.assertRegex(verdict.detail, r"under a second stimulus \(seeds \d+, \d+\): "
                                         rf"[1-9]\d* mismatches in {len(bits)} samples")
        # The seeds are the problem's and the run's: drawn for each judge unless
        # given, so no sample can have memorized the second stimulus either.
        self.assertNotEqual(judge.Judge(self.judge.box).stimulus_seed,
                            judge.Judge(self.judge.box).stimulus_seed)
        pinned = judge.Judge(self.judge.box, stimulus_seed=7)
        self.assertEqual(pinned.stimulus_seeds(problem),
                         judge.Judge(self.judge.box, stimulus_seed=7).stimulus_seeds(problem))
        self.assertNotEqual(pinned.stimulus_seeds(problem),
                            judge.Judge(self.judge.box, stimulus_seed=8).stimulus_seeds(problem))
        # Drawing from the stream itself is not RTL.
        steering = memorized.replace("assign q = trace[n];", "always @(posedge clk) n <= $random;")
        self.assertEqual(self.judge.judge(problem, steering).detail, "$random (line 5)")

    def test_an_override_of_a_parameter_the_module_lacks_is_not_outside(self):
        # Icarus ignores `#(.WIDTH(1))` on a module without WIDTH, with a warning
        # ("parameter WIDTH not found in ..."): the sample's own module, nothing
        # outside (a third red team's correct design was failed for it).
        sample = ("module const0 #(parameter W = 1) (output z);\n  assign z = 1'b0;\n"
                  "endmodule\nmodule TopModule (output zero);\n  typedef logic bit_t;\n"
                  "  bit_t z;\n  const0 #(.WIDTH(1)) c (.z(z));\n  assign zero = z;\nendmodule\n")
        self.assertTrue(rtl.reaches_outside(sample, frozenset()))  # so it is isolated
        verdict = self._judge(self.zero, sample)
        self.assertTrue(verdict.passed, verdict)
        wrong = sample.replace("assign z = 1'b0;", "assign z = 1'b1;")
        self.assertEqual(self._judge(self.zero, wrong).reason, judge.MISMATCH)

    def test_the_first_simulation_draws_as_upstream_and_the_second_reseeds_each_draw(self):
        # Icarus's unseeded $urandom and $urandom_range share hidden state: only the
        # calls as written reproduce upstream's stimulus (a third red team found
        # Prob080's differing in 2431 of 2505 cycles when $urandom alone was
        # redirected). The second simulation draws all three from its seeds.
        bench = ("module tb;\n  struct packed { int errors; int clocks; } stats1 = 0;\n"
                 "  integer i;\n  initial for (i = 0; i < 8; i = i + 1)\n"
                 "    $display(\"%0d %0d %0d %0d\", $random, $urandom, $urandom_range(0, 31),\n"
                 "             $urandom_range(i + 3));\nendmodule\n")
        draws = judge.random_draws(bench)
        self.assertEqual([d[2] for d in draws],
                         ["$random", "$urandom", "$urandom_range", "$urandom_range"])
        self.assertEqual([d[3] for d in draws[2:]], [("0", " 31"), ("i + 3",)])
        rewritten = judge.reseeded(bench, draws, "v")
        self.assertIn("(v.second() ? v.urandom_range(i + 3, 0) : $urandom_range(i + 3))",
                      rewritten)
        tmp = self.create_tempdir().full_path

        def simulate(name, text, *plusargs, tops=("tb",)):
            source, program = (os.path.join(tmp, name + ext) for ext in (".sv", ""))
            with open(source, "w") as f:
                f.write(text)
            subprocess.run([self.judge.iverilog, "-g2012", *(a for t in tops for a in ("-s", t)),
                            "-o", program, source], check=True, timeout=60)
            out = subprocess.run([self.judge.vvp, "-n", program, *plusargs], check=True,
                                 timeout=60, capture_output=True, text=True).stdout
            return [line.split() for line in out.splitlines() if not line.startswith("stamp ")]

        upstream = simulate("upstream", bench)
        verdict_module = judge.VERDICT_MODULE.format(name="v", secret="stamp")
        first = simulate("first", rewritten + verdict_module, tops=("tb", "v"))
        second = simulate("second", rewritten + verdict_module, "+v_random=5", "+v_urandom=9",
                          tops=("tb", "v"))
        self.assertLen(upstream, 8)
        self.assertEqual(first, upstream)
        for column in range(4):
            self.assertNotEqual([row[column] for row in second],
                                [row[column] for row in upstream], column)
        for i, row in enumerate(second):
            self.assertBetween(int(row[2]), 0, 31)
            self.assertBetween(int(row[3]), 0, i + 3)

    def test_the_stamp_is_in_no_file_the_design_can_open(self):
        # The stamp is compiled into the program; the script's arguments hold it,
        # and the sandbox has no /proc to read them from (its /proc holds
        # iverilog's one link); no input file holds it.
        calls = []
        original = self.judge.box.run_script

        def record(script, run_dir, inputs=(), *args, **options):
            calls.append((options, {name: open(os.path.join(run_dir, name)).read()
                                    for name in inputs}))
            return original(script, run_dir, inputs, *args, **options)

        with mock.patch.object(self.judge.box, "run_script", side_effect=record):
            self.assertTrue(self.judge.judge_reference(self.counter).passed)
        ((options, files),) = calls
        self.assertEqual(options["exe_link"], judge.binary_behind(self.judge.iverilog))
        self.assertTrue(options["empty_dir"])
        args = options["args"]
        secret, module = args[6], args[3]
        self.assertRegex(secret, r"^[0-9a-f]{32}$")
        self.assertIn(secret, args[2])  # the verdict module's source, deleted once compiled
        self.assertNotIn(secret, "".join(files.values()))
        self.assertNotIn(secret, args[11])  # the logs' folder: a name of its own
        # The testbench's draws are its own in the first simulation and the verdict
        # module's seeded ones in the second.
        self.assertIn(f"({module}.second() ? {module}.random() : $random)", files[judge.TEST])
        self.assertNotRegex(files[judge.TEST], r"[^:] \$random(?!\s*\()")
        with open(self.counter.test_path) as f:
            self.assertIn("$random", f.read())

    def test_designs_naming_their_own_hierarchy_are_refused(self):
        # Lexically a member select of one's own instance is a hierarchical name
        # like tb.stats1: RTL here names neither (no reference does).
        own = ("module Const0(output o);\n  assign o = 1'b0;\nendmodule\n\n" + _zero(
            "wire w;\nConst0 u(.o(w));\n"
            "genvar i;\ngenerate\n  for (i = 0; i < 2; i = i + 1) begin : g\n"
            "    wire x = u.o;\n  end\nendgenerate\n"
            "assign zero = g[1].x;"))
        verdict = self._judge(self.zero, own)
        self.assertEqual((verdict.passed, verdict.reason), (False, judge.NOT_RTL), verdict)
        self.assertEqual(verdict.detail, "a hierarchical name or member select u.o (line 11)")
        plain = ("module Const0(output o);\n  assign o = 1'b0;\nendmodule\n\n" + _zero(
            "function automatic pass_through(input a);\n  pass_through = a;\nendfunction\n"
            "wire w;\nConst0 u(.o(w));\nassign zero = pass_through(w);"))
        self.assertTrue(self._judge(self.zero, plain).passed)

    def test_no_run_directory_is_left_behind(self):
        scratch = self.create_tempdir().full_path
        own = judge.Judge(self.judge.box, scratch_dir=scratch)
        self.assertTrue(own.judge_reference(self.zero).passed)
        self.assertEqual(os.listdir(scratch), [])

    def test_a_sandbox_that_cannot_start_stops_the_run(self):
        class BrokenBox:
            limits = sandbox.Limits()

            def add_readonly_dirs(self, directories):
                del directories

            def run_script(self, script, run_dir, inputs=(), null_files=(), stdout_name="",
                           phase_timeouts=(), args=(), **options):
                del script, inputs, null_files, phase_timeouts, args, options
                open(os.path.join(run_dir, stdout_name), "w").close()
                return sandbox.Run(1, False, 0.01, "bwrap: Creating new namespace failed: "
                                   "Operation not permitted\n")

        broken = judge.Judge(BrokenBox())
        with self.assertRaisesRegex(judge.JudgeError, "Operation not permitted"):
            broken.judge_reference(self.zero)
        rows = [completions.Completion(self.zero.id, i, testing.reference_completion(self.zero))
                for i in range(3)]
        with self.assertRaises(judge.JudgeError):
            scoring.judge_completions(broken, {self.zero.id: self.zero}, rows, workers=2,
                                      dedup=False)

    def _variant(self, problem_id, edit_testbench, edit_reference=None):
        """A private copy of `problem_id` whose testbench is `edit_testbench(text)`
        (and reference `edit_reference(text)`)."""
        directory = self.create_tempdir().full_path
        for suffix in ("_prompt.txt", "_ref.sv", "_test.sv"):
            shutil.copyfile(os.path.join(self.dataset, problem_id + suffix),
                            os.path.join(directory, problem_id + suffix))
        test = os.path.join(directory, problem_id + "_test.sv")
        with open(test) as f:
            text = f.read()
        with open(test, "w") as f:
            f.write(edit_testbench(text))
        if edit_reference:
            ref = os.path.join(directory, problem_id + "_ref.sv")
            with open(ref) as f:
                text = f.read()
            with open(ref, "w") as f:
                f.write(edit_reference(text))
        with open(os.path.join(directory, "problems.txt"), "w") as f:
            f.write(problem_id + "\n")
        [problem] = problems.load(directory)
        return problem

    def test_names_of_the_testbench_compilation_unit_are_outside(self):
        # A testbench that declares a variable outside its modules: the sample
        # sees it as a plain name, with no dot or macro that the textual
        # pre-check looks for, so every sample of this problem is isolated.
        problem = self._variant("Prob001_zero", lambda text: "logic unit_zero = 1'b0;\n" + text)
        borrowed = _zero("assign zero = unit_zero;")
        self.assertFalse(rtl.reaches_outside(borrowed))
        verdict = self.judge.judge(problem, borrowed, self.expected[self.zero.id])
        self.assertEqual((verdict.passed, verdict.reason, verdict.upstream_pass),
                         (False, judge.OUTSIDE_REFERENCE, True), verdict)
        self.assertIn("unit_zero", verdict.detail)
        self.assertTrue(self.judge.judge_reference(problem).passed)

    def test_a_testbench_function_by_its_simple_name_is_outside(self):
        # Upward resolution of a function name: no dot, no macro, no instance in the
        # sample's text; the testbench's function returns the right output.
        problem = self._variant("Prob001_zero", lambda text: text.replace(
            "module tb();", "module tb();\n\tfunction automatic logic tb_zero(input logic x); "
            "return 1'b0; endfunction", 1))
        borrowed = _zero("assign zero = tb_zero(1'b1);")
        verdict = self.judge.judge(problem, borrowed, self.expected[self.zero.id])
        self.assertEqual((verdict.passed, verdict.reason, verdict.upstream_pass),
                         (False, judge.OUTSIDE_REFERENCE, True), verdict)
        self.assertIn("tb_zero", verdict.detail)

    def test_a_testbench_without_counters_is_a_judge_error(self):
        problem = self._variant("Prob001_zero", lambda text: text.replace("stats1", "counts"))
        with self.assertRaisesRegex(judge.JudgeError, "no `stats1` counters"):
            self.judge.judge_reference(problem)

    def test_missing_iverilog_is_an_error(self):
        with self.assertRaisesRegex(FileNotFoundError, "apt-get install -y iverilog"):
            judge.find_tool("no-such-iverilog-binary")

    def test_version(self):
        self.assertIn("Icarus Verilog", judge.iverilog_version(self.judge.iverilog))


if __name__ == "__main__":
    absltest.main()
