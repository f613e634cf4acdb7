"""The CodeV-R1 profile: its rows (`system`, `prompt`, `response`) and their policies.

The default training source is the Hub data set `zhuyaoyu/CodeV-R1-dataset`
(file `codev_r1_sft.jsonl`); `sample` is the small data set written for this
project (data/sample/). Rows are read by data/sources.py and turned into
conversations by data/formats.py, which uses this profile when a source has
CodeV-R1's columns.

A response is `<think>reasoning</think>` followed by the answer, which may be
wrapped in `<answer>...</answer>`. The response policy keeps the answer only
(`strip_thinking`, the reference's choice) or turns the reasoning into Gemma 4
thinking (`keep_thinking`: `<|channel>thought\\n...<channel|>` before the answer).
An answer without a Verilog module is dropped as `no_code`.
"""

import dataclasses
import re

from data import sources

FIELDS = ("system", "prompt", "response")
RESPONSE_POLICIES = ("strip_thinking", "keep_thinking")
SYSTEM_POLICIES = ("drop", "keep")

_THINK = re.compile(r"^\s*<think>(.*?)</think>(.*)$", re.DOTALL)
_ANSWER = re.compile(r"^\s*<answer>(.*?)</answer>\s*$", re.DOTALL)
_CODE = re.compile(r"```(?:verilog|systemverilog|sv|v)?\s*\n.*?\bmodule\b.*?```|"
                   r"\bmodule\b.*?\bendmodule\b", re.DOTALL | re.IGNORECASE)


@dataclasses.dataclass(frozen=True)
class Row:
    number: int  # 1-based position in the source
    system: str
    prompt: str
    response: str


def to_row(number, fields):
    """A `Row` of a record's fields (`system` may be missing); raises `SkipRow`."""
    fields = {"system": "", **{k: v for k, v in fields.items() if v is not None}}
    for field in FIELDS:
        if field not in fields:
            raise sources.SkipRow(sources.MISSING_FIELD,
                                  f"expected a value for `{field}`, found none")
        if not isinstance(fields[field], str):
            raise sources.SkipRow(sources.NOT_A_STRING, f"{field}: expected text, found "
                                  f"{type(fields[field]).__name__} {fields[field]!r:.40}")
    for field in ("prompt", "response"):
        if not fields[field].strip():
            raise sources.SkipRow(sources.EMPTY, f"{field}: expected text, found an empty text")
    return Row(number, fields["system"], fields["prompt"], fields["response"])


def read_rows(source, max_rows=0):
    """Yields a `Row`, or a `sources.Skip` for a row that is not a usable CodeV-R1 row."""
    for item in sources.read(source, max_rows=max_rows):
        if isinstance(item, sources.Skip):
            yield item
            continue
        try:
            yield to_row(item.number, item.fields)
        except sources.SkipRow as skip:
            yield sources.Skip(item.number, skip.reason, skip.detail)


def split_response(response):
    """(reasoning, answer) of a response; raises SkipRow(reason) if malformed."""
    if "<think>" in response:
        match = _THINK.match(response)
        if not match:
            raise sources.SkipRow(sources.UNCLOSED_THINK, "response: expected </think> after "
                                  "<think>, found none")
        reasoning, answer = match.group(1).strip(), match.group(2)
    else:
        reasoning, answer = "", response
    wrapped = _ANSWER.match(answer)
    if wrapped:
        answer = wrapped.group(1)
    answer = answer.strip()
    if not answer:
        raise sources.SkipRow(sources.EMPTY, "response: expected an answer after the "
                              "reasoning, found none")
    if not _CODE.search(answer):
        raise sources.SkipRow(sources.NO_CODE, "response: expected a Verilog module "
                              f"(module ... endmodule) in the answer, found {answer[:40]!r}")
    return reasoning, answer


def assistant_content(reasoning, answer, policy):
    if policy == "strip_thinking" or not reasoning:
        return answer
    if policy == "keep_thinking":
        return f"<|channel>thought\n{reasoning}<channel|>{answer}"
    raise sources.DataError(f"unknown response policy {policy!r}; one of {RESPONSE_POLICIES}")


def to_messages(row, response_policy="strip_thinking", system_policy="drop"):
    """The chat messages of a row; raises SkipRow(reason) for a bad response."""
    if system_policy not in SYSTEM_POLICIES:
        raise sources.DataError(f"unknown system policy {system_policy!r}; one of {SYSTEM_POLICIES}")
    reasoning, answer = split_response(row.response)
    messages = []
    if system_policy == "keep" and row.system.strip():
        messages.append({"role": "system", "content": row.system})
    messages.append({"role": "user", "content": row.prompt})
    messages.append({"role": "assistant",
                     "content": assistant_content(reasoning, answer, response_policy)})
    return messages
