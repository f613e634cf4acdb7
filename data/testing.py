"""Shared test helpers for the data package: rows and files written on the fly."""

import json
import os

CODE = "```verilog\nmodule inv(input a, output y);\n  assign y = ~a;\nendmodule\n```"
GOOD_RESPONSE = f"<think>\nAn inverter is one assign.\n</think>\n<answer>\nHere it is.\n{CODE}\n</answer>"


def record(prompt="Write an inverter inv with input a and output y.", response=GOOD_RESPONSE,
           system="You are a Verilog expert."):
    return {"system": system, "prompt": prompt, "response": response}


def write_jsonl(directory, lines, name="rows.jsonl"):
    """Writes `lines` (dicts, or raw strings for malformed lines) as a JSONL file."""
    path = os.path.join(directory, name)
    with open(path, "w") as f:
        for line in lines:
            f.write((line if isinstance(line, str) else json.dumps(line)) + "\n")
    return path
