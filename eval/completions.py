"""The completions JSONL: one raw model answer per line.

    {"problem": "Prob001_zero", "sample": 0, "completion": "...", "finish_reason": "stop"}

`problem` and `completion` are required; `sample` (the index within the
problem) is assigned in file order when absent. This is both what the sampler
writes (`samples.jsonl` in the run directory, appended one problem at a time)
and what `--samples=FILE` scores.
"""

import collections
import dataclasses
import json
import os

from common import cli
from common import jsonl


class CompletionsError(cli.UserError):
    """A completions file that cannot be read, naming the line."""


@dataclasses.dataclass(frozen=True)
class Completion:
    problem: str
    sample: int
    completion: str
    finish_reason: str | None = None

    def to_json(self):
        row = {"problem": self.problem, "sample": self.sample, "completion": self.completion}
        if self.finish_reason is not None:
            row["finish_reason"] = self.finish_reason
        return row


def read(path):
    """The completions of `path`, in file order; a bad line is an error naming it,
    but for a torn last line, dropped with a warning (common/jsonl.py)."""
    try:
        rows, _ = jsonl.read_numbered(path)
    except OSError as e:
        raise CompletionsError(f"cannot read completions file {path}: {e.strerror}") from None
    except jsonl.JsonlError as e:
        raise CompletionsError(str(e)) from None
    result, next_index, seen = [], collections.Counter(), set()
    for number, row in rows:
        try:
            problem, text = row["problem"], row["completion"]
            if not isinstance(problem, str) or not isinstance(text, str):
                raise TypeError("problem and completion must be strings")
            index = int(row["sample"]) if row.get("sample") is not None else next_index[problem]
        except (ValueError, KeyError, TypeError) as e:
            raise CompletionsError(f"{path}:{number}: not a completion line ({e})") from e
        if (problem, index) in seen:
            raise CompletionsError(f"{path}:{number}: sample {index} of {problem} appears twice")
        seen.add((problem, index))
        next_index[problem] = max(next_index[problem], index + 1)
        result.append(Completion(problem, index, text, row.get("finish_reason")))
    return result


def append(path, rows):
    """Appends `rows` (Completions) in one write, flushed to disk."""
    text = "".join(json.dumps(r.to_json(), ensure_ascii=False) + "\n" for r in rows)
    with open(path, "a", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())




def counts(rows):
    """{problem: number of completions}."""
    return collections.Counter(r.problem for r in rows)
