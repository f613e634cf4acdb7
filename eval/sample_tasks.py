"""The sample tasks (CodeV-R1 rows with a reference answer) as a VerilogEval data set.

    bazel run //eval:sample_tasks -- --out=runs/sample-tasks      # data/sample's 40 rows
    bazel run //eval:verilog_eval -- --dataset_dir=runs/sample-tasks ...

Each row whose answer holds one Verilog module becomes problem `ProbNNN_<module>`
(NNN: its row number), in the spec-to-rtl layout `eval/problems.py` reads:
  * `_prompt.txt`: the row's task, the module renamed `TopModule` (as VerilogEval
    asks for it);
  * `_ref.sv`: the row's answer, renamed `RefModule`;
  * `_test.sv`: a testbench generated from the reference's ports. Both modules get
    the same random stimulus on every input. A clock input (`clk`, `clock`) toggles
    every 5 ps; a reset input (`rst`, `reset`, `arst`, `srst`, `areset`, `clr`;
    active low when it ends in `n`) is held active for the first cycles and then
    asserted about one cycle in 16; a sequential design without a reset runs 16
    cycles unchecked so that its registers settle. Outputs are compared with `!==`
    (an X where the reference has none is a mismatch) after every input change and
    every rising edge. As VerilogEval's testbenches, it counts into `tb.stats1`
    (errors, clocks), which the judge reads, and prints `Mismatches: M in N
    samples` once from a `final` block, so the judge scores it unchanged.
Rows without exactly one module, or whose ports cannot be read (non-ANSI headers),
are skipped and counted, with the reason. `train.jsonl` holds every problem as
a `messages` training row: the conversation the evaluation sends (upstream
protocol), answered with the reference; the pipeline's demo trains on it.
"""

import dataclasses
import json
import os
import re

from absl import app
from absl import flags

from common import cli
from common import config_cli
from data import codev
from data import sources
from eval import extract
from eval import problems as problems_lib
from eval import protocols

CYCLES = 200
ANSWER = "_answer"  # the reference named TopModule, for the training rows
SETTLE_CYCLES = 16
RESET_CYCLES = 4
_CLOCKS = ("clk", "clock")
_RESET = re.compile(r"^(a?s?rst|a?reset|clr)(_?n)?$")
_DECLARATION = re.compile(
    r"^(?:(?P<dir>input|output|inout)\s+)?(?:(?:wire|reg|logic|var)\s+)?(?P<signed>signed\s+)?"
    r"(?P<range>\[[^\]]+\]\s*)?(?P<name>[A-Za-z_]\w*)$")
_PARAMETER = re.compile(
    r"^(?:(?:parameter|localparam)\s+)?(?:(?:integer|int|signed)\s+)?(?:\[[^\]]+\]\s*)?"
    r"(?P<name>[A-Za-z_]\w*)\s*=\s*(?P<value>.+)$", re.S)


class SampleTaskError(cli.UserError):
    """A sample row that cannot become a problem (skipped and counted)."""


@dataclasses.dataclass(frozen=True)
class Port:
    direction: str
    name: str
    range: str = ""
    signed: bool = False


@dataclasses.dataclass(frozen=True)
class Header:
    module: str
    parameters: tuple  # ((name, value), ...)
    ports: tuple  # (Port, ...)


def _strip_comments(code):
    code = re.sub(r"/\*.*?\*/", " ", code, flags=re.S)
    return re.sub(r"//[^\n]*", "", code)


def _matching(text, start):
    """Index just past the bracket that closes the one at `start`."""
    depth = 0
    for index in range(start, len(text)):
        if text[index] in "([{":
            depth += 1
        elif text[index] in ")]}":
            depth -= 1
            if depth == 0:
                return index + 1
    raise SampleTaskError("unbalanced brackets in the module header")


def _split_top_level(text):
    parts, depth, current = [], 0, []
    for char in text:
        if char in "([{":
            depth += 1
        elif char in ")]}":
            depth -= 1
        if char == "," and depth == 0:
            parts.append("".join(current).strip())
            current = []
        else:
            current.append(char)
    if "".join(current).strip():
        parts.append("".join(current).strip())
    return parts


def parse_header(code):
    """The module name, parameters and ANSI-style ports of the one module in `code`."""
    code = _strip_comments(code)
    names = re.findall(r"\bmodule\s+([A-Za-z_]\w*)", code)
    if len(names) != 1:
        raise SampleTaskError(f"expected one module, found {len(names)}")
    position = re.search(r"\bmodule\s+[A-Za-z_]\w*\s*", code).end()
    parameters = ()
    if code[position:].startswith("#"):
        open_paren = code.index("(", position)
        end = _matching(code, open_paren)
        parameters = tuple(_parameter(p) for p in _split_top_level(code[open_paren + 1:end - 1]))
        position = end
    rest = code[position:].lstrip()
    if not rest.startswith("("):
        raise SampleTaskError(f"module {names[0]} has no port list")
    open_paren = position + (len(code[position:]) - len(rest))
    end = _matching(code, open_paren)
    ports, previous = [], None
    for item in _split_top_level(code[open_paren + 1:end - 1]):
        match = _DECLARATION.match(" ".join(item.split()))
        if not match or not (match["dir"] or previous):
            raise SampleTaskError(f"module {names[0]}: cannot read the port {item!r} "
                                  "(only ANSI-style headers are supported)")
        if match["dir"]:
            previous = Port(match["dir"], "", (match["range"] or "").strip(),
                            bool(match["signed"]))
        ports.append(dataclasses.replace(previous, name=match["name"]))
    if not any(p.direction == "output" for p in ports):
        raise SampleTaskError(f"module {names[0]} has no output")
    if any(p.direction == "inout" for p in ports):
        raise SampleTaskError(f"module {names[0]} has an inout port")
    return Header(names[0], parameters, tuple(ports))


def _parameter(text):
    match = _PARAMETER.match(text.strip())
    if not match:
        raise SampleTaskError(f"cannot read the parameter {text!r}")
    return match["name"], " ".join(match["value"].split())


def _reset_level(name):
    """1 for an active-high reset input, 0 for active low, None if not a reset."""
    match = _RESET.match(name.lower())
    if not match:
        return None
    return 0 if match.group(2) else 1


def testbench(header, cycles=CYCLES):
    """A self-checking testbench `tb` comparing RefModule with TopModule."""
    inputs = [p for p in header.ports if p.direction == "input"]
    outputs = [p for p in header.ports if p.direction == "output"]
    clocks = [p for p in inputs if p.name.lower() in _CLOCKS and not p.range]
    clock = clocks[0].name if clocks else None
    resets = [(p, _reset_level(p.name)) for p in inputs
              if p.name != clock and _reset_level(p.name) is not None and not p.range]
    data = [p for p in inputs if p.name != clock and p not in [r for r, _ in resets]]

    def declare(kind, port, suffix=""):
        signed = "signed " if port.signed else ""
        width = f"{port.range} " if port.range else ""
        return f"\t{kind} {signed}{width}{port.name}{suffix};"

    lines = ["`timescale 1 ps/1 ps", "", "module tb();"]
    lines += [f"\tlocalparam {name} = {value};" for name, value in header.parameters]
    lines += [declare("reg", p) for p in inputs]
    for port in outputs:
        lines += [declare("wire", port, "_ref"), declare("wire", port, "_dut")]
    # VerilogEval's counters, which the judge reads (eval/judge.py): tb.stats1.
    lines += ["\ttypedef struct packed {", "\t\tint errors;", "\t\tint clocks;", "\t} stats;",
              "\tstats stats1 = '0;", "\tinteger i;", ""]
    for module, instance, suffix in (("RefModule", "good1", "_ref"),
                                     ("TopModule", "top_module1", "_dut")):
        connections = [f".{p.name}({p.name})" for p in inputs]
        connections += [f".{p.name}({p.name}{suffix})" for p in outputs]
        lines.append(f"\t{module} {instance} ({', '.join(connections)});")
    reference = ", ".join(f"{p.name}_ref" for p in outputs)
    candidate = ", ".join(f"{p.name}_dut" for p in outputs)
    lines += ["", "\ttask check;", "\tbegin", "\t\tstats1.clocks = stats1.clocks + 1;",
              f"\t\tif ({{{reference}}} !== {{{candidate}}}) stats1.errors = stats1.errors + 1;",
              "\tend", "\tendtask", ""]
    lines += ["\ttask drive(input hold_reset);", "\tbegin"]
    lines += [f"\t\t{p.name} = {{$random, $random, $random, $random}};" for p in data]
    for port, level in resets:
        active, idle = (f"1'b{level}", f"1'b{1 - level}")
        lines.append(f"\t\t{port.name} = (hold_reset || ($random & 15) == 0) ? {active} : {idle};")
    lines += ["\tend", "\tendtask", ""]
    if clock:
        warmup = RESET_CYCLES if resets else SETTLE_CYCLES
        lines += [f"\tinitial {clock} = 1'b0;", f"\talways #5 {clock} = ~{clock};", "",
                  "\tinitial begin",
                  f"\t\tfor (i = 0; i < {warmup}; i = i + 1) begin",
                  "\t\t\t@(negedge " + clock + ") drive(1'b1);", "\t\tend",
                  f"\t\tfor (i = 0; i < {cycles}; i = i + 1) begin",
                  "\t\t\t@(negedge " + clock + ") drive(1'b0);", "\t\t\t#1 check;",
                  "\t\t\t@(posedge " + clock + ");", "\t\t\t#1 check;", "\t\tend"]
    else:
        lines += ["\tinitial begin", f"\t\tfor (i = 0; i < {cycles}; i = i + 1) begin",
                  "\t\t\tdrive(1'b0);", "\t\t\t#1 check;", "\t\tend"]
    lines += ["\t\t$finish;", "\tend", "",
              '\tfinal $display("Mismatches: %0d in %0d samples", stats1.errors, stats1.clocks);',
              "endmodule", ""]
    return "\n".join(lines)


def problem_files(row_number, prompt, code):
    """(problem id, {suffix: text}) for one task and its reference `code`."""
    header = parse_header(code)
    rename = re.compile(rf"\b{re.escape(header.module)}\b")
    problem_id = f"Prob{row_number:03d}_{header.module}"
    if not problems_lib.ID_PATTERN.match(problem_id):
        raise SampleTaskError(f"{problem_id} is not a usable problem id")
    return problem_id, {
        "_prompt.txt": rename.sub("TopModule", prompt).strip() + "\n",
        "_ref.sv": rename.sub("RefModule", code),
        "_test.sv": testbench(header),
        ANSWER: rename.sub("TopModule", code).strip(),
    }


def training_row(problem_id, texts):
    """The problem as a `messages` training row: the conversation the evaluation
    sends (upstream protocol, no shots) answered with the reference, as the
    protocol asks for code ([BEGIN] ... [DONE])."""
    return {"id": problem_id, "messages": [
        *protocols.messages("upstream", texts["_prompt.txt"]),
        {"role": "assistant", "content": f"[BEGIN]\n{texts[ANSWER]}\n[DONE]"}]}


def write_dataset(source, out_dir):
    """Writes the data set of `source`'s rows into `out_dir`; returns (ids, skipped).

    `skipped` maps a row number to its reason. The folder is written under a
    temporary name and renamed into place, so it is complete or absent.
    """
    ids, skipped, files, rows = [], {}, {}, []
    for row in codev.read_rows(source):
        if isinstance(row, sources.Skip):
            skipped[row.number] = row.reason
            continue
        try:
            _, answer = codev.split_response(row.response)
            problem_id, texts = problem_files(row.number, row.prompt,
                                              extract.extract(answer).code)
        except (sources.SkipRow, SampleTaskError) as e:
            skipped[row.number] = str(e)
            continue
        ids.append(problem_id)
        rows.append(json.dumps(training_row(problem_id, texts)) + "\n")
        files.update({problem_id + suffix: text for suffix, text in texts.items()
                      if suffix != ANSWER})
    if not ids:
        raise SampleTaskError(f"no usable task in {source}: {skipped}")
    tmp = out_dir.rstrip("/") + ".partial"
    if os.path.exists(tmp):
        for name in os.listdir(tmp):
            os.remove(os.path.join(tmp, name))
    os.makedirs(tmp, exist_ok=True)
    files[problems_lib.PROBLEMS_FILE] = "".join(f"{i}\n" for i in ids)
    files[problems_lib.TRAINING_ROWS] = "".join(rows)
    for name, text in files.items():
        with open(os.path.join(tmp, name), "w") as f:
            f.write(text)
    if os.path.exists(out_dir):
        for name in os.listdir(out_dir):
            os.remove(os.path.join(out_dir, name))
        os.rmdir(out_dir)
    os.rename(tmp, out_dir)
    return ids, skipped


_SOURCE = flags.DEFINE_string("source", sources.SAMPLE, "CodeV-R1 rows: a .jsonl file or folder "
                              "(default: the embedded sample tasks).")
_OUT = flags.DEFINE_string("out", None, "The data set folder to write (replaced).")


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    out = config_cli.user_path(_OUT.value)
    ids, skipped = write_dataset(_SOURCE.value, out)
    print(f"{len(ids)} problems in {out}; {len(skipped)} rows skipped")
    for number, reason in sorted(skipped.items()):
        print(f"  row {number}: {reason}")


if __name__ == "__main__":
    flags.mark_flags_as_required(["out"])
    cli.run(main)
