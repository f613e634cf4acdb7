"""Append-only JSON-lines files that survive a writer killed mid-line.

Training metrics (`metrics.jsonl`) and evaluation samples (`samples.jsonl`) grow
one line at a time while a run goes on; a run killed by a preemption, an OOM
kill or a full disk can leave its last line half written. Readers here
(`read`) drop such a torn last line (no newline, and not a complete JSON
value) with a warning that names the file, and say so to the caller; a
writer about to append again first cuts it off (`repair`). A line that does
not parse anywhere else is no torn tail but a damaged file: an error naming
the file and the line number.
"""

import json
import logging
import os

from common import cli

log = logging.getLogger("common.jsonl")


class JsonlError(cli.UserError):
    """A line before the last one is not JSON: the file is damaged, not torn."""


def _torn(path, tail):
    log.warning("%s: dropped a torn last line (%d bytes without a newline): its writer "
                "was stopped mid-line", path, len(tail))


def _complete(line):
    """The record of a line without its newline, or None when it was torn: every
    record of these files is a JSON object, and no prefix of one parses as one."""
    try:
        value = json.loads(line)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def read_numbered(path):
    """([(line number, record)], torn): every line's JSON value, and whether a torn
    last line was dropped. Blank lines are skipped."""
    with open(path, "rb") as f:
        data = f.read()
    lines = data.split(b"\n")
    tail = lines.pop()  # b"" when the file ends with its newline
    records = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            records.append((number, json.loads(line)))
        except ValueError as e:
            raise JsonlError(f"{path}:{number}: not a JSON line ({e})") from None
    torn = False
    if tail.strip():
        record = _complete(tail)
        if record is None:
            _torn(path, tail)
            torn = True
        else:  # complete: only its newline was lost
            records.append((len(lines) + 1, record))
    return records, torn


def read(path):
    """(records, torn), as read_numbered without the line numbers."""
    numbered, torn = read_numbered(path)
    return [record for _, record in numbered], torn


def repair(path):
    """Makes `path` end at a line boundary before it is appended to again: a torn
    last line is cut off (with the warning), a complete one gets its newline.
    Returns the bytes cut. A missing file is left missing."""
    if not os.path.exists(path):
        return 0
    with open(path, "rb+") as f:
        data = f.read()
        start = data.rfind(b"\n") + 1
        tail = data[start:]
        if not tail.strip():
            return 0
        if _complete(tail) is None:
            _torn(path, tail)
            f.truncate(start)
            f.flush()
            os.fsync(f.fileno())
            return len(tail)
        f.write(b"\n")  # the file position is at its end after the read
        f.flush()
        os.fsync(f.fileno())
        return 0
