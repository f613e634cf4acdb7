"""The Verilog code in a model's answer, extracted as upstream VerilogEval does.

First, thinking is removed: `<think>...</think>` and Gemma 4's
`<|channel>thought ...<channel|>` blocks; a block left open (the answer ran
out of tokens while thinking) removes the rest of the text, and a closing tag
with no opening one (the chat template opened the block in the prompt)
removes everything before it.

Then, as upstream `sv-generate` for spec-to-rtl (reimplemented, line based):
1. `[BEGIN]` ... `[DONE]`: a line starting with `[BEGIN]` opens the code (any
   text after the tag on that line belongs to it), a line that is `[DONE]` or
   ends with it closes it. An opened block never closed gives no code at all,
   as upstream.
2. Otherwise, with two or more fence lines (starting with three backticks):
   the first fenced block. Deviation: a block whose info string names another
   language (e.g. ```python) is passed over for a Verilog or untagged one when
   there is one; upstream takes the first block whatever it is. Fence lines
   may be indented.
3. Otherwise the text itself: from the line starting with `module TopModule`
   (when there is one) through the first `endmodule` line.

`extract_forgiving` is the reference study's rule (protocols.py), for answers
asked to come in a ```verilog block: the first verilog/systemverilog/sv
fenced block; an opened one never closed runs to the end of the text; a
[BEGIN] block needs no [DONE] and loses any fence lines inside it; else the
first untagged fenced block, else the module scan above.
"""

import dataclasses

THINKING_TAGS = (("<think>", "</think>"), ("<|channel>", "<channel|>"))
BEGIN, DONE = "[BEGIN]", "[DONE]"
FENCE = "```"
VERILOG_TAGS = frozenset({"", "verilog", "systemverilog", "sv", "v", "vlog"})
NAMED_VERILOG_TAGS = frozenset({"verilog", "systemverilog", "sv"})  # the reference's

# How the code was found (recorded with each sample).
BEGIN_DONE = "begin_done"
UNTERMINATED_BEGIN = "unterminated_begin"
FENCED = "fenced"
UNCLOSED_FENCE = "unclosed_fence"
MODULE_SCAN = "module_scan"
EMPTY = "empty"


@dataclasses.dataclass(frozen=True)
class Extracted:
    code: str
    method: str


def strip_thinking(text):
    """`text` without its thinking blocks."""
    for open_tag, close_tag in THINKING_TAGS:
        close = text.find(close_tag)
        open_ = text.find(open_tag)
        if close >= 0 and (open_ < 0 or close < open_):
            text = text[close + len(close_tag):]
        while True:
            open_ = text.find(open_tag)
            if open_ < 0:
                break
            close = text.find(close_tag, open_ + len(open_tag))
            if close < 0:
                text = text[:open_]
                break
            text = text[:open_] + text[close + len(close_tag):]
    return text


def _between_begin_done(lines):
    """(code lines, started, done) of the [BEGIN]/[DONE] block."""
    code, started = [], False
    for line in lines:
        if not started:
            head = line.lstrip()
            if head.startswith(BEGIN):
                started = True
                rest = head[len(BEGIN):]
                if rest.strip():
                    code.append(rest)
            continue
        if line.strip() == DONE:
            return code, True, True
        if line.rstrip().endswith(DONE):
            code.append(line.rstrip()[:-len(DONE)])
            return code, True, True
        code.append(line)
    return code, started, False


def _fenced_blocks(lines):
    """[(info string, code lines)] of the complete fenced blocks, in order."""
    blocks, inside, tag, body = [], False, "", []
    for line in lines:
        head = line.lstrip()
        if not head.startswith(FENCE):
            if inside:
                body.append(line)
            continue
        if inside:
            blocks.append((tag, body))
            inside, body = False, []
        else:
            inside, tag, body = True, head[len(FENCE):].strip().lower(), []
    return blocks


def _language(info):
    words = info.split()
    return words[0] if words else ""


def _module_scan(lines):
    """Upstream's fallback for answers without fences (or with one fence line)."""
    has_module = False
    for line in lines:
        if line.startswith("endmodule") and not has_module:
            break  # an endmodule before any `module TopModule`: keep from the top
        if line.startswith("module TopModule"):
            has_module = True
            break
    code, found_module, found_end = [], False, False
    for line in lines:
        head = line.strip()
        if head.startswith("module TopModule"):
            found_module = True
        echo = not found_end and (found_module or not has_module)
        if line.lstrip().startswith(FENCE):
            echo = False
        elif head.startswith("endmodule"):
            found_end = True
        if echo:
            code.append(line)
    return code


def extract(text):
    """The code of a raw completion, and how it was found."""
    lines = strip_thinking(text or "").splitlines()
    code, started, done = _between_begin_done(lines)
    if started:
        if not done:
            return Extracted("", UNTERMINATED_BEGIN)
        method = BEGIN_DONE
    else:
        blocks = _fenced_blocks(lines)
        if blocks:
            verilog = [body for tag, body in blocks if _language(tag) in VERILOG_TAGS]
            code, method = (verilog or [blocks[0][1]])[0], FENCED
        else:
            code, method = _module_scan(lines), MODULE_SCAN
    return _result(code, method)


def _unclosed_fence(lines, languages):
    """The lines after the last fence line when it opens a block in `languages`."""
    fences = [i for i, line in enumerate(lines) if line.lstrip().startswith(FENCE)]
    if len(fences) % 2 == 1:
        info = lines[fences[-1]].lstrip()[len(FENCE):].strip().lower()
        if _language(info) in languages:
            return lines[fences[-1] + 1:]
    return None


def _result(code, method):
    joined = "\n".join(code).strip("\n")
    if not joined.strip():
        return Extracted("", EMPTY)
    return Extracted(joined + "\n", method)


def extract_forgiving(text):
    """The code of a raw completion by the reference study's rule (module docstring)."""
    lines = strip_thinking(text or "").splitlines()
    blocks = _fenced_blocks(lines)
    named = [body for tag, body in blocks if _language(tag) in NAMED_VERILOG_TAGS]
    if named:
        return _result(named[0], FENCED)
    unclosed = _unclosed_fence(lines, NAMED_VERILOG_TAGS)
    if unclosed is not None:
        return _result(unclosed, UNCLOSED_FENCE)
    code, started, done = _between_begin_done(lines)
    if started:
        code = [line for line in code if not line.lstrip().startswith(FENCE)]
        return _result(code, BEGIN_DONE if done else UNTERMINATED_BEGIN)
    untagged = [body for tag, body in blocks if not _language(tag)]
    if untagged:
        return _result(untagged[0], FENCED)
    return _result(_module_scan(lines), MODULE_SCAN)
