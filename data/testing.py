"""Shared test helpers for the data package: rows and files written on the fly."""

import csv
import io
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
# Alpaca (instruction, optional input, output; optional system and history).
ALPACA = [
    {"instruction": "Give the output of a NAND gate.", "input": "a=1, b=1", "output": "0"},
    {"instruction": "Name the flip-flop that toggles on every clock edge.", "input": "",
     "output": "A T flip-flop with T held high."},
    {"instruction": "And in Verilog?", "input": "", "output": "always @(posedge clk) q <= ~q;",
     "system": "You answer briefly.",
     "history": [["What toggles?", "A T flip-flop."]]},
]
# ShareGPT (conversations of from/value turns; a system column; tool use as
# LLaMA-Factory writes it, with its tools as JSON text).
SHAREGPT = [
    {"conversations": [{"from": "human", "value": "What is a mux?"},
                       {"from": "gpt", "value": "A selector of one input among several."},
                       {"from": "human", "value": "How many select bits for 4 inputs?"},
                       {"from": "gpt", "value": "Two."}]},
    {"system": "You can query the parts database.", "tools": json.dumps(TOOLS),
     "conversations": [
         {"from": "human", "value": "How many inverters are in stock?"},
         {"from": "function_call", "value": json.dumps(
             {"name": "run_sql",
              "arguments": {"query": "SELECT COUNT(*) FROM parts WHERE kind = 'inverter'"}})},
         {"from": "observation", "value": "42"},
         {"from": "gpt", "value": "There are 42 inverters in stock."}]},
]
# OpenAI's fine-tuning chat format: an assistant turn of weight 0 is not trained.
OPENAI = [
    {"messages": [{"role": "user", "content": "Say hi."},
                  {"role": "assistant", "content": "Hello!", "weight": 0},
                  {"role": "user", "content": "Now in French."},
                  {"role": "assistant", "content": "Bonjour !", "weight": 1}]},
]
# Answers that look like JSON are text (a structured-output data set).
JSON_LOOKING = [
    {"prompt": "List the first three primes as JSON.", "completion": "[2, 3, 5]"},
    {"prompt": "An object with a = 1, as JSON.", "completion": '{"a": 1}'},
]
# TRL's language-modelling rows: text already formatted, trained whole; one
# rendered by Gemma 4's chat template (its <bos> not doubled).
TEXTS = [
    {"text": "A flip-flop stores one bit, sampled on a clock edge."},
    {"text": "<bos><|turn>user\nWhat is 7 in binary?<turn|>\n<|turn>model\n111<turn|>\n"},
    {"text": "module inv(input a, output y);\n  assign y = ~a;\nendmodule\n"},
]
QUESTIONS = [  # CSV columns named otherwise, read with data.columns
    {"question": "What does CMOS stand for?",
     "answer": "Complementary metal-oxide-semiconductor."},
    {"question": "How many bits are in a byte?", "answer": "Eight."},
]


def write_many_rows(directory, count=12_000, shards=3):
    """A user's data set larger than the reference recipe's 10,000-row cap:
    `count` short prompt/completion rows in `shards` JSON Lines files
    (`train-00000-of-00003.jsonl`, ...) in `directory`."""
    rows = [{"prompt": f"What is {i} in binary?", "completion": format(i, "b")}
            for i in range(count)]
    for shard in range(shards):
        write_jsonl(directory, rows[shard::shards], name=f"train-{shard:05d}-of-{shards:05d}.jsonl")
    return directory


def check_read_whole(test, sft, count=12_000):
    """Both trainers' check that a user's data set past the reference's cap is read
    whole under the 31B configs' `data.max_rows`: `count` rows in shards in a bucket
    (the GCS emulator running as gs://bkt), one step of `sft(workdir, *flags)` ->
    (exit code, output); its first lines and run.json say every row was read."""
    from common import storage  # pylint: disable=import-outside-toplevel
    storage.push(write_many_rows(test.create_tempdir().full_path, count), "gs://bkt/many")
    os.environ[storage.CACHE_ENV] = test.create_tempdir().full_path  # the run's copy
    workdir = test.create_tempdir().full_path
    code, output = sft(workdir, "--config.data.source=gs://bkt/many",
                       f"--config.data.max_rows={pipeline.REFERENCE_CAP}",
                       "--config.data.epochs=1", "--config.max_steps=1")
    test.assertEqual(code, 0, output[-3000:])
    test.assertIn("data: 3 files read; every row of the source read, none capped", output)
    with open(os.path.join(workdir, "run.json")) as f:
        data = json.load(f)["data"]
    test.assertEqual({k: data[k] for k in ("rows_read", "max_rows", "rows_capped", "kept",
                                           "dropped", "truncated")},
                     {"rows_read": count, "max_rows": 0, "rows_capped": 0, "kept": count,
                      "dropped": {}, "truncated": 0})


def write_user_data(directory):
    """Writes the data sets above; returns {name: data-config overrides} for each."""
    import datasets  # pylint: disable=import-outside-toplevel
    import pyarrow as pa  # pylint: disable=import-outside-toplevel
    import pyarrow.parquet as pq  # pylint: disable=import-outside-toplevel
    messages = write_jsonl(directory, CHATS, name="chats.jsonl")
    pairs = os.path.join(directory, "pairs.parquet")
    # A Parquet column has one type: every row's prompt and completion as message
    # lists (a string prompt is the user turn, a string completion the answer).
    pq.write_table(pa.Table.from_pylist([
        {"prompt": row["prompt"] if isinstance(row["prompt"], list)
         else [{"role": "user", "content": row["prompt"]}],
         "completion": row["completion"] if isinstance(row["completion"], list)
         else [{"role": "assistant", "content": row["completion"]}]} for row in PAIRS]), pairs)
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


def write_shaped_data(directory):
    """Files shaped as people have them; returns {name: (path, rows in it)}.

    Each is read with `data.source` alone (and `data.encoding` for the Latin-1
    one) and keeps every row."""
    import bz2  # pylint: disable=import-outside-toplevel
    import gzip  # pylint: disable=import-outside-toplevel
    import lzma  # pylint: disable=import-outside-toplevel
    import pyarrow as pa  # pylint: disable=import-outside-toplevel
    out = {}

    def put(name, text, rows=None, encoding="utf-8", compress=None):
        """Writes the file `name`; a data set of `rows` rows when they are given."""
        data = text.encode(encoding)
        path = os.path.join(directory, name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(compress(data) if compress else data)
        if rows is not None:
            out[name] = (path, rows)

    def table(rows):
        text = io.StringIO()
        writer = csv.DictWriter(text, fieldnames=["prompt", "completion"])
        writer.writeheader()
        writer.writerows(rows)
        return text.getvalue()

    def lines(rows):
        return "".join(json.dumps(r) + "\n" for r in rows)

    put("alpaca.json", json.dumps(ALPACA, indent=1), len(ALPACA))
    put("sharegpt.jsonl", lines(SHAREGPT), len(SHAREGPT))
    put("openai.jsonl", lines(OPENAI), len(OPENAI))
    put("json_looking.jsonl", lines(JSON_LOOKING), len(JSON_LOOKING))
    # A spreadsheet's CSV: a byte-order mark, CRLF line ends, a cell with a line end.
    spreadsheet = table(JSON_LOOKING + [{"prompt": "Two lines?", "completion": "One\nTwo"}])
    for suffix, compress in (("", None), (".gz", gzip.compress)):
        put("spreadsheet.csv" + suffix, "\ufeff" + spreadsheet,
            len(JSON_LOOKING) + 1, compress=compress)
    put("alpaca.tsv", "instruction\tinput\toutput\r\n" + "".join(
        f"{r['instruction']}\t{r['input']}\t{r['output']}\r\n" for r in ALPACA[:2]), 2)
    # A `messages` column as JSON text in a CSV cell is still read as messages.
    cells = io.StringIO()
    writer = csv.DictWriter(cells, fieldnames=["messages"])
    writer.writeheader()
    writer.writerows([{"messages": json.dumps(c["messages"])} for c in CHATS[:2]])
    put("messages_as_text.csv", cells.getvalue(), 2)
    for suffix, compress in ((".gz", gzip.compress), (".bz2", bz2.compress),
                             (".xz", lzma.compress)):
        put("sharegpt.jsonl" + suffix, lines(SHAREGPT), len(SHAREGPT), compress=compress)
    put("alpaca.json.zst", json.dumps(ALPACA), len(ALPACA),
        compress=lambda data: pa.compress(data, codec="zstd", asbytes=True))
    put("crlf.jsonl", lines(SHAREGPT).replace("\n", "\r\n"), len(SHAREGPT))
    put("bom.json", "\ufeff" + json.dumps(OPENAI), len(OPENAI))
    # Two files joined with cat, the second with its own byte-order mark.
    put("joined.jsonl", lines(ALPACA[:1]) + "\ufeff" + lines(ALPACA[1:]), len(ALPACA))
    put("latin1.jsonl", json.dumps({"prompt": "Caf\u00e9 means?", "completion": "Coffee."},
                                   ensure_ascii=False) + "\n", 1, encoding="latin-1")
    put("text.jsonl", lines(TEXTS), len(TEXTS))
    # Shards as a download or a bucket export leaves them, read as a folder or a glob.
    for i, chats in enumerate((CHATS[:2], CHATS[2:3], CHATS[3:])):
        put(f"shards/train-{i:05d}-of-00003.jsonl", lines(chats))
    put("shards/README.md", "# My chats\n")
    out["shards"] = (os.path.join(directory, "shards"), len(CHATS))
    # The Hub's layout (huggingface-cli download): data/{split}-NNNNN-of-NNNNN.parquet.
    import pyarrow.parquet as pq  # pylint: disable=import-outside-toplevel
    hub = os.path.join(directory, "hub")
    for name in ("README.md", ".gitattributes"):
        put(os.path.join("hub", name), "---\nlicense: mit\n---\n")
    for name, rows in (("train-00000-of-00002", ALPACA[:2]), ("train-00001-of-00002", ALPACA[2:]),
                       ("test-00000-of-00001", ALPACA[:1])):
        os.makedirs(os.path.join(hub, "data"), exist_ok=True)
        pq.write_table(pa.Table.from_pylist(rows), os.path.join(hub, "data", f"{name}.parquet"))
    out["hub_layout"] = (hub, len(ALPACA))
    for i, row in enumerate(SHAREGPT):
        put(f"globbed/part-{i}.jsonl.gz", lines([row]), compress=gzip.compress)
    out["globbed"] = (os.path.join(directory, "globbed", "part-*.jsonl.gz"), len(SHAREGPT))
    for i, rows in enumerate((JSON_LOOKING[:1], JSON_LOOKING[1:])):
        put(f"csv_parts/part-{i}.csv", table(rows))
    out["csv_parts"] = (os.path.join(directory, "csv_parts"), len(JSON_LOOKING))
    return out
