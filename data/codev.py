"""Reading CodeV-R1 SFT rows (`system`, `prompt`, `response`) and their policies.

Rows come from a local JSONL or Parquet file, a Hugging Face Hub data set id
(`zhuyaoyu/CodeV-R1-dataset`, file `codev_r1_sft.jsonl`), or `sample`: the small
data set written for this project (data/sample/). A bad row never stops a run:
it becomes a `Skip` with its 1-based row number and a reason, and is counted.
A file that cannot be read, or lacks a column, is one clear error instead.

A response is `<think>reasoning</think>` followed by the answer, which may be
wrapped in `<answer>...</answer>`. The response policy keeps the answer only
(`strip_thinking`, the reference's choice) or turns the reasoning into Gemma 4
thinking (`keep_thinking`: `<|channel>thought\\n...<channel|>` before the answer).
"""

import dataclasses
import json
import os
import re

from common import cli
from common import storage

FIELDS = ("system", "prompt", "response")
SAMPLE = "sample"
SAMPLE_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "sample",
                           "codev_r1_sample.jsonl")

RESPONSE_POLICIES = ("strip_thinking", "keep_thinking")
SYSTEM_POLICIES = ("drop", "keep")

# Skip reasons, in the order reports list them.
INVALID_JSON = "invalid_json"
MISSING_FIELD = "missing_field"
NOT_A_STRING = "not_a_string"
EMPTY = "empty"
UNCLOSED_THINK = "unclosed_think"
NO_CODE = "no_code"
TOO_LONG = "too_long"
# The text holds an image/audio/video placeholder token, which a multimodal model
# replaces by media features (data/chat.py, ChatEncoder.media_ids).
MEDIA_TOKEN = "media_token"
SKIP_REASONS = (INVALID_JSON, MISSING_FIELD, NOT_A_STRING, EMPTY, UNCLOSED_THINK,
                NO_CODE, MEDIA_TOKEN, TOO_LONG)

_THINK = re.compile(r"^\s*<think>(.*?)</think>(.*)$", re.DOTALL)
_ANSWER = re.compile(r"^\s*<answer>(.*?)</answer>\s*$", re.DOTALL)
_CODE = re.compile(r"```(?:verilog|systemverilog|sv|v)?\s*\n.*?\bmodule\b.*?```|"
                   r"\bmodule\b.*?\bendmodule\b", re.DOTALL | re.IGNORECASE)


class DataError(cli.UserError):
    """A data source or data config that cannot be used at all (not a bad row)."""


class SkipRow(Exception):
    """A row that cannot become an example; counted under `reason`, never fatal."""

    def __init__(self, reason):
        super().__init__(reason)
        self.reason = reason


@dataclasses.dataclass(frozen=True)
class Row:
    number: int  # 1-based position in the source
    system: str
    prompt: str
    response: str


@dataclasses.dataclass(frozen=True)
class Skip:
    number: int
    reason: str
    detail: str = ""


def _check_fields(number, record):
    if not isinstance(record, dict):
        return Skip(number, INVALID_JSON, "not a JSON object")
    for field in FIELDS:
        if field not in record or record[field] is None:
            return Skip(number, MISSING_FIELD, field)
        if not isinstance(record[field], str):
            return Skip(number, NOT_A_STRING, field)
    if not record["prompt"].strip() or not record["response"].strip():
        return Skip(number, EMPTY, "prompt" if not record["prompt"].strip() else "response")
    return Row(number, record["system"], record["prompt"], record["response"])


def _read_jsonl(path, max_rows):
    with open(path, encoding="utf-8", errors="replace") as f:
        for number, line in enumerate(f, start=1):
            if max_rows and number > max_rows:
                return
            try:
                record = json.loads(line)
            except json.JSONDecodeError as e:
                yield Skip(number, INVALID_JSON, str(e))
                continue
            yield _check_fields(number, record)


def _read_parquet(path, max_rows):
    import pyarrow.parquet as pq  # pylint: disable=import-outside-toplevel
    try:
        table = pq.ParquetFile(path)
    except Exception as e:  # pyarrow raises several types for a bad file
        raise DataError(f"cannot read Parquet file {path}: {e}") from e
    missing = [c for c in FIELDS if c not in table.schema_arrow.names]
    if missing:
        raise DataError(f"{path} has no column(s) {', '.join(missing)}; "
                        f"columns are {', '.join(table.schema_arrow.names)}")
    number = 0
    for batch in table.iter_batches(columns=list(FIELDS), batch_size=4096):
        for record in batch.to_pylist():
            number += 1
            if max_rows and number > max_rows:
                return
            yield _check_fields(number, record)


def resolve_source(source, data_file):
    """A local path for `source`: `sample`, a file, a gs:// URL of one (copied to
    the local cache), or a Hub data set id."""
    if source == SAMPLE:
        return SAMPLE_PATH
    if storage.is_url(source):
        return storage.fetch_file(source)
    if os.path.exists(source):
        return source
    if source.count("/") == 1 and not source.startswith((".", "/")):
        from huggingface_hub import hf_hub_download  # pylint: disable=import-outside-toplevel
        try:
            return hf_hub_download(repo_id=source, filename=data_file, repo_type="dataset")
        except Exception as e:  # network, auth and missing-file errors alike
            raise DataError(f"cannot fetch {data_file} from Hub data set {source}: {e}") from e
    raise DataError(f"data source {source!r} is neither a file, nor 'sample', nor a gs:// "
                    "URL, nor a Hub data set id like owner/name")


def read_rows(source, data_file="codev_r1_sft.jsonl", max_rows=0):
    """Yields a `Row` or a `Skip` for each of the first `max_rows` rows (0: all)."""
    path = resolve_source(source, data_file)
    if not os.path.isfile(path) or not os.access(path, os.R_OK):
        raise DataError(f"cannot read data file {path}")
    if path.endswith(".parquet"):
        yield from _read_parquet(path, max_rows)
    else:
        yield from _read_jsonl(path, max_rows)


def split_response(response):
    """(reasoning, answer) of a response; raises SkipRow(reason) if malformed."""
    if "<think>" in response:
        match = _THINK.match(response)
        if not match:
            raise SkipRow(UNCLOSED_THINK)
        reasoning, answer = match.group(1).strip(), match.group(2)
    else:
        reasoning, answer = "", response
    wrapped = _ANSWER.match(answer)
    if wrapped:
        answer = wrapped.group(1)
    answer = answer.strip()
    if not answer:
        raise SkipRow(EMPTY)
    if not _CODE.search(answer):
        raise SkipRow(NO_CODE)
    return reasoning, answer


def assistant_content(reasoning, answer, policy):
    if policy == "strip_thinking" or not reasoning:
        return answer
    if policy == "keep_thinking":
        return f"<|channel>thought\n{reasoning}<channel|>{answer}"
    raise DataError(f"unknown response policy {policy!r}; one of {RESPONSE_POLICIES}")


def to_messages(row, response_policy="strip_thinking", system_policy="drop"):
    """The chat messages of a row; raises SkipRow(reason) for a bad response."""
    if system_policy not in SYSTEM_POLICIES:
        raise DataError(f"unknown system policy {system_policy!r}; one of {SYSTEM_POLICIES}")
    reasoning, answer = split_response(row.response)
    messages = []
    if system_policy == "keep" and row.system.strip():
        messages.append({"role": "system", "content": row.system})
    messages.append({"role": "user", "content": row.prompt})
    messages.append({"role": "assistant",
                     "content": assistant_content(reasoning, answer, response_policy)})
    return messages
