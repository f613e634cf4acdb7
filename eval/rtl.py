"""Whether a sample is Verilog RTL and nothing else, read by a lexer of our own.

A spec-to-rtl answer is a design: it computes outputs from inputs. The judge
refuses, before anything is compiled, a sample that does anything else, with
the reason in its verdict (`not_rtl`, detail e.g. `$fopen`). The text is split
into tokens by Verilog's lexical rules (IEEE 1800-2017 clause 5 and 22, the
parts Icarus Verilog 11 reads: white space, `//` and `/* */` comments, string
literals, numbers with their bases, simple, escaped and system identifiers,
compiler directives, operators), never searched with patterns over raw text,
so a comment, a string or an identifier character cannot hide a construct from
this check while the compiler sees it. Text the lexer cannot read (an
unterminated comment or string, a character outside the grammar, a lone
backslash) is refused with where it stopped.

Refused (the first reason found is the verdict's detail):
  * system tasks and functions outside ALLOWED_SYSTEM_NAMES: file and process
    access (`$fopen`, `$readmemh`, `$system`), the simulator's state (`$time`,
    `$random`, `$urandom`: a sample cannot draw from or steer the testbench's
    stimulus stream), simulation control (`$finish`, `$stop`), `$root` and
    `$unit`;
  * hierarchical names and member selects: every `.` must open a named port
    connection (`.a(b)`, `.*` after `(` or `,`); `a.b`, `g[0].x`, `f().y` are
    refused. None of the 156 VerilogEval references uses one;
  * package scope `::`, `import` and `export` (packages, DPI), `defparam`,
    `bind`, configurations (`config`), `force`/`release`, classes, programs,
    interfaces, packages, `extern`;
  * escaped identifiers (`\\tb.x `: one name to the compiler, a dotted one to
    a reader), attributes (`(* ... *)`: Icarus acts on some, and its
    preprocessor reads comments otherwise after `(*`; `@(*)` as written is
    fine);
  * compiler directives other than DIRECTIVES, each of which must stand alone
    on its line in the exact form _DIRECTIVE_LINES gives (Icarus reads the
    rest of some directive lines by rules of its own: after
    `default_nettype wire` a `/*` opens no comment for it); no macros (Icarus
    pastes an expansion onto the text after it, and expands macros where this
    lexer sees a comment), no `include` (a file), no conditional compilation
    (a branch Icarus skips is not lexed as here: a quote opens no string
    there), no `#line`;
  * control characters (a lone carriage return ends a `//` comment for Icarus's
    preprocessor), and samples over MAX_BYTES.
With no directive but these, Icarus's preprocessor has nothing to change, and
the judge checks that it changes nothing (eval/judge.py) before it compiles.
The 156 references use `$bits` and nothing else refused here; the allowed
system names are the ones a design computes with (sizes, signedness, bit
counts) and the display tasks (their output is the sample's own and decides
nothing: eval/judge.py).

`reaches_outside` then says whether the sample could name anything outside
itself at all; only a sample for which it is False skips the judge's isolated
elaboration (eval/judge.py).
"""

import bisect
import dataclasses
import functools
import re

# System tasks and functions an RTL answer may use. Sizes and array queries,
# signedness, bit counts (IEEE 1800-2017 20.6-20.9, 20.7), and printing.
ALLOWED_SYSTEM_NAMES = frozenset("""
$bits $clog2 $signed $unsigned $size $high $low $left $right $increment $dimensions
$unpacked_dimensions $countones $countbits $onehot $onehot0 $isunknown
$display $displayb $displayh $displayo $write $writeb $writeh $writeo
""".split())
# Directives that change nothing a design computes with. No macros at all: Icarus's
# preprocessor pastes an expansion onto the text after it (`/` then `*` opens
# a comment there) and expands macros where this lexer sees a comment, so the
# text it compiles is not the text read here.
DIRECTIVES = frozenset("""
timescale default_nettype resetall celldefine endcelldefine
""".split())
REFUSED_KEYWORDS = frozenset("""
defparam bind config endconfig force release import export extern class endclass
program endprogram interface endinterface package endpackage library include
""".split())
# Keywords that cannot name a module (with REFUSED_KEYWORDS): a word among
# these followed by a name is not an instance of another module.
KEYWORDS = frozenset("""
always always_comb always_ff always_latch and assert assign assume automatic begin bit buf
bufif0 bufif1 byte case casex casez cmos const cover deassign default disable do edge else
end endcase endfunction endgenerate endmodule endprimitive endtask enum event for forever
fork function generate genvar if iff initial inout input int integer join join_any
join_none localparam logic longint macromodule module nand negedge nmos nor not notif0
notif1 or output packed parameter pmos posedge primitive priority pulldown pullup rcmos
real realtime reg repeat return rnmos rpmos rtran rtranif0 rtranif1 scalared shortint
shortreal signed specify endspecify specparam static string struct supply0 supply1 table
endtable task time tran tranif0 tranif1 tri tri0 tri1 triand trior trireg type typedef
union unique unique0 unsigned uwire var vectored void wait wand while wire wor xnor xor
""".split()) | REFUSED_KEYWORDS
DEFINES = frozenset({"module", "macromodule", "primitive"})

WORD, SYSTEM, DIRECTIVE, NUMBER, STRING, OPERATOR = (
    "word", "system", "directive", "number", "string", "operator")
MAX_BYTES = 256 << 10  # a sample's size (the largest reference is 1.7 KB)
# Bytes that are not Verilog text anywhere, comments included: control
# characters but tab and newline, a carriage return not ending a line (Icarus's
# preprocessor ends a `//` comment at a lone one), DEL.
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]|\r(?!\n)")
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_$]*")
_SYSTEM = re.compile(r"\$[A-Za-z0-9_$]+")
# A number: a size or a decimal (with an optional fraction and exponent), or
# a based value `'sh 1F`, `'0`, `'1`, `'x`, `'z` (IEEE 1800-2017 5.7).
_DECIMAL = re.compile(r"[0-9][0-9_]*(?:\.[0-9][0-9_]*)?(?:[eE][+-]?[0-9][0-9_]*)?")
_BASED = re.compile(r"'[sS]?(?:[bB][ \t]*[01xXzZ?_]+|[oO][ \t]*[0-7xXzZ?_]+"
                    r"|[dD][ \t]*(?:[0-9_]+|[xXzZ?]_*)|[hH][ \t]*[0-9a-fA-FxXzZ?_]+)"
                    r"|'[01xXzZ](?![A-Za-z0-9_$])")
_OPERATORS = sorted("""
<<<= >>>= === !== ==? !=? <<< >>> <-> ** <= >= == != && || << >> ~& ~| ~^ ^~ -> ++ --
+= -= *= /= %= &= |= ^= <<= >>= +: -: :: '{ '( ## @@ (* *) |-> |=>
+ - * / % < > ! ~ & | ^ = ? : ; , . ( ) [ ] { } # @ '
""".split(), key=len, reverse=True)
# A directive line as a whole, exactly: Icarus reads the rest of such a line by
# rules of its own (a `/*` after `default_nettype wire` opens no comment for
# it), so nothing may follow what the directive takes but a `//` comment to the
# line's end (ignored whichever way it is read).
_UNIT = r"(?:s|ms|us|ns|ps|fs)"
_LINE_END = r"[ \t]*(?://[^\n]*)?"
_DIRECTIVE_LINES = {
    "timescale": re.compile(rf"[ \t]*`timescale[ \t]+\d+[ \t]*{_UNIT}[ \t]*/[ \t]*\d+[ \t]*"
                            rf"{_UNIT}{_LINE_END}"),
    "default_nettype": re.compile(r"[ \t]*`default_nettype[ \t]+(?:none|wire|tri|tri0|tri1|"
                                  rf"wand|triand|wor|trior|trireg|uwire){_LINE_END}"),
    "resetall": re.compile(rf"[ \t]*`resetall{_LINE_END}"),
    "celldefine": re.compile(rf"[ \t]*`celldefine{_LINE_END}"),
    "endcelldefine": re.compile(rf"[ \t]*`endcelldefine{_LINE_END}"),
}


def _token_pattern(continued_lines):
    space = r"[ \t\n]+|\r\n" + (r"|\\\n" if continued_lines else "")
    return re.compile("|".join([
        rf"(?P<skip>(?:{space})+|//[^\n]*|/\*.*?\*/)",
        r"(?P<unclosed>/\*)",
        r'(?P<string>"(?:[^"\\\n]|\\[^\r\n])*")',
        rf"(?P<{DIRECTIVE}>`[A-Za-z_][A-Za-z0-9_$]*)",
        rf"(?P<{WORD}>{_WORD.pattern})",
        rf"(?P<{SYSTEM}>{_SYSTEM.pattern})",
        rf"(?P<{NUMBER}>{_DECIMAL.pattern}|{_BASED.pattern})",
        rf"(?P<{OPERATOR}>{'|'.join(re.escape(o) for o in _OPERATORS)})",
    ]), re.DOTALL)


_TOKEN = _token_pattern(False)
_CONTINUED_TOKEN = _token_pattern(True)


class Unreadable(ValueError):
    """Text outside Verilog's lexical grammar (the reason says where)."""


@dataclasses.dataclass(frozen=True)
class Token:
    kind: str
    text: str
    line: int
    start: int  # offset in the text


class _Lines:
    """Line numbers of offsets in a text, a backslash-continued line counting as
    one where continuations are read (a testbench's multi-line macros)."""

    def __init__(self, code, continued):
        self._ends = [i for i, c in enumerate(code) if c == "\n" and
                      not (continued and i and code[i - 1] == "\\")]

    def of(self, index):
        return bisect.bisect_right(self._ends, index - 1) + 1


def tokens(code, continued_lines=False):
    """The tokens of `code` (comments and white space dropped); Unreadable if
    some text is not Verilog. `continued_lines`: a backslash at the end of a
    line continues it (a testbench's multi-line macros); a sample gets no such
    leniency. Cached: the judge reads each testbench several ways."""
    if continued_lines:
        return list(_trusted_tokens(code))
    return list(_tokens(code, False))


@functools.lru_cache(maxsize=64)
def _trusted_tokens(code):
    """A testbench's or a reference's tokens, kept: the judge reads them several ways
    (a sample's are read once and not kept)."""
    return _tokens(code, True)


def _tokens(code, continued_lines):
    lines = _Lines(code, continued_lines)
    control = _CONTROL.search(code)
    if control:
        raise Unreadable(f"line {lines.of(control.start())}: the control character "
                         f"{control.group()!r}")
    pattern = _CONTINUED_TOKEN if continued_lines else _TOKEN
    out = []
    i, n = 0, len(code)
    while i < n:
        match = pattern.match(code, i)
        if not match:
            raise Unreadable(f"line {lines.of(i)}: {_why_unreadable(code, i)}")
        kind = match.lastgroup
        if kind == "unclosed":
            raise Unreadable(f"line {lines.of(i)}: a /* comment is never closed")
        if kind != "skip":
            text = match.group(kind)
            out.append(Token(kind, text[1:] if kind == DIRECTIVE else text, lines.of(i), i))
        i = match.end()
    return tuple(out)


def _why_unreadable(code, i):
    if code.startswith("/*", i):
        return "a /* comment is never closed"
    if code[i] == '"':
        end = code.find("\n", i)
        close = code.find('"', i + 1)
        return ("a string is never closed" if close < 0 and end < 0 else
                "a string runs past its line")
    if code[i] == "\\":
        return "an escaped identifier or a backslash outside a string"
    if code[i] == "`":
        return "a ` that starts no directive (token pasting or stringification)"
    return f"{code[i]!r} is not Verilog"


def _physical_line(code, index):
    start = code.rfind("\n", 0, index) + 1
    end = code.find("\n", index)
    return code[start:len(code) if end < 0 else end].rstrip("\r")


def _directive_problem(code, tok):
    """Why directive `tok` is refused, or None."""
    if tok.text not in DIRECTIVES:
        return f"`{tok.text}"
    if not _DIRECTIVE_LINES[tok.text].fullmatch(_physical_line(code, tok.start)):
        return f"`{tok.text} on a line that holds more than the directive"
    return None


def problems(code):
    """Why `code` is not RTL: its first refused construct as `what (line N)`, in a
    list of one; [] for RTL."""
    try:
        size = len(code.encode("utf-8"))
    except UnicodeEncodeError as e:  # a lone surrogate (JSON's "\udce9" decodes to one)
        return [f"not text: {code[e.start]!r} at offset {e.start} has no UTF-8 form"]
    if size > MAX_BYTES:
        return [f"too large: {size} bytes, more than {MAX_BYTES} (no answer needs so much)"]
    try:
        toks = tokens(code)
    except Unreadable as e:
        return [f"unreadable: {e}"]
    return _problems(code, toks)


def _problems(code, toks):
    """The first reason `toks` (of `code`) are not RTL, as a list of one; [] for RTL."""
    for k, (tok, depth) in enumerate(zip(toks, _definition_depths(toks))):
        before = toks[k - 1] if k else None
        after = toks[k + 1] if k + 1 < len(toks) else None
        why = None
        if tok.kind == WORD and tok.text in ("task", "function") and depth <= 0:
            # The compilation unit's own subroutine: a name the full compile may
            # bind in the testbench instead (`disable`), elaborated alone not.
            why = f"a {tok.text} outside a module"
        elif tok.kind == SYSTEM and tok.text not in ALLOWED_SYSTEM_NAMES:
            why = tok.text
        elif tok.kind == DIRECTIVE:
            why = _directive_problem(code, tok)
        elif tok.kind == WORD and tok.text in REFUSED_KEYWORDS:
            why = tok.text
        elif tok.text == "::":
            why = "::"
        elif tok.text == "#" and after and after.text == "line":
            why = "#line"
        elif tok.text == "(*" and not code.startswith("(*)", tok.start):
            # Only `@(*)`, as written: after `(*` Icarus's preprocessor reads
            # comments otherwise.
            why = "an attribute (* ... *)"
        elif tok.text == "." and not (
                before and before.text in ("(", ",") and after and
                (after.kind == WORD or after.text in ("*", "*)"))):
            name = (before.text if before else "") + "." + (after.text if after else "")
            why = f"a hierarchical name or member select {name}"
        if why:
            return [f"{why} (line {tok.line})"]
    return []


def top_level_modules(toks):
    """Names of the modules and primitives `toks` define outside any other: the
    only ones an instance in the sample surely binds to (a nested module or a
    type of the same name elsewhere in the text does not make an instance its
    own: the full compile may bind it to the testbench's)."""
    depths = _definition_depths(toks)
    return {toks[k + 1].text for k, (tok, depth) in enumerate(zip(toks[:-1], depths))
            if tok.kind == WORD and tok.text in DEFINES and not depth and toks[k + 1].kind == WORD}


def _definition_depths(toks):
    """For each token, how many module or primitive definitions enclose it (a
    definition's own keyword not counted)."""
    depth = 0
    for tok in toks:
        yield depth
        if tok.kind == WORD and tok.text in DEFINES:
            depth += 1
        elif tok.text in ("endmodule", "endprimitive"):
            depth -= 1


def reaches_outside(code, outside_names=frozenset()):
    """False only when `code` names nothing outside itself: it is RTL
    (`problems`), names none of `outside_names` (the testbench's
    and the reference's modules, and their tasks, functions and named blocks,
    which a design finds by a simple name in its enclosing instances), and
    instantiates only modules it defines outside any other module (a word
    followed by `#` or by another word is read as an instance unless the first
    is a keyword or such a module: a variable of a user-defined type is
    isolated too). Unreadable text reaches outside."""
    try:
        toks = tokens(code)
    except Unreadable:
        return True
    if _problems(code, toks):  # anything not RTL, a hierarchical name among them
        return True
    own = top_level_modules(toks)
    for k, tok in enumerate(toks):
        if tok.kind != WORD:
            continue
        if tok.text in outside_names:
            return True
        after = toks[k + 1] if k + 1 < len(toks) else None
        if tok.text not in KEYWORDS and tok.text not in own and after is not None and (
                after.text == "#" or (after.kind == WORD and after.text not in KEYWORDS)):
            return True
    return False
