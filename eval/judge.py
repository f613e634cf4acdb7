"""Judges one sample of one problem with Icarus Verilog, as upstream VerilogEval.

The commands are upstream's (its Makefile), run in the sandbox on copies of
the problem's files, after one check of our own:

    iverilog -g2012 -s HARNESS -o /dev/null sample.sv harness.sv   # the sample alone
    iverilog -Wall -Winfloop -Wno-timescale -g2012 -s tb -o test.vvp sample.sv test.sv ref.sv
    vvp -n test.vvp      # upstream: `timeout 30 ./test.vvp`, "TIMEOUT" appended on expiry

with both outputs (stdout and stderr) in one log. `-n` makes `$stop` end the
run instead of waiting at an interactive prompt. The simulation is skipped
when the compile fails (upstream runs it and gets no output either). The
testbench's waveform dump (`wave.vcd`) goes to /dev/null. Each phase has a
wall-clock limit (compile 60 s, simulation 30 s as upstream), enforced by
the sandbox; on expiry the run is killed and "TIMEOUT" appended to the log.

The log is read by upstream's rules (`sv-iv-analyze`), giving its one-letter
class: a line with "syntax error" (S), "error" anywhere (C), explicit cast
(e), zero-width constant (0), no sensitivities (n), "declared here as wire"
(w), "Unknown module type" (m), unbound clk (c) or signal (p), "TIMEOUT" (T);
else pass (.) when a line is exactly `Mismatches: 0 in N samples`, else a
runtime failure (R). `upstream_pass` records that verdict. Ours never reads
a count from text the sample can print: the design shares stdout, stderr and
the simulation with the testbench, so the testbench's `Mismatches:` line can
be forged. Instead a module of the judge's own (VERDICT_MODULE), compiled
beside the testbench, prints the testbench's counters (`tb.stats1.errors`,
`tb.stats1.clocks`) from a `final` block, stamped with a secret drawn for
this run. A sample passes only if the compile and simulation hit none of
upstream's failure classes and that stamped report exists, with 0 errors and
N > 0 samples, N equal to the reference run's N when that is known.

The secret is out of the sample's reach: it is a script argument (no /proc in
the sandbox, so no process can read another's arguments), the verdict module's
source is deleted after the compile, and vvp reads the compiled program
through a FIFO from a file deleted before the simulation starts, so no file
the sample can open holds it. What a design can do, and what it gets:
  * print a report of its own (stdout, stderr, `$write` piece by piece): the
    stamped line alone counts, so a fake one changes nothing;
  * end the simulation from a `final` block (`$finish`, `$fatal`), which
    skips the testbench's and the verdict module's `final` blocks when it runs
    first: no stamped report (`no_report`);
  * end it early from any other process (`$finish`, `$stop`, `$fatal`): the
    final blocks still run, with fewer samples than the reference
    (`early_finish`);
  * loop, print or write without end: the sandbox's limits (`timeout`,
    `log_limit`, `cpu_limit`);
  * open files: the testbench and the reference are read-only copies holding
    no secret, the compiled program is gone, and nothing outside the sandbox
    is visible (eval/sandbox.py);
  * read plusargs or the environment: the secret is in neither;
  * touch the testbench or the reference by name: refused before any verdict
    (`outside_reference`, below).
Samples run without the sandbox (kind `none`, trusted samples only) lose the
secret's protection: /proc is visible there.

Nothing outside the sample may be reached. A design's names bind in the full
compile by SystemVerilog's name resolution (IEEE 1800-2017 23.6-23.9), which
Icarus Verilog follows; these are the ways a name written in the sample can
land on the testbench or the reference:
  * a hierarchical name rooted at a top-level module: `tb.stats1.errors = 0`
    resets the testbench's error count, `tb.good1.zero` copies the reference's
    output, `$root.tb...` the same spelled out (a syntax error in Icarus 11);
  * upward name resolution (23.8): a dotted name whose first part is not found
    below the scope that uses it is looked for in each enclosing instance in
    turn, so from inside `tb.top_module1` (or any instance under it) `good1.zero`
    is the reference's output and `stim1.clk` the stimulus's clock. Elaborated
    with every module of its own as a top, as `iverilog sample.sv` does, the
    same name binds to a top module the sample names `good1`: a test that only
    looked for unbound names was passed by a design that copied the reference
    this way. The same holds for tasks and functions called by such a name,
    `defparam`, `disable` and every other use of a hierarchical name;
  * upward resolution of simple names: a task or function the design calls,
    or a named block it disables, that it does not declare is looked for in
    the enclosing instances as well (Icarus does, for all three: a testbench's
    `wait_for_end_of_timestep` can be called, a function of `tb` returns its
    value into the design). Variables, parameters, types and events by a
    simple name do not go up;
  * module names the testbench instantiates: a sample that instantiates
    `RefModule` or `stimulus_gen` gets the reference's or the stimulus's code;
  * the compilation unit ($unit, 3.12.1): declarations outside any module in
    test.sv or ref.sv are visible to the sample as plain names (VerilogEval's
    testbenches hold none; a data set that does makes every sample go through
    the check below), and so are packages (`pkg::x`, `import`);
  * declaring what the testbench declares: a module, primitive or package named
    `tb`, `stimulus_gen` or `RefModule` is a second definition of that name,
    an elaboration error in Icarus Verilog (`already been declared`) that fails
    the sample as upstream's `error`. Macros do not travel backwards: the sample
    is compiled first, so the testbench's `define`s come after its text, and
    a macro the sample defines reaches only text that uses it (the testbenches
    use none of their own but `timescale).
The check: the sample is elaborated once more without the testbench and the
reference, as the only content of a top of the judge's own (ISOLATION_HARNESS,
a random name) that instantiates its design module under the testbench's
instance names. Upward resolution from the design then finds nothing but the
design itself (its parent holds only its own instances), no other module of
the sample is a top, and no testbench, reference or compilation unit of theirs
exists. A name that binds in that elaboration binds to the same thing in the
full compile (the search goes the same way up to the design's instance and
finds it first), so a sample that elaborates in the full compile but not in
the harness reached outside itself: it fails with `outside_reference`, the
names the harness could not bind in its detail, whatever the simulation said.
A sample that fails in both is judged as upstream judges a compile error. The
harness elaboration is skipped for a sample whose text cannot reach outside
(`may_reach_outside`: no dotted name, no macro, no escaped identifier, no `$root`
or `$unit`, no package reference, no instance of a module it does not define,
no word that names a task, function or named block of the testbench or the
reference) when they declare nothing outside their modules, which is most
samples: it would cost a quarter of the judging time.
"""

import dataclasses
import os
import re
import shlex
import shutil
import subprocess
import tempfile
import time
import uuid

from common import cli
from common import pinned
from eval import sandbox as sandbox_lib

# The script's phases, each ending with a status line on its stderr.
PHASES = ("isolate", "compile", "simulate")
COMPILE_FLAGS = ("-Wall", "-Winfloop", "-Wno-timescale", "-g2012", "-s", "tb")
SAMPLE, TEST, REF = "sample.sv", "test.sv", "ref.sv"
SIMULATION = "test.vvp"
LOG = "log.txt"
WAVE = "wave.vcd"
_SIGXCPU_EXIT, _SIGXFSZ_EXIT = 128 + 24, 128 + 25

MISMATCH_LINE = re.compile(r"Mismatches: (\d+) in (\d+) samples")

# Upstream's per-line rules, in its order: a rule with a class ends the scan.
_CLASS_RULES_BEFORE_BIND = (
    ("error: This assignment requires an explicit cast", "e"),
    ("error: Sized numeric constant must have a size greater than zero", "0"),
    ("warning: always_comb process has no sensitivities", "n"),
    ("found no sensitivities so it will never trigger", "n"),
    ("is declared here as wire", "w"),
    ("Unknown module type", "m"),
)
_CLASS_RULES_AFTER_BIND = (
    ("Unable to bind wire/reg/memory `clk'", "c"),
    ("TIMEOUT", "T"),
)
UPSTREAM_REASONS = {
    "S": "syntax_error", "e": "explicit_cast", "0": "zero_width_constant",
    "n": "no_sensitivity", "w": "declared_as_wire", "m": "unknown_module",
    "c": "unbound_clk", "p": "unbound_signal", "T": "timeout", "C": "error",
}

PASS = "pass"
# Reasons beyond upstream's classes.
NO_CODE = "no_code"
COMPILE_TIMEOUT = "compile_timeout"
WALL_TIMEOUT = "wall_timeout"
LOG_LIMIT = "log_limit"
CPU_LIMIT = "cpu_limit"
MISMATCH = "mismatch"
NO_REPORT = "no_report"
NO_SAMPLES = "no_samples"
EARLY_FINISH = "early_finish"
OUTSIDE_REFERENCE = "outside_reference"

# What iverilog says about a name or module the elaborated design lacks.
_UNBOUND_NAME = re.compile(r"(?:Could not find variable ``|Unable to bind "
                           r"(?:wire/reg/memory|parameter) `|Cannot find scope `?)([^'`\s]+)")
_UNKNOWN_MODULE = re.compile(r"Unknown module type: (\S+)")
# The module every VerilogEval testbench instantiates as the design under test.
DESIGN_MODULE = "TopModule"
_DESIGN_INSTANCE = re.compile(
    rf"\b{DESIGN_MODULE}\s*(?:#\s*\((?:[^()]|\([^()]*\))*\)\s*)?([A-Za-z_][\w$]*)\s*[\[(]")
# Everything that may stand outside a module without declaring anything: the
# design units themselves (packages declare, so they stay) and directives.
_DESIGN_UNITS = re.compile(r"\b(?:module|macromodule|primitive|interface|program)\b.*?"
                           r"\bend(?:module|primitive|interface|program)\b", re.DOTALL)
_DIRECTIVE = re.compile(r"^[ \t]*`(?:\\\n|[^\n])*", re.MULTILINE)  # with continued lines
# What a design can name by a simple name and find in an enclosing instance:
# tasks, functions (the name before its ports or `;`) and named blocks.
_CALLABLE = re.compile(r"\btask\s+(?:(?:automatic|static)\s+)?([A-Za-z_][\w$]*)"
                       r"|\bfunction\b[^;(]*?([A-Za-z_][\w$]*)\s*[(;]"
                       r"|\b(?:begin|fork)\s*:\s*([A-Za-z_][\w$]*)")
_WORD = re.compile(r"[A-Za-z_][\w$]*")
_COMMENTS = re.compile(r"//[^\n]*|/\*.*?\*/", re.DOTALL)
_STRINGS = re.compile(r'"(?:\\.|[^"\\\n])*"')
# `a.b`, `g[0].x`, `u1 .q`: a name, then a dot, then a name (port connections
# `.a(b)` follow a comma or a parenthesis; numbers like 1.5 have no name after).
_DOTTED = re.compile(r"[\w$\]]\s*\.\s*[A-Za-z_$]")
# `Name inst (`, `Name inst [` (an array of instances), `Name #(`: an instance.
_INSTANCE = re.compile(r"(?<![\w$.'])([A-Za-z_][\w$]*)(?:\s*#|\s+[A-Za-z_][\w$]*\s*[\[(])")
_DEFINED = re.compile(r"\b(?:module|macromodule|interface|program|primitive)\s+([A-Za-z_][\w$]*)")
# Words that can stand where _INSTANCE looks for a module name: (System)Verilog
# keywords and the built-in gate primitives. A word missing here only costs an
# isolated elaboration that was not needed.
_NOT_MODULES = frozenset("""
always always_comb always_ff always_latch and assert assign assume automatic begin bit buf
bufif0 bufif1 byte case casex casez cmos const cover deassign default defparam disable do
edge else end endcase endfunction endgenerate endmodule endtask enum event for force forever
fork function generate genvar if iff initial inout input int integer join localparam logic
longint macromodule module nand negedge nmos nor not notif0 notif1 or output packed parameter
pmos posedge primitive priority property pulldown pullup rcmos real realtime reg release repeat
return rnmos rpmos rtran rtranif0 rtranif1 scalared shortint signed specify static struct supply0
supply1 task time tran tranif0 tranif1 tri tri0 tri1 triand trior trireg typedef union unique
unique0 unsigned var vectored void wait wand while wire wor xnor xor
""".split())


# The judge's own module: the testbench's counters at the end of the simulation,
# stamped with the run's secret. Every VerilogEval testbench counts into
# tb.stats1 (errors, clocks) and prints them as its `Mismatches:` line.
VERDICT_SOURCE = "verdict.sv"
VERDICT_MODULE = """module {name};
  final $display("{secret} %0d %0d", tb.stats1.errors, tb.stats1.clocks);
endmodule
"""
# The only top of the isolated elaboration: the design under the testbench's
# instance names, its ports unconnected (module docstring).
HARNESS_SOURCE = "harness.sv"
ISOLATION_HARNESS = """module {name};
{instances}endmodule
"""
PROGRAM_FIFO = "program"


def stamped_report(log, secret):
    """(the log without the stamped lines, (errors, clocks) of the stamped report or
    None). More than one stamped line cannot happen; it reads as no report."""
    pattern = re.compile(rf"^{re.escape(secret)} (-?\d+) (-?\d+)$")
    kept, reports = [], []
    for line in log.split("\n"):
        match = pattern.match(line)
        if match:
            reports.append((int(match.group(1)), int(match.group(2))))
        else:
            kept.append(line)
    return "\n".join(kept), reports[0] if len(reports) == 1 else None


@dataclasses.dataclass(frozen=True)
class LogAnalysis:
    upstream_class: str          # one of S e 0 n w m c p T C . R
    mismatches: int | None       # of the clean report line upstream read, else the first
    tb_samples: int | None       # N of that line
    report_lines: int            # report lines in the whole log


@dataclasses.dataclass(frozen=True)
class Verdict:
    passed: bool
    reason: str
    upstream_pass: bool
    upstream_class: str
    mismatches: int | None = None
    tb_samples: int | None = None
    detail: str = ""
    seconds: float = 0.0

    def to_json(self):
        return dataclasses.asdict(self)


def _scan(lines):
    """(class or None, any "error", any unbound wire/reg, report values seen)."""
    error_any = error_bind = False
    reports = []
    for line in lines:
        if "syntax error" in line:
            return "S", error_any, error_bind, reports
        if "error" in line:
            error_any = True
        for needle, code in _CLASS_RULES_BEFORE_BIND:
            if needle in line:
                return code, error_any, error_bind, reports
        if "Unable to bind wire/reg" in line:
            error_bind = True
        for needle, code in _CLASS_RULES_AFTER_BIND:
            if needle in line:
                return code, error_any, error_bind, reports
        match = MISMATCH_LINE.fullmatch(line)
        if match:
            reports.append((int(match.group(1)), int(match.group(2))))
    return None, error_any, error_bind, reports


def analyze_log(text):
    """Upstream's reading of a compile + simulation log (plus the report count)."""
    lines = text.split("\n")
    found, error_any, error_bind, reports = _scan(lines)
    if found is None:
        zero = any(m == 0 for m, _ in reports)
        found = "p" if error_bind else "C" if error_any else "." if zero else "R"
    mismatches = tb_samples = None
    if reports:
        # The clean report when there is one (that is what upstream passes on).
        mismatches, tb_samples = min(reports, key=lambda r: r[0] != 0)
    report_lines = sum(1 for line in lines if MISMATCH_LINE.fullmatch(line))
    return LogAnalysis(found, mismatches, tb_samples, report_lines)


def _first_line_with(text, needles, limit=300):
    for line in text.splitlines():
        if any(n in line for n in needles):
            return line.strip()[:limit]
    tail = text.strip().splitlines()[-3:]
    return " | ".join(tail)[:limit]


def _status(text):
    codes = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].lstrip("-").isdigit():
            codes[parts[0]] = int(parts[1])
    return codes


def upward_names(code):
    """The names of `code`'s tasks, functions and named blocks: what a design
    below it could call or disable by a simple name (module docstring)."""
    return {name for match in _CALLABLE.findall(_strip(code)) for name in match if name}


def may_reach_outside(code, outside_names=frozenset()):
    """False only when `code` certainly names nothing outside itself (see the
    module docstring); anything unusual counts as true. `outside_names`: the
    testbench's and the reference's `upward_names`."""
    text = _strip(code)
    if outside_names and not outside_names.isdisjoint(_WORD.findall(text)):
        return True
    if any(sign in text for sign in ("`", "\\", "$root", "$unit", "::")) or \
            _DOTTED.search(text) or re.search(r"\bimport\b", text):
        return True
    defined = set(_DEFINED.findall(text))
    return any(name not in _NOT_MODULES and name not in defined
               for name in _INSTANCE.findall(text))


def _strip(code):
    """Verilog text without comments, string literals emptied."""
    return _STRINGS.sub('""', _COMMENTS.sub(" ", code))


def declares_outside_modules(code):
    """Whether `code` (a testbench or a reference) declares anything in the
    compilation unit: text outside its modules other than directives."""
    return bool(_DIRECTIVE.sub(" ", _DESIGN_UNITS.sub(" ", _strip(code))).strip())


def isolation_harness(testbench, name):
    """The isolated elaboration's top (ISOLATION_HARNESS) for `testbench`'s text:
    the design under each instance name the testbench gives it."""
    names = list(dict.fromkeys(_DESIGN_INSTANCE.findall(_strip(testbench)))) or ["top_module1"]
    return ISOLATION_HARNESS.format(
        name=name, instances="".join(f"  {DESIGN_MODULE} {n} ();\n" for n in names))


def outside_references(isolated_log, codes):
    """What the sample reaches outside itself, sorted; [] when it does not.

    `codes`: the script's phase exit codes. The sample reached outside when its
    isolated elaboration failed and the full compile did not (module
    docstring); the names the harness could not bind are the detail, or its
    first error line when iverilog named none."""
    if codes.get(PHASES[0], 0) == 0 or codes.get(PHASES[1]) != 0:
        return []
    names = set(_UNBOUND_NAME.findall(isolated_log)) | set(_UNKNOWN_MODULE.findall(isolated_log))
    return sorted(names) or [_first_line_with(isolated_log, ("error", "Error"))]


def verdict_from(log, status_text, run, log_limit_hit, expected_samples=None, seconds=0.0,
                 outside=(), report=None):
    """The verdict for a finished run: sandbox events first, then reaching outside
    the sample (`outside`: outside_references), then upstream's failure classes
    in the log, then the stamped report (`report`: the testbench's (errors,
    clocks) from the verdict module, None if it printed none)."""
    analysis = analyze_log(log)
    status = _status(status_text)
    upstream_pass = analysis.upstream_class == "."
    detail = _first_line_with(log, ("error", "Error", "TIMEOUT", "Mismatches:", "sorry"))
    mismatches, samples = report if report is not None else (None, None)

    def fail(reason):
        return Verdict(False, reason, upstream_pass, analysis.upstream_class,
                       mismatches, samples, detail, seconds)

    codes = [status.get(phase) for phase in PHASES]
    if run.wall_timeout:
        return fail(WALL_TIMEOUT)
    if run.timed_out_phase is not None and run.timed_out_phase < len(PHASES) - 1:
        return fail(COMPILE_TIMEOUT)
    if run.timed_out_phase == len(PHASES) - 1:
        return fail(UPSTREAM_REASONS["T"])
    if log_limit_hit or _SIGXFSZ_EXIT in codes:
        return fail(LOG_LIMIT)
    if _SIGXCPU_EXIT in codes:
        return fail(CPU_LIMIT)
    if outside:
        return Verdict(False, OUTSIDE_REFERENCE, upstream_pass, analysis.upstream_class,
                       mismatches, samples,
                       "reaches outside the sample: " + ", ".join(outside), seconds)
    if analysis.upstream_class in UPSTREAM_REASONS:
        return fail(UPSTREAM_REASONS[analysis.upstream_class])
    if report is None:
        return fail(NO_REPORT)
    if mismatches:
        return fail(MISMATCH)
    if not samples:
        return fail(NO_SAMPLES)
    if expected_samples is not None and samples != expected_samples:
        return fail(EARLY_FINISH)
    return Verdict(True, PASS, upstream_pass, analysis.upstream_class, mismatches, samples,
                   "", seconds)


def script(iverilog, vvp):
    """The shell script run in the sandbox: the sample alone, compile, simulate.

    Arguments: $1 a random marker, $2 whether to elaborate the sample alone,
    $3 the verdict module's source, $4 its name, $5 the isolation harness's
    source, $6 its name. Tool output goes to stdout:
    the isolated elaboration's (when $2 is 1), then the marker line (no sample
    can print it in advance), then upstream's log with the stamped report. The
    verdict module is compiled as a second top (`-s`) and its source deleted;
    vvp reads the program through a FIFO from a file deleted first (module
    docstring). The script's own stderr gets one line per finished phase
    (PHASES), with its exit code: the sandbox starts each phase's wall-clock
    limit at the previous line, and the sample cannot write there (the tools'
    stderr goes to stdout).
    """
    q = shlex.quote
    compile_cmd = " ".join([q(iverilog), *COMPILE_FLAGS, '-s "$4"', "-o", SIMULATION, SAMPLE,
                            TEST, REF, VERDICT_SOURCE])
    return "\n".join([
        "rc=0",
        f'if [ "$2" = 1 ]; then printf \'%s\' "$5" > {HARNESS_SOURCE}',
        f'  {q(iverilog)} -g2012 -s "$6" -o /dev/null {SAMPLE} {HARNESS_SOURCE} 2>&1',
        f"  rc=$?; rm -f {HARNESS_SOURCE}",
        "fi",
        'echo "isolate $rc" >&2',
        'echo "$1"',
        f"printf '%s' \"$3\" > {VERDICT_SOURCE}",
        f"{compile_cmd} 2>&1",
        "rc=$?",
        f"rm -f {VERDICT_SOURCE}",
        'echo "compile $rc" >&2',
        "[ $rc -eq 0 ] || exit 0",
        f"exec 3< {SIMULATION} && rm -f {SIMULATION} && mkfifo {PROGRAM_FIFO} || exit 1",
        f"cat <&3 > {PROGRAM_FIFO} &",
        "feeder=$!",
        "exec 3<&-",
        f"{q(vvp)} -n {PROGRAM_FIFO} 2>&1",
        "rc=$?",
        'kill "$feeder" 2>/dev/null',  # blocked only if vvp never opened the FIFO
        'echo "simulate $rc" >&2',
    ])


def find_tool(name):
    """The absolute path of an executable: a path as given; a name, the pinned
    tool where this target carries it (third_party/pinned/, what Bazel runs),
    else the name on PATH."""
    path = (os.sep not in name and pinned.path(name)) or shutil.which(name)
    if not path:
        raise FileNotFoundError(
            f"{name} not found: install Icarus Verilog (`apt-get install -y iverilog`)")
    return os.path.realpath(path)


def iverilog_version(iverilog):
    out = subprocess.run([iverilog, "-V"], capture_output=True, text=True, check=False,
                         timeout=60)
    lines = (out.stdout or out.stderr).splitlines()
    return lines[0].strip() if lines else "unknown"


def tool_prefix(path):
    """The install prefix of a tool (`/opt/iv` for `/opt/iv/bin/iverilog`)."""
    return os.path.dirname(os.path.dirname(path))


class JudgeError(cli.UserError):
    """The judge itself failed (not the sample): the sandbox did not run."""


class Judge:
    """Judges samples; thread-safe (each call has its own directory)."""

    def __init__(self, box, iverilog="iverilog", vvp="vvp", compile_timeout_s=60,
                 sim_timeout_s=30, scratch_dir=None, keep_dirs=False):
        self.box = box
        self.iverilog = find_tool(iverilog)
        self.vvp = find_tool(vvp)
        # The tools run inside the sandbox, which must see where they are installed.
        box.add_readonly_dirs((tool_prefix(self.iverilog), tool_prefix(self.vvp)))
        self.scratch_dir = scratch_dir
        self.keep_dirs = keep_dirs
        self._script = script(self.iverilog, self.vvp)
        self._phase_timeouts = (compile_timeout_s, compile_timeout_s, sim_timeout_s)
        self._testbenches = {}  # test_path -> (text, always isolate, upward names)

    def _testbench(self, problem):
        """(the testbench's text, whether every sample of `problem` is elaborated
        alone, the names a design could reach upward), read once per testbench."""
        if problem.test_path not in self._testbenches:
            with open(problem.test_path) as f:
                testbench = f.read()
            if "stats1" not in testbench:
                raise JudgeError(
                    f"{problem.test_path} has no `stats1` counters (errors, clocks), "
                    "which every VerilogEval testbench keeps and the judge reads; "
                    "regenerate a sample-task data set with //eval:sample_tasks")
            with open(problem.ref_path) as f:
                reference = f.read()
            self._testbenches[problem.test_path] = (
                testbench, declares_outside_modules(testbench) or
                declares_outside_modules(reference),
                frozenset(upward_names(testbench) | upward_names(reference)))
        return self._testbenches[problem.test_path]

    def judge(self, problem, code, expected_samples=None):
        """The Verdict for `code` (extracted Verilog) on `problem`."""
        testbench, always_isolate, names = self._testbench(problem)
        if not code.strip():
            return Verdict(False, NO_CODE, False, "m", detail="no code extracted")
        start = time.monotonic()
        run_dir = tempfile.mkdtemp(prefix=problem.id + "_", dir=self.scratch_dir)
        try:
            with open(os.path.join(run_dir, SAMPLE), "w") as f:
                f.write(code)
            shutil.copyfile(problem.test_path, os.path.join(run_dir, TEST))
            shutil.copyfile(problem.ref_path, os.path.join(run_dir, REF))
            marker = f"-- upstream log {uuid.uuid4().hex} --"
            secret, module = uuid.uuid4().hex, f"g4_verdict_{uuid.uuid4().hex[:12]}"
            harness = f"g4_isolation_{uuid.uuid4().hex[:12]}"
            isolate = always_isolate or may_reach_outside(code, names)
            run = self.box.run_script(
                self._script, run_dir, inputs=(SAMPLE, TEST, REF), null_files=(WAVE,),
                stdout_name=LOG, phase_timeouts=self._phase_timeouts,
                args=(marker, "1" if isolate else "0",
                      VERDICT_MODULE.format(name=module, secret=secret), module,
                      isolation_harness(testbench, harness), harness))
            limit = self.box.limits.file_bytes
            with open(os.path.join(run_dir, LOG), "rb") as f:
                raw = f.read(limit + 1)
            isolated, _, log = raw.decode("utf-8", "replace").partition(marker + "\n")
            log, report = stamped_report(log, secret)
            status = run.stderr
            if run.timed_out_phase is not None:
                log += "\nTIMEOUT\n"  # as upstream appends on its wall-clock limit
            elif not run.wall_timeout and PHASES[0] not in _status(status):
                # Only the sandbox failing to start keeps the script from its
                # first status line; failing every sample for it would be wrong.
                raise JudgeError(f"{problem.id}: the sandbox did not run (exit "
                                 f"{run.returncode}): {status.strip()[:1000]}")
            return verdict_from(log, status, run, len(raw) >= limit, expected_samples,
                                time.monotonic() - start,
                                outside=outside_references(isolated, _status(status)),
                                report=report)
        finally:
            if not self.keep_dirs:
                shutil.rmtree(run_dir, ignore_errors=True)

    def judge_reference(self, problem):
        """The Verdict of the problem's own reference, submitted as a sample."""
        return self.judge(problem, problem.reference_as_sample())


def from_config(config, scratch_dir=None):
    """A Judge with the sandbox and limits of an eval config (configs/cpu.py)."""
    iverilog, vvp = find_tool(config.iverilog), find_tool(config.vvp)
    slack = 10
    limits = sandbox_lib.Limits(
        wall_s=config.compile_timeout_s + config.sim_timeout_s + slack,
        cpu_s=config.cpu_limit_s,
        memory_bytes=config.memory_limit_mb << 20,
        file_bytes=config.log_limit_kb << 10,
        dir_bytes=config.dir_limit_mb << 20)
    box = sandbox_lib.Sandbox(config.sandbox, limits)
    return Judge(box, iverilog, vvp, config.compile_timeout_s, config.sim_timeout_s,
                 scratch_dir=scratch_dir, keep_dirs=config.keep_dirs)
