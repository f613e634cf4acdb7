"""Judges one sample of one problem with Icarus Verilog, as upstream VerilogEval.

The commands are upstream's (its Makefile), run in the sandbox on copies of
the problem's files, after checks of our own:

    (eval/rtl.py: the sample is RTL and nothing else, read by a lexer)
    iverilog -g2012 -s HARNESS -o /dev/null sample.sv harness.sv   # the sample alone
    iverilog -Wall -Winfloop -Wno-timescale -g2012 -s tb -o test.vvp sample.sv test.sv ref.sv
    vvp -n test.vvp -none  # upstream: `timeout 30 ./test.vvp`, "TIMEOUT" appended on expiry

with both outputs (stdout and stderr) in one log. `-n` makes `$stop` end the
run instead of waiting at an interactive prompt. The simulation is skipped
when the compile fails (upstream runs it and gets no output either). Each
phase has a wall-clock limit (compile 60 s, simulation 30 s as upstream),
enforced by the sandbox; on expiry the run is killed and "TIMEOUT" appended.

The log is read by upstream's rules (`sv-iv-analyze`), giving its one-letter
class: a line with "syntax error" (S), "error" anywhere (C), explicit cast
(e), zero-width constant (0), no sensitivities (n), "declared here as wire"
(w), "Unknown module type" (m), unbound clk (c) or signal (p), "TIMEOUT" (T);
else pass (.) when a line is exactly `Mismatches: 0 in N samples`, else a
runtime failure (R). `upstream_pass` records that verdict. Ours never reads
a count from text the sample can print: the design shares stdout and the
simulation with the testbench, so the testbench's `Mismatches:` line can be
forged. Instead a module of the judge's own (VERDICT_MODULE, a random name),
compiled beside the testbench, prints the testbench's counters
(`tb.stats1.errors`, `tb.stats1.clocks`) from a `final` block, stamped with a
secret drawn for this run and compiled into the program. A
sample passes only if the compile and simulation hit none of upstream's
failure classes and that stamped report exists, with 0 errors and N > 0
samples, N equal to the reference run's N when that is known.

What a sample can do is what RTL does (eval/rtl.py refuses the rest before
anything is compiled: `not_rtl`, the construct in the detail): no file, process
or plusarg access, no random draws, no simulation control, no hierarchical
names, no package or compilation-unit names, no `defparam` or `bind`, no
conditional compilation, no macros; and Icarus's own preprocessor must leave
its text byte for byte as it is (`preprocess`), so that the text the compiler
reads is the text eval/rtl.py read. It runs in a sandbox that shows it
nothing of the judge: no /proc (the pinned iverilog finds its files through
/proc/self/exe: the sandbox's /proc holds that one link), so no process or
command line of the run can be read; the compile's inputs are copies, and the
verdict module's source is deleted after the compile; vvp runs in an empty
read-only folder (the testbench's `wave.vcd` a link to /dev/null), reads the
compiled program, which holds the secret, through a FIFO in a private /tmp
from a file deleted first, and writes its log under a folder of a random
name: no file, argument, variable or descriptor the design can reach holds
the secret. A simulator that crashes or exits with an error fails the sample
(`simulator_error`).
What a design can still do, and what it gets:
  * print a report of its own (`$display`, `$write`): the stamped line alone
    counts, so a fake one changes nothing;
  * loop or print without end: the sandbox's limits (`timeout`, `log_limit`,
    `cpu_limit`);
  * replay the reference's outputs for the testbench's one fixed stimulus (a
    table indexed by a clock count). The first simulation draws the testbench's
    stimulus as upstream does (its own calls, untouched: upstream's stimulus bit
    for bit). A sample that passed is simulated again, to the testbench's end,
    with each unseeded `$random`, `$urandom` and `$urandom_range` of the
    testbench drawn through the verdict module (`reseeded`) from seeds of the
    problem and `stimulus_seed` (itself drawn for each run unless given). The
    sample must pass again, with the reference's N under the same seeds
    (`second_stimulus`), in the same sandbox run: no design can have
    memorized a stimulus drawn after it was written, and no part of the run is
    checked under the public stimulus alone.

Nothing outside the sample may be reached. A design's names bind in the full
compile by SystemVerilog's name resolution (IEEE 1800-2017 23.6-23.9), which
Icarus Verilog follows; hierarchical names are refused as not RTL, leaving:
  * upward resolution of simple names: a task or function the design calls,
    or a named block it disables, that it does not declare is looked for in
    the enclosing instances (Icarus does, for all three: a testbench's
    `wait_for_end_of_timestep` can be called, a function of `tb` returns its
    value into the design);
  * module names the testbench instantiates: a sample that instantiates
    `RefModule` or `stimulus_gen` gets the reference's or the stimulus's code;
  * the compilation unit ($unit, 3.12.1): declarations outside any module in
    test.sv or ref.sv are visible to the sample as plain names (VerilogEval's
    testbenches hold none; a data set that does makes every sample go through
    the check below);
  * declaring what the testbench declares: a module or primitive named `tb`,
    `stimulus_gen` or `RefModule` is a second definition of that name, an
    elaboration error in Icarus Verilog (`already been declared`) that fails
    the sample as upstream's `error`. Macros do not travel backwards: the
    sample is compiled first.
The check: the sample is elaborated once more without the testbench and the
reference, as the only content of a top of the judge's own (ISOLATION_HARNESS,
a random name) that instantiates its design module under the testbench's
instance names. Upward resolution from the design then finds nothing but the
design itself, no other module of the sample is a top, and no testbench,
reference or compilation unit of theirs exists. A sample that elaborates in
the full compile but not in the harness, or whose isolated elaboration warns
about a name or scope it cannot resolve, reached outside itself: it fails
with `outside_reference` whatever the simulation said. A sample that fails in
both is judged as upstream judges a compile error. Every sample is isolated
unless its tokens prove it names nothing outside itself (`rtl.reaches_outside`:
no macro, no word naming a task, function or named block of the testbench or
the reference, no instance of a module it does not define) and the testbench
and the reference declare nothing outside their modules.
"""

import dataclasses
import glob
import hashlib
import os
import re
import secrets
import shlex
import shutil
import subprocess
import tempfile
import time
import uuid

from common import cli
from common import pinned
from eval import rtl
from eval import sandbox as sandbox_lib

# The script's phases, each ending with a status line on its stderr.
PHASES = ("preprocess", "isolate", "compile", "simulate", "second")
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
NOT_RTL = "not_rtl"
NOT_JUDGED = "-"  # the upstream class of a sample refused before any compile
PREPROCESSED = "Icarus's preprocessor rewrites the text (eval/rtl.py read another)"
SIMULATOR_ERROR = "simulator_error"
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
SECOND_STIMULUS = "second_stimulus"

# What iverilog says about a name or module the elaborated design lacks.
_UNBOUND_NAME = re.compile(r"(?:Could not find variable ``|Unable to bind "
                           r"(?:wire/reg/memory|parameter) `|Cannot find scope `?)([^'`\s]+)")
_UNKNOWN_MODULE = re.compile(r"Unknown module type: (\S+)")
# The module every VerilogEval testbench instantiates as the design under test.
DESIGN_MODULE = "TopModule"
# Words of an isolated elaboration's warning about a name it could not resolve.
_UNRESOLVED_WARNING = re.compile(r"warning.*(?:scope|bind|find|resolv|unknown|not found|"
                                 r"undeclared|hierarch)", re.IGNORECASE)
# ... except an override of a parameter the instantiated module lacks (`#(.W(1))`),
# which Icarus ignores: it names the sample's own module, nothing outside.
_IGNORED_OVERRIDE = re.compile(r"warning: parameter \S+ not found in \S+\.?$")
# The testbench's draws that the judge reseeds in the second simulation: each
# `$random` / `$urandom` without a seed of its own, and each `$urandom_range`,
# becomes `(M.second() ? M.draw(...) : <the call as written>)`: in the first
# simulation the testbench's own call (Icarus's unseeded draws share hidden
# state, which only the calls as written reproduce), in the second the
# verdict module's, from the seeds its plusargs give.
RESEEDED = ("$random", "$urandom", "$urandom_range")

# The judge's own module: the testbench's counters at the end of the simulation,
# stamped with the run's secret. Every VerilogEval testbench counts into
# tb.stats1 (errors, clocks) and prints them as its `Mismatches:` line.
VERDICT_SOURCE = "verdict.sv"
VERDICT_MODULE = """module {name};
  integer random_seed = 0;
  reg [31:0] urandom_seed = 0;
  reg seeded = 0, second_run = 0;
  task seed;
    if (!seeded) begin
      seeded = 1;
      second_run = $value$plusargs("{name}_random=%d", random_seed);
      if ($value$plusargs("{name}_urandom=%d", urandom_seed)) ;
    end
  endtask
  function second();
    seed;
    second = second_run;
  endfunction
  function integer random();
    random = $random(random_seed);
  endfunction
  function [31:0] urandom();
    urandom = $urandom(urandom_seed);
  endfunction
  function [31:0] urandom_range(input [31:0] a, input [31:0] b);
    reg [31:0] low, high;
    begin
      low = a < b ? a : b;
      high = a < b ? b : a;
      urandom_range = high - low == 32'hffffffff ? urandom() : low + urandom() % (high - low + 1);
    end
  endfunction
  final $display("{secret} %0d %0d", tb.stats1.errors, tb.stats1.clocks);
endmodule
"""
# The only top of the isolated elaboration: the design under the testbench's
# instance names, its ports unconnected (module docstring).
HARNESS_SOURCE = "harness.sv"
ISOLATION_HARNESS = """module {name};
{instances}endmodule
"""


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
    second_tb_samples: int | None = None  # N under the second stimulus, where run

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
    """The names of `code`'s tasks, functions and named blocks (`begin : b`,
    `b : begin`): what a design below it could call or disable by a simple
    name (module docstring). `code` is the problem's own text."""
    toks = rtl.tokens(code, continued_lines=True)
    names = set()
    for k, tok in enumerate(toks):
        rest = toks[k + 1:k + 3]
        if tok.text == "task":
            names.update(t.text for t in rest[:2] if t.kind == rtl.WORD and
                         t.text not in ("automatic", "static"))
        elif tok.text == "function":
            words = []
            for later in toks[k + 1:]:
                if later.text in ("(", ";"):
                    break
                if later.kind == rtl.WORD:
                    words.append(later.text)
            names.update(words[-1:])
        elif tok.text in ("begin", "fork") and len(rest) == 2 and rest[0].text == ":":
            names.add(rest[1].text)
        elif tok.kind == rtl.WORD and len(rest) == 2 and rest[0].text == ":" and \
                rest[1].text in ("begin", "fork"):
            names.add(tok.text)
    return {name for name in names if name not in rtl.KEYWORDS}


def declares_outside_modules(code):
    """Whether `code` (a testbench or a reference) declares anything in the
    compilation unit: a token outside its modules and primitives other than a
    directive's line."""
    depth, directive_line = 0, None
    opens = rtl.DEFINES | {"interface", "program"}  # a package declares: outside
    closes = {"endmodule", "endprimitive", "endinterface", "endprogram"}
    for tok in rtl.tokens(code, continued_lines=True):
        if tok.kind == rtl.DIRECTIVE:
            directive_line = tok.line
        elif tok.text in opens:
            depth += 1
        elif tok.text in closes:
            depth -= 1
        elif not depth and tok.line != directive_line:
            return True
    return False


def random_draws(testbench):
    """(start, end, name, arguments) of `testbench`'s draws that the second
    simulation reseeds (RESEEDED): unseeded `$random` and `$urandom`, and
    `$urandom_range` with its one or two arguments' text."""
    toks = rtl.tokens(testbench, continued_lines=True)
    draws = []
    for k, tok in enumerate(toks):
        if tok.text not in RESEEDED:
            continue
        has_arguments = k + 1 < len(toks) and toks[k + 1].text == "("
        if tok.text != "$urandom_range":
            if not has_arguments:
                draws.append((tok.start, tok.start + len(tok.text), tok.text, ()))
            continue
        if not has_arguments:
            raise rtl.Unreadable(f"line {tok.line}: $urandom_range without its arguments")
        arguments, depth, begin = [], 0, toks[k + 1].start + 1
        for t in toks[k + 1:]:
            if t.text in ("(", "[", "{"):
                depth += 1
            elif t.text in (")", "]", "}"):
                depth -= 1
            if depth == 1 and t.text == ",":
                arguments.append(testbench[begin:t.start])
                begin = t.start + 1
            elif depth == 0:
                arguments.append(testbench[begin:t.start])
                if len(arguments) not in (1, 2):
                    raise rtl.Unreadable(f"line {tok.line}: $urandom_range with "
                                         f"{len(arguments)} arguments")
                draws.append((tok.start, t.start + 1, tok.text, tuple(arguments)))
                break
        else:
            raise rtl.Unreadable(f"line {tok.line}: $urandom_range's arguments do not end")
    return tuple(draws)


def reseeded(testbench, draws, module):
    """`testbench` with each of its `draws` (random_draws) as written in the first
    simulation and the verdict `module`'s draw of that name in the second."""
    out, at = [], 0
    for start, end, name, arguments in draws:
        if len(arguments) == 1:  # $urandom_range(max): min 0
            arguments = (*arguments, "0")
        mine = f"{module}.{name[1:]}({', '.join(arguments)})"
        out += [testbench[at:start], f"({module}.second() ? {mine} : {testbench[start:end]})"]
        at = end
    return "".join(out) + testbench[at:]


def isolation_harness(testbench, name="{name}"):
    """The isolated elaboration's top (ISOLATION_HARNESS) for `testbench`'s text:
    the design under each instance name the testbench gives it. Without a
    `name`, a template to format with one."""
    toks = rtl.tokens(testbench, continued_lines=True)
    names = []
    for k, tok in enumerate(toks):
        if tok.text != DESIGN_MODULE or k + 1 >= len(toks):
            continue
        j = k + 1
        if toks[j].text == "#":  # parameters: skip the parenthesised list
            depth = 0
            for j in range(j + 1, len(toks)):
                depth += (toks[j].text == "(") - (toks[j].text == ")")
                if depth == 0:
                    break
            j += 1
        if j + 1 < len(toks) and toks[j].kind == rtl.WORD and toks[j + 1].text in ("(", "["):
            names.append(toks[j].text)
    names = list(dict.fromkeys(names)) or ["top_module1"]
    return ISOLATION_HARNESS.format(
        name=name, instances="".join(f"  {DESIGN_MODULE} {n} ();\n" for n in names))


def outside_references(isolated_log, codes):
    """What the sample reaches outside itself, sorted; [] when it does not.

    `codes`: the compile's phase exit codes. The sample reached outside when
    its isolated elaboration failed and the full compile did not, or when the
    isolated elaboration warned about a name or scope it could not resolve
    (module docstring); the names the harness could not bind are the detail,
    or its first such line when iverilog named none."""
    if codes.get("compile") != 0:
        return []
    warned = [line.strip()[:300] for line in isolated_log.splitlines()
              if _UNRESOLVED_WARNING.search(line) and not _IGNORED_OVERRIDE.search(line)]
    if codes.get("isolate", 0) == 0 and not warned:
        return []
    names = set(_UNBOUND_NAME.findall(isolated_log)) | set(_UNKNOWN_MODULE.findall(isolated_log))
    return sorted(names) or warned[:1] or [_first_line_with(isolated_log, ("error", "Error"))]


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

    codes = [status.get(phase) for phase in PHASES[:4]]  # the second run: _second_stimulus
    timed_out = PHASES[run.timed_out_phase] if run.timed_out_phase is not None else None
    if run.wall_timeout:
        return fail(WALL_TIMEOUT)
    if timed_out in PHASES[:3]:
        return fail(COMPILE_TIMEOUT)
    if timed_out == "simulate":
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
    if status.get("simulate", 0) != 0:  # the simulator crashed or was killed
        return Verdict(False, SIMULATOR_ERROR, upstream_pass, analysis.upstream_class,
                       mismatches, samples, f"vvp exited with {status['simulate']}", seconds)
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


def script(iverilog, vvp, ivlpp):
    """The shell script run in the sandbox: the preprocessor's check, the sample
    alone, compile, simulate, and simulate again under the second stimulus.

    Arguments: $1 a random marker, $2 whether to elaborate the sample alone,
    $3 the verdict module's source, $4 its name, $5 the isolation harness's
    source, $6 its name, $7 the stamp (the secret), $8 whether to simulate a
    pass again, $9 a second marker, $10 and $11 the second stimulus's seeds,
    $12 a random folder name for the logs.
    First Icarus's preprocessor must leave the sample as it is: the text it
    compiles is then the text eval/rtl.py read. Tool output goes to stdout:
    the isolated elaboration's (when $2 is 1), the marker line (no sample can
    print it in advance), upstream's log with the stamped report, and after the
    second marker the second simulation's log, run only when the first printed
    a stamped report of 0 errors over N > 0 samples. The verdict module is
    compiled as a second top (`-s`) and its source deleted. vvp reads the
    program through a FIFO in the private /tmp from a file deleted first, runs
    in an empty read-only folder, and writes its log under a folder of a random
    name (module docstring). The script's own stderr gets one line per
    finished phase (PHASES), with its exit code: the sandbox starts each
    phase's wall-clock limit at the previous line, and nothing else writes
    there (the tools' stderr goes to stdout, a shell's report of a crashed
    simulator to /dev/null).
    """
    q = shlex.quote
    compile_cmd = " ".join([q(iverilog), *COMPILE_FLAGS, '-s "$4"', "-o", SIMULATION, SAMPLE,
                            TEST, REF, VERDICT_SOURCE])
    # In a subshell whose stderr is /dev/null: dash reports a child killed by a
    # signal on stderr (a full log kills the reporting shell in turn). The `exit`
    # keeps dash from exec'ing vvp in place of the subshell, which would make the
    # script itself report the signal on the status pipe. `-none`: the
    # testbench's waveform dump writes nothing (it went to /dev/null anyway).
    simulate = (f'cat <&$fd > "$fifo" & feeder=$!; ({q(vvp)} -n "$fifo" -none "$@" 3<&- 4<&- '
                f'> "$log" 2>&1; exit $?) 2>/dev/null; rc=$?; kill "$feeder" 2>/dev/null')
    return "\n".join([
        f'{q(ivlpp)} {SAMPLE} > "$TMPDIR/preprocessed" 2>/dev/null && '
        f'cmp -s {SAMPLE} "$TMPDIR/preprocessed"',
        'rc=$?; echo "preprocess $rc" >&2; [ $rc -eq 0 ] || exit 0',
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
        'random="+$4_random=${10}" urandom="+$4_urandom=${11}"',
        'pass="$7 0 " again="$8" marker="$9" fifo="$TMPDIR/program" log="$TMPDIR/${12}/log"',
        f'exec 3< {SIMULATION} 4< {SIMULATION} && rm -f {SIMULATION} && mkfifo "$fifo" && '
        'mkdir "$TMPDIR/${12}" || exit 1',
        'cd "$SANDBOX_EMPTY_DIR" || exit 1',
        "set --; fd=3",
        simulate,
        'cat "$log"',
        'echo "simulate $rc" >&2',
        '[ "$again" = 1 ] && grep -q "^$pass[1-9]" "$log" || exit 0',
        'echo "$marker"',
        'set -- "$random" "$urandom"; fd=4',
        simulate,
        'cat "$log"',
        'echo "second $rc" >&2',
    ])


def ivlpp_behind(binary):
    """Icarus Verilog's preprocessor beside the iverilog `binary`
    (PREFIX/bin/iverilog: PREFIX/lib/.../ivl/ivlpp, as Debian and a source build
    install it)."""
    prefix = os.path.dirname(os.path.dirname(binary))
    found = sorted(glob.glob(os.path.join(prefix, "lib", "*", "ivl", "ivlpp")) +
                   glob.glob(os.path.join(prefix, "lib", "ivl", "ivlpp")))
    if not found:
        raise FileNotFoundError(f"no ivlpp (Icarus Verilog's preprocessor) under {prefix}/lib")
    return found[0]


def find_tool(name):
    """The absolute path of an executable: a path as given; a pinned tool's name,
    the pinned tool (common/pinned.py: under Bazel only that one); another name,
    the one on PATH."""
    if os.sep in name:
        path = name if os.access(name, os.X_OK) else None
    elif name in pinned.TOOLS:
        path = pinned.tool(name)
    else:
        path = shutil.which(name)
    if not path:
        raise FileNotFoundError(
            f"{name} not found: install Icarus Verilog (`apt-get install -y iverilog`)")
    return os.path.realpath(path)


def iverilog_version(iverilog):
    out = subprocess.run([iverilog, "-V"], capture_output=True, text=True, check=False,
                         timeout=60)
    lines = (out.stdout or out.stderr).splitlines()
    return lines[0].strip() if lines else "unknown"


def binary_behind(path):
    """The executable file `path` runs: itself, or for the pinned tools' wrapper
    (tools/test_tools.py: `exec "$root/BINARY"`, root beside its bin/ folder) the
    binary it runs. The sandbox links it at /proc/self/exe, where iverilog looks
    for its own files."""
    with open(path, "rb") as f:
        head = f.read(4096)
    if head.startswith(b"\x7fELF"):
        return path
    found = re.search(rb'exec "\$root/([^"]+)"', head)
    if not found:
        raise JudgeError(f"{path} is a script that runs something the judge cannot name: "
                         "give --config.iverilog the Icarus Verilog binary itself")
    root = os.path.join(os.path.dirname(os.path.dirname(path)), "root")
    return os.path.join(root, found.group(1).decode())


def tool_prefix(path):
    """The install prefix of a tool (`/opt/iv` for `/opt/iv/bin/iverilog`)."""
    return os.path.dirname(os.path.dirname(path))


class JudgeError(cli.UserError):
    """The judge itself failed (not the sample): the sandbox did not run."""


class Judge:
    """Judges samples; thread-safe (each call has its own directory)."""

    def __init__(self, box, iverilog="iverilog", vvp="vvp", compile_timeout_s=60,
                 sim_timeout_s=30, scratch_dir=None, keep_dirs=False, stimulus_seed=None):
        self.box = box
        self.iverilog = find_tool(iverilog)
        self.vvp = find_tool(vvp)
        # The tools run inside the sandbox, which must see where they are installed.
        box.add_readonly_dirs((tool_prefix(self.iverilog), tool_prefix(self.vvp)))
        self.scratch_dir = scratch_dir
        self.keep_dirs = keep_dirs
        # Drawn for this judge unless given: no sample can know the second stimulus.
        self.stimulus_seed = (secrets.randbits(31) if stimulus_seed is None or stimulus_seed < 0
                              else stimulus_seed)
        self._iverilog_binary = binary_behind(self.iverilog)
        self._script = script(self.iverilog, self.vvp, ivlpp_behind(self._iverilog_binary))
        self._phase_timeouts = (compile_timeout_s, compile_timeout_s, compile_timeout_s,
                                sim_timeout_s, sim_timeout_s)
        self._testbenches = {}  # test_path -> _Testbench

    def _testbench(self, problem):
        """What the judge reads of `problem`'s testbench and reference, once."""
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
            try:
                self._testbenches[problem.test_path] = _Testbench(
                    testbench, declares_outside_modules(testbench) or
                    declares_outside_modules(reference),
                    frozenset(upward_names(testbench) | upward_names(reference) |
                              rtl.top_level_modules(rtl.tokens(testbench, True)) |
                              rtl.top_level_modules(rtl.tokens(reference, True))),
                    random_draws(testbench), isolation_harness(testbench))
            except rtl.Unreadable as e:
                raise JudgeError(f"{problem.id}: its testbench or reference is not "
                                 f"Verilog this judge reads: {e}") from None
        return self._testbenches[problem.test_path]

    def stimulus_seeds(self, problem):
        """The seeds of the second simulation of `problem`: its `$random` and its
        `$urandom` stream (1 to 2**31 - 1), from the problem and `stimulus_seed`."""
        digest = hashlib.sha256(f"{self.stimulus_seed}:{problem.id}".encode()).digest()
        return tuple(1 + int.from_bytes(digest[i:i + 4], "big") % (2**31 - 1) for i in (0, 4))

    def judge(self, problem, code, expected_samples=None):
        """The Verdict for `code` (extracted Verilog) on `problem`.
        `expected_samples`: the reference's N (`tb_samples`), or its N under the
        first and the second stimulus (`expected_tb_samples`), or None."""
        bench = self._testbench(problem)
        if not code.strip():
            return Verdict(False, NO_CODE, False, "m", detail="no code extracted")
        refused = rtl.problems(code)
        if refused:
            return Verdict(False, NOT_RTL, False, NOT_JUDGED, detail=refused[0])
        expected, expected_second = (expected_samples if isinstance(expected_samples, tuple)
                                     else (expected_samples, None))
        start = time.monotonic()
        run_dir = tempfile.mkdtemp(prefix=problem.id + "_", dir=self.scratch_dir)
        try:
            markers = [f"-- {what} {uuid.uuid4().hex} --" for what in ("upstream log", "second")]
            secret, module = uuid.uuid4().hex, f"g4_verdict_{uuid.uuid4().hex[:12]}"
            harness = f"g4_isolation_{uuid.uuid4().hex[:12]}"
            with open(os.path.join(run_dir, SAMPLE), "w") as f:
                f.write(code)
            with open(os.path.join(run_dir, TEST), "w") as f:
                f.write(reseeded(bench.text, bench.random_draws, module))
            shutil.copyfile(problem.ref_path, os.path.join(run_dir, REF))
            isolate = bench.always_isolate or rtl.reaches_outside(code, bench.upward_names)
            seeds = self.stimulus_seeds(problem)
            run = self.box.run_script(
                self._script, run_dir, inputs=(SAMPLE, TEST, REF), null_files=(WAVE,),
                stdout_name=LOG, phase_timeouts=self._phase_timeouts,
                args=(markers[0], "1" if isolate else "0",
                      VERDICT_MODULE.format(name=module, secret=secret), module,
                      bench.harness.format(name=harness), harness, secret,
                      "1" if bench.random_draws else "0", markers[1], *map(str, seeds),
                      uuid.uuid4().hex),
                exe_link=self._iverilog_binary, empty_dir=True)
            limit = self.box.limits.file_bytes
            with open(os.path.join(run_dir, LOG), "rb") as f:
                raw = f.read(limit + 1)
            isolated, _, log = raw.decode("utf-8", "replace").partition(markers[0] + "\n")
            log, _, second_log = log.partition(markers[1] + "\n")
            log, report = stamped_report(log, secret)
            status = run.stderr
            codes = _status(status)
            if codes.get("preprocess", 0) != 0 and run.timed_out_phase is None:
                return Verdict(False, NOT_RTL, False, NOT_JUDGED, detail=PREPROCESSED,
                               seconds=time.monotonic() - start)
            if run.timed_out_phase is not None and run.timed_out_phase < len(PHASES) - 1:
                log += "\nTIMEOUT\n"  # as upstream appends on its wall-clock limit
            elif not run.wall_timeout and PHASES[0] not in codes:
                # Only the sandbox failing to start keeps the script from its
                # first status line; failing every sample for it would be wrong.
                raise JudgeError(f"{problem.id}: the sandbox did not run (exit "
                                 f"{run.returncode}): {status.strip()[:1000]}")
            limit_hit = len(raw) >= limit
            verdict = verdict_from(log, status, run, limit_hit and not second_log, expected,
                                   outside=outside_references(isolated, codes),
                                   report=report)
            if verdict.passed and bench.random_draws:
                verdict = _second_stimulus(verdict, second_log, secret, seeds, expected_second,
                                           run, codes, limit_hit)
            return dataclasses.replace(verdict, seconds=time.monotonic() - start)
        finally:
            if not self.keep_dirs:
                shutil.rmtree(run_dir, ignore_errors=True)

    def judge_reference(self, problem):
        """The Verdict of the problem's own reference, submitted as a sample."""
        return self.judge(problem, problem.reference_as_sample())


@dataclasses.dataclass(frozen=True)
class _Testbench:
    text: str
    always_isolate: bool          # it or the reference declares in the compilation unit
    upward_names: frozenset       # its and the reference's tasks, functions, named
                                  # blocks (what a design could call) and modules
    random_draws: tuple           # its draws the second simulation reseeds (random_draws)
    harness: str                  # the isolation harness, its name a {name} field


def _second_stimulus(verdict, log, secret, seeds, expected, run, codes, limit_hit):
    """`verdict` (a pass) confirmed by the second simulation's `log`, or the
    second_stimulus failure (module docstring)."""
    _, report = stamped_report(log, secret)
    errors, samples = report if report is not None else (None, None)
    if run.wall_timeout or run.timed_out_phase is not None:
        why = "timed out"
    elif limit_hit:
        why = "reached the log limit"
    elif codes.get("second", 0) != 0:
        why = f"the simulator exited with {codes.get('second')}"
    elif report is None:
        why = "printed no report"
    elif errors or not samples:
        why = f"{errors} mismatches in {samples} samples"
    elif expected is not None and samples != expected:
        why = f"{samples} samples where the reference has {expected}"
    else:
        return dataclasses.replace(verdict, second_tb_samples=samples)
    return dataclasses.replace(verdict, passed=False, reason=SECOND_STIMULUS,
                               second_tb_samples=samples,
                               detail=f"under a second stimulus (seeds {seeds[0]}, "
                                      f"{seeds[1]}): {why}")


def from_config(config, scratch_dir=None):
    """A Judge with the sandbox and limits of an eval config (configs/cpu.py)."""
    iverilog, vvp = find_tool(config.iverilog), find_tool(config.vvp)
    slack = 10
    limits = sandbox_lib.Limits(
        wall_s=config.compile_timeout_s + 2 * config.sim_timeout_s + slack,
        cpu_s=config.cpu_limit_s,
        memory_bytes=config.memory_limit_mb << 20,
        file_bytes=config.log_limit_kb << 10,
        dir_bytes=config.dir_limit_mb << 20)
    box = sandbox_lib.Sandbox(config.sandbox, limits)
    return Judge(box, iverilog, vvp, config.compile_timeout_s, config.sim_timeout_s,
                 scratch_dir=scratch_dir, keep_dirs=config.keep_dirs,
                 stimulus_seed=config.stimulus_seed)
