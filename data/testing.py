"""Shared test helpers for the data package: rows and files written on the fly."""

import csv
import json
import os

from data import pipeline

CODE = "```verilog\nmodule inv(input a, output y);\n  assign y = ~a;\nendmodule\n```"
GOOD_RESPONSE = f"<think>\nAn inverter is one assign.\n</think>\n<answer>\nHere it is.\n{CODE}\n</answer>"


def record(prompt="Write an inverter inv with input a and output y.", response=GOOD_RESPONSE,
           system="You are a Verilog expert."):
    return {"system": system, "prompt": prompt, "response": response}


def data_config(**overrides):
    """The data config at 512 tokens with `overrides` (source, format, ...)."""
    config = pipeline.default_config()
    config.max_seq_len = 512
    config.update(overrides)
    return config


def trained_spans(tokenizer, encoded):
    """The decoded runs of consecutive trained tokens of an encoded example."""
    spans, current = [], []
    for token, trained in zip(encoded.input_ids.tolist(), encoded.loss_mask.tolist()):
        if trained:
            current.append(token)
        elif current:
            spans.append(tokenizer.decode(current))
            current = []
    return spans + ([tokenizer.decode(current)] if current else [])


def write_jsonl(directory, lines, name="rows.jsonl"):
    """Writes `lines` (dicts, or raw strings for malformed lines) as a JSONL file."""
    path = os.path.join(directory, name)
    with open(path, "w") as f:
        for line in lines:
            f.write((line if isinstance(line, str) else json.dumps(line)) + "\n")
    return path


# A user's own data in each format and file type (data/formats.py), small and
# varied: several turns, system prompts, answers in prose, Python and SQL, and a
# tool call with its tool definition.
TOOLS = [{"type": "function", "function": {
    "name": "run_sql", "description": "Runs a read-only SQL query.",
    "parameters": {"type": "object", "properties": {"query": {"type": "string"}},
                   "required": ["query"]}}}]
CHATS = [
    {"messages": [
        {"role": "system", "content": "You answer in one sentence."},
        {"role": "user", "content": "What does a flip-flop store?"},
        {"role": "assistant", "content": "One bit, sampled on a clock edge."},
        {"role": "user", "content": "And a latch?"},
        {"role": "assistant", "content": "One bit too, while its enable is high."}]},
    {"messages": [
        {"role": "user", "content": "Reverse a list in Python."},
        {"role": "assistant", "content": "```python\nitems[::-1]\n```"}]},
    {"messages": [
        {"role": "system", "content": "You can query the parts database."},
        {"role": "user", "content": "How many inverters are in stock?"},
        {"role": "assistant", "content": None, "tool_calls": [{"type": "function", "function": {
            "name": "run_sql",
            "arguments": {"query": "SELECT COUNT(*) FROM parts WHERE kind = 'inverter'"}}}]},
        {"role": "tool", "content": "42"},
        {"role": "assistant", "content": "There are 42 inverters in stock."}],
     "tools": TOOLS},
    {"messages": [
        {"role": "user", "content": "Count the rows of table t."},
        {"role": "assistant", "content": "SELECT COUNT(*) FROM t;"}]},
]
PAIRS = [
    {"prompt": "Name the gate whose output is high when its inputs differ.",
     "completion": "Exclusive OR (XOR)."},
    {"prompt": [{"role": "system", "content": "Answer with code only."},
                {"role": "user", "content": "Square a number in Python."}],
     "completion": [{"role": "assistant", "content": "lambda x: x * x"}]},
    {"prompt": "What is 7 in binary?", "completion": "111"},
]
QUESTIONS = [  # CSV columns named otherwise, read with data.columns
    {"question": "What does CMOS stand for?",
     "answer": "Complementary metal-oxide-semiconductor."},
    {"question": "How many bits are in a byte?", "answer": "Eight."},
]


def write_user_data(directory):
    """Writes the data sets above; returns {name: data-config overrides} for each."""
    import datasets  # pylint: disable=import-outside-toplevel
    import pyarrow as pa  # pylint: disable=import-outside-toplevel
    import pyarrow.parquet as pq  # pylint: disable=import-outside-toplevel
    messages = write_jsonl(directory, CHATS, name="chats.jsonl")
    pairs = os.path.join(directory, "pairs.parquet")
    # A Parquet column has one type, so the conversational row's message lists
    # are stored as JSON text (data/formats.py reads them back as lists).
    pq.write_table(pa.Table.from_pylist([{k: json.dumps(v) if isinstance(v, list) else v
                                          for k, v in row.items()} for row in PAIRS]), pairs)
    questions = os.path.join(directory, "questions.csv")
    with open(questions, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=["question", "answer"])
        writer.writeheader()
        writer.writerows(QUESTIONS)
    saved = os.path.join(directory, "saved")
    datasets.disable_progress_bars()
    datasets.DatasetDict({
        "train": datasets.Dataset.from_list([{"messages": c["messages"]} for c in CHATS[:2]]),
        "test": datasets.Dataset.from_list([{"messages": c["messages"]} for c in CHATS[3:]]),
    }).save_to_disk(saved)
    return {
        "messages_jsonl": {"source": messages},
        "prompt_completion_parquet": {"source": pairs},
        "csv_with_column_map": {"source": questions,
                                "columns": "question=prompt,answer=completion"},
        "datasets_folder": {"source": saved, "split": "train"},
    }
