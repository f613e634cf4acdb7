import hashlib
import os
import shutil

from absl.testing import absltest

from eval import completions
from eval import judge
from eval import problems
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

    def _verdict(self, log, status="isolate 0\ncompile 0\nsimulate 0\n", expected=None,
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
        self.assertEqual(self._verdict(log, "", phase=0).reason, judge.COMPILE_TIMEOUT)
        self.assertEqual(self._verdict(log, "isolate 0\n", phase=1).reason,
                         judge.COMPILE_TIMEOUT)
        self.assertEqual(self._verdict(log, "isolate 0\ncompile 0\n", phase=2).reason,
                         "timeout")
        self.assertEqual(self._verdict(log, "isolate 0\ncompile 0\nsimulate 152\n").reason,
                         judge.CPU_LIMIT)
        self.assertEqual(self._verdict(log, "isolate 0\ncompile 0\nsimulate 153\n").reason,
                         judge.LOG_LIMIT)
        reached = self._verdict(log, outside=["tb.stats1.errors"])
        self.assertEqual((reached.passed, reached.reason, reached.upstream_pass),
                         (False, judge.OUTSIDE_REFERENCE, True))
        self.assertIn("tb.stats1.errors", reached.detail)

    def test_which_samples_are_elaborated_alone(self):
        reaching = {
            "hierarchical": "assign zero = tb.good1.zero;",
            "indexed": "assign zero = g[0].x;",
            "instance": "RefModule r(.zero(zero));",
            "positional_instance": "RefModule r(zero);",
            "parameterized_instance": "RefModule #(1) r(zero);",
            "instance_array": "RefModule r [1:0] (zero);",
            "escaped_name": "assign zero = \\tb .good1.zero;",
            "macro": "`R r(zero);",
            "root": "assign zero = $root.x;",
            "unit": "assign zero = $unit::x;",
            "package": "assign zero = tb_pkg::x;",
            "import": "import tb_pkg::*;\nassign zero = x;",
        }
        for name, body in reaching.items():
            with self.subTest(name=name):
                self.assertTrue(judge.may_reach_outside(_zero(body)))
        # A task, function or named block of the testbench, by a simple name.
        names = frozenset({"wait_for_end_of_timestep", "tb_zero"})
        self.assertTrue(judge.may_reach_outside(_zero("initial wait_for_end_of_timestep;"),
                                                names))
        self.assertTrue(judge.may_reach_outside(_zero("assign zero = tb_zero();"), names))
        self.assertFalse(judge.may_reach_outside(_zero("assign zero = tb_zero_not;"), names))
        self.assertFalse(judge.may_reach_outside(_zero("// tb_zero\nassign zero = 0;"), names))
        plain = ("module Const0(output o);\n  assign o = 1'b0;\nendmodule\n" + _zero(
            "// tb.good1.zero in a comment\nConst0 u(.o(zero));\nand g1(w, zero, zero);\n"
            "initial $display(\"tb.x %d\", 1.5);\nalways @(posedge zero) if (zero) "
            "begin end else begin end"))
        self.assertFalse(judge.may_reach_outside(plain))

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
        cls.expected = {p.id: cls.judge.judge_reference(p).tb_samples
                        for p in (cls.zero, cls.counter)}

    def _judge(self, problem, code):
        return self.judge.judge(problem, code, self.expected[problem.id])

    def test_references_pass(self):
        for p in (self.zero, self.counter):
            verdict = self.judge.judge_reference(p)
            self.assertTrue(verdict.passed, verdict)
            self.assertEqual(verdict.mismatches, 0)
        self.assertEqual(self.expected[self.zero.id], 20)

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
        self.assertEqual(verdict.tb_samples, self.expected[self.counter.id])

    def test_hostile_samples_are_contained_and_fail(self):
        outside = self.create_tempdir().full_path
        escape = os.path.join(outside, "escaped.txt")
        with open(self.zero.test_path, "rb") as f:
            testbench = hashlib.sha256(f.read()).hexdigest()
        hostile = {
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
            # block, which skips the final blocks that have not run yet: each of
            # these passed the judge that read the `Mismatches:` line.
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
            # Looking for the stamp: every file and argument the sample could read
            # (the compiled program, the verdict module's source, plusargs), then
            # printing what it found as a report and ending the run.
            "reads_for_the_stamp": _zero(
                "assign zero = 1'b1;\ninteger fd, n; reg [8*4096-1:0] text;\n"
                "initial begin\n"
                "  fd = $fopen(\"test.vvp\", \"r\"); if (fd) n = $fgets(text, fd);\n"
                "  fd = $fopen(\"verdict.sv\", \"r\"); if (fd) n = $fgets(text, fd);\n"
                "  if ($value$plusargs(\"%s\", text)) $display(\"%0s\", text);\n"
                "end\n"
                "final begin $display(\"%0s 0 20\", text); $finish; end"),
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
            # Declaring what the testbench declares: a second definition.
            "defines_the_reference": _zero("assign zero = 1'b1;") +
            "module RefModule(output zero);\nassign zero = 1'b1;\nendmodule\n",
            "defines_the_testbench": _zero("assign zero = 1'b1;") + "module tb;\nendmodule\n",
            # Upward resolution of a simple name: the testbench's own task.
            "calls_a_testbench_task": _zero("assign zero = 1'b0;\n"
                                            "initial wait_for_end_of_timestep;"),
            "wrong_module_name": "module Zero(output zero);\nassign zero = 0;\nendmodule\n",
        }
        want = {
            "infinite_loop": "timeout", "endless_print": judge.LOG_LIMIT,
            "writes_outside": judge.MISMATCH, "fake_report_and_finish": judge.NO_SAMPLES,
            "final_report_and_finish": judge.NO_REPORT, "final_report_and_fatal": judge.NO_REPORT,
            "final_report_on_stderr": judge.NO_REPORT, "final_report_in_pieces": judge.NO_REPORT,
            "reads_for_the_stamp": judge.NO_REPORT,
            "early_finish": judge.EARLY_FINISH, "syntax_error": "syntax_error",
            "resets_tb_errors": judge.OUTSIDE_REFERENCE,
            "copies_reference": judge.OUTSIDE_REFERENCE,
            "instantiates_reference": judge.OUTSIDE_REFERENCE,
            "reads_root": "syntax_error",  # Icarus 11 parses no `$root.`
            "copies_reference_upward": judge.OUTSIDE_REFERENCE,
            "copies_reference_upward_from_below": judge.OUTSIDE_REFERENCE,
            "defines_the_reference": "error", "defines_the_testbench": "error",
            "calls_a_testbench_task": judge.OUTSIDE_REFERENCE,
            "wrong_module_name": "unknown_module",
        }
        names = list(hostile)
        rows = [completions.Completion(self.zero.id, i, f"[BEGIN]\n{hostile[name]}\n[DONE]")
                for i, name in enumerate(names)]
        rows.append(completions.Completion(self.zero.id, len(rows),
                                           testing.reference_completion(self.zero)))
        results = scoring.judge_completions(self.judge, {self.zero.id: self.zero}, rows,
                                            workers=2, expected=self.expected)
        for name, result in zip(names, results):
            with self.subTest(name=name):
                self.assertFalse(result.verdict.passed, result)
                self.assertEqual(result.verdict.reason, want[name], repr(result))
        # The run went on: the honest sample after them passes.
        self.assertTrue(results[-1].verdict.passed, results[-1])
        # Faking the report fools upstream's rule alone, not ours.
        for name in ("fake_report_and_finish", "early_finish", "final_report_and_finish",
                     "final_report_and_fatal", "final_report_on_stderr",
                     "final_report_in_pieces"):
            self.assertTrue(results[names.index(name)].verdict.upstream_pass, name)
        # So does reaching into the testbench or the reference.
        for name in ("resets_tb_errors", "copies_reference", "instantiates_reference",
                     "copies_reference_upward", "copies_reference_upward_from_below"):
            self.assertTrue(results[names.index(name)].verdict.upstream_pass, name)
        self.assertIn("tb.stats1.errors",
                      results[names.index("resets_tb_errors")].verdict.detail)
        self.assertIn("good1.zero",
                      results[names.index("copies_reference_upward")].verdict.detail)
        self.assertIn("already been declared",
                      results[names.index("defines_the_reference")].verdict.detail)
        # Nothing escaped: no file outside, the data set's testbench untouched.
        self.assertFalse(os.path.exists(escape))
        with open(self.zero.test_path, "rb") as f:
            self.assertEqual(hashlib.sha256(f.read()).hexdigest(), testbench)

    def test_designs_with_their_own_hierarchy_pass(self):
        own = ("module Const0(output o);\n  assign o = 1'b0;\nendmodule\n\n" + _zero(
            "wire w;\nConst0 u(.o(w));\n"
            "function automatic pass_through(input a);\n  pass_through = a;\nendfunction\n"
            "genvar i;\ngenerate\n  for (i = 0; i < 2; i = i + 1) begin : g\n"
            "    wire x = u.o;\n  end\nendgenerate\n"
            "assign zero = pass_through(g[1].x);"))
        verdict = self.judge.judge(self.zero, own, self.expected[self.zero.id])
        self.assertTrue(verdict.passed, verdict)

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
                           phase_timeouts=(), args=()):
                del script, inputs, null_files, phase_timeouts, args
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

    def _variant(self, problem_id, edit_testbench):
        """A private copy of `problem_id` whose testbench is `edit_testbench(text)`."""
        directory = self.create_tempdir().full_path
        for suffix in ("_prompt.txt", "_ref.sv", "_test.sv"):
            shutil.copyfile(os.path.join(self.dataset, problem_id + suffix),
                            os.path.join(directory, problem_id + suffix))
        test = os.path.join(directory, problem_id + "_test.sv")
        with open(test) as f:
            text = f.read()
        with open(test, "w") as f:
            f.write(edit_testbench(text))
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
        self.assertFalse(judge.may_reach_outside(borrowed))
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
