import json
import os

from absl.testing import absltest

from data import chat
from data import formats
from data import pipeline
from data import sources
from data import testing
from data import tokenizer as tokenizer_lib


class FormatsTest(absltest.TestCase):

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.tokenizer = tokenizer_lib.build_tokenizer()

    def setUp(self):
        super().setUp()
        self.sets = testing.write_user_data(self.create_tempdir().full_path)

    def _encode(self, **overrides):
        return pipeline.encode(testing.data_config(**overrides), self.tokenizer)

    def test_each_format_and_file_type_is_read_and_detected(self):
        expected = {"messages_jsonl": ("messages", len(testing.CHATS)),
                    "prompt_completion_parquet": ("prompt_completion", len(testing.PAIRS)),
                    "csv_with_column_map": ("prompt_completion", len(testing.QUESTIONS)),
                    "datasets_folder": ("messages", 2)}
        for name, overrides in self.sets.items():
            with self.subTest(name):
                examples, report = self._encode(**overrides)
                self.assertEqual((report.format, report.kept), expected[name])
                self.assertEqual(dict(report.dropped), {})
                self.assertTrue(all(e.loss_mask.any() for e in examples))

    def test_messages_train_every_answer_and_the_tool_call(self):
        examples, _ = self._encode(**self.sets["messages_jsonl"])
        first, code, tool, sql = (testing.trained_spans(self.tokenizer, e) for e in examples)
        self.assertEqual(first, ["One bit, sampled on a clock edge.<turn|>",
                                 "One bit too, while its enable is high.<turn|>"])
        self.assertEqual(code, ["```python\nitems[::-1]\n```<turn|>"])  # no Verilog needed
        self.assertEqual(sql, ["SELECT COUNT(*) FROM t;<turn|>"])
        self.assertLen(tool, 2)
        self.assertTrue(tool[0].startswith("<|tool_call>call:run_sql{"), tool[0])
        self.assertEqual(tool[1], "There are 42 inverters in stock.<turn|>")
        text = self.tokenizer.decode(examples[2].input_ids)
        self.assertIn("<|turn>system\nYou can query the parts database.<|tool>declaration:run_sql",
                      text)  # system prompts kept, tool definitions rendered
        last, _ = self._encode(turns="last", **self.sets["messages_jsonl"])
        self.assertEqual(testing.trained_spans(self.tokenizer, last[0]),
                         ["One bit too, while its enable is high.<turn|>"])

    def test_prompt_completion_trains_the_completion_only(self):
        examples, _ = self._encode(**self.sets["prompt_completion_parquet"])
        self.assertEqual([testing.trained_spans(self.tokenizer, e) for e in examples],
                         [["Exclusive OR (XOR).<turn|>"], ["lambda x: x * x<turn|>"],
                          ["111<turn|>"]])
        self.assertIn("Answer with code only.", self.tokenizer.decode(examples[1].input_ids))
        csv_examples, _ = self._encode(**self.sets["csv_with_column_map"])
        self.assertEqual(testing.trained_spans(self.tokenizer, csv_examples[1]), ["Eight.<turn|>"])

    def test_same_conversation_same_tokens_whatever_the_file(self):
        # The first two chats, from JSONL and from a datasets folder (whose Arrow
        # rows carry every key of the schema, None where a message has none).
        from_jsonl, _ = self._encode(**self.sets["messages_jsonl"])
        from_folder, _ = self._encode(**self.sets["datasets_folder"])
        for a, b in zip(from_jsonl[:2], from_folder):
            self.assertEqual(a.input_ids.tolist(), b.input_ids.tolist())
            self.assertEqual(a.loss_mask.tolist(), b.loss_mask.tolist())
        test_split, report = self._encode(**{**self.sets["datasets_folder"], "split": "test"})
        self.assertEqual(report.kept, 1)
        self.assertEqual(test_split[0].input_ids.tolist(), from_jsonl[3].input_ids.tolist())

    def test_bad_rows_are_counted_by_reason(self):
        source = testing.write_jsonl(self.create_tempdir().full_path, [
            testing.CHATS[1],                                                     # 1 ok
            {"messages": "not a list"},                                           # 2
            {"messages": [{"role": "narrator", "content": "x"}]},                 # 3
            {"messages": [{"role": "user", "content": "only a question"}]},       # 4
            {"messages": [{"role": "user", "content": "q"},
                          {"role": "assistant", "content": "  "}]},               # 5
            {"messages": [{"role": "user", "content": [{"type": "image"}]},
                          {"role": "assistant", "content": "a cat"}]},            # 6
            {"messages": [{"role": "user", "content": "q"},
                          {"role": "assistant", "content": 3}]},                  # 7
            {"other": 1},                                                         # 8
            {"messages": [{"role": "user", "content": "q"},
                          {"role": "assistant", "content": None, "tool_calls": [
                              {"function": {"name": "f", "arguments": "{oops"}}]}]},  # 9
            {"messages": [*testing.CHATS[1]["messages"],
                          {"role": "user", "content": "thanks"}]},                # 10 ok
        ])
        examples, report = self._encode(source=source)
        self.assertEqual(report.kept, 2)
        self.assertEqual(dict(report.dropped_rows), {
            sources.BAD_MESSAGES: [2, 3, 9], sources.NO_ASSISTANT: [4], sources.EMPTY: [5],
            sources.NOT_TEXT: [6], sources.NOT_A_STRING: [7], sources.MISSING_FIELD: [8]})
        self.assertEqual(report.first_detail[sources.BAD_MESSAGES],
                         "row 2: messages: expected a list as JSON text, found text that is "
                         "not JSON (Expecting value: line 1 column 1 (char 0))")
        # Every reason says what was expected and what was found.
        for reason, detail in report.first_detail.items():
            self.assertRegex(detail, r"^row \d+: .*expected .*found ", reason)
        self.assertEqual(report.first_detail[sources.NOT_A_STRING],
                         "row 7: messages[1] (assistant) content: expected text, found the "
                         "number 3")
        # A trailing question after the last answer trains nothing and is left out.
        self.assertEqual(examples[0].input_ids.tolist(), examples[1].input_ids.tolist())

    def test_tool_call_arguments_as_json_text_render_as_objects(self):
        # The OpenAI format sends arguments as JSON text; vLLM parses it before
        # rendering, and so does training.
        chat_row = json.loads(json.dumps(testing.CHATS[2]))
        call = chat_row["messages"][2]["tool_calls"][0]["function"]
        call["arguments"] = json.dumps(call["arguments"])
        directory = self.create_tempdir().full_path
        as_text = testing.write_jsonl(directory, [chat_row], name="text.jsonl")
        as_object = testing.write_jsonl(directory, [testing.CHATS[2]], name="object.jsonl")
        (a,), _ = self._encode(source=as_text)
        (b,), _ = self._encode(source=as_object)
        self.assertEqual(a.input_ids.tolist(), b.input_ids.tolist())

    def test_codev_profile_keeps_its_policies(self):
        source = testing.write_jsonl(self.create_tempdir().full_path, [
            testing.record(), testing.record(response="Just prose.")])
        examples, report = self._encode(source=source)
        self.assertEqual(report.format, "codev")
        self.assertEqual(dict(report.dropped), {sources.NO_CODE: 1})
        self.assertNotIn("Verilog expert", self.tokenizer.decode(examples[0].input_ids))
        kept, _ = self._encode(source=source, system_policy="keep")
        self.assertIn("Verilog expert", self.tokenizer.decode(kept[0].input_ids))
        # The same rows read as prompt/completion: no code filter.
        _, report = self._encode(source=source, columns="response=completion")
        self.assertEqual((report.format, report.kept), ("prompt_completion", 2))

    def test_unknown_columns_and_bad_settings_are_one_clear_error(self):
        source = testing.write_jsonl(self.create_tempdir().full_path,
                                     [{"question": "q", "reply": "a"}])
        with self.assertRaisesRegex(sources.DataError, "cannot tell the data format from the "
                                                       "columns question, reply"):
            self._encode(source=source)
        with self.assertRaisesRegex(sources.DataError, "'question' is not old=new"):
            self._encode(source=source, columns="question")
        with self.assertRaisesRegex(sources.DataError, "data.format must be one of"):
            self._encode(source=source, format="vicuna")
        with self.assertRaisesRegex(sources.DataError, "no split 'validation'"):
            self._encode(**{**self.sets["datasets_folder"], "split": "validation"})
        with self.assertRaisesRegex(chat.TemplateError, "turns must be one of"):
            self._encode(source=source, turns="first")

    def test_a_row_cap_is_reported(self):
        source = testing.write_jsonl(self.create_tempdir().full_path, testing.CHATS * 5)
        _, report = self._encode(source=source, max_rows=6)
        self.assertEqual((report.rows_read, report.not_read), (6, 14))
        _, report = self._encode(source=source)
        self.assertEqual((report.rows_read, report.not_read), (20, 0))

    def test_json_array_file(self):
        path = os.path.join(self.create_tempdir().full_path, "pairs.json")
        with open(path, "w") as f:
            json.dump(testing.PAIRS, f)
        _, report = self._encode(source=path)
        self.assertEqual((report.format, report.kept), ("prompt_completion", 3))

    def test_unknown_file_type(self):
        path = os.path.join(self.create_tempdir().full_path, "rows.txt")
        with open(path, "w") as f:
            f.write("hello\n")
        with self.assertRaisesRegex(sources.DataError, "unknown file type .txt"):
            self._encode(source=path)
        with open(path + ".gz", "w") as f:
            f.write("hello\n")
        with self.assertRaisesRegex(sources.DataError, "unknown file type .txt"):
            self._encode(source=path + ".gz")
        with open(path + ".parquet.gz", "w") as f:
            f.write("hello\n")
        with self.assertRaisesRegex(sources.DataError, "Parquet file compresses its columns"):
            self._encode(source=path + ".parquet.gz")

    def test_files_as_people_have_them_keep_every_row(self):
        shaped = testing.write_shaped_data(self.create_tempdir().full_path)
        formats_of = {"alpaca.json": "alpaca", "alpaca.tsv": "alpaca", "alpaca.json.zst": "alpaca",
                      "joined.jsonl": "alpaca", "openai.jsonl": "messages",
                      "messages_as_text.csv": "messages", "spreadsheet.csv": "prompt_completion",
                      "spreadsheet.csv.gz": "prompt_completion", "bom.json": "messages",
                      "json_looking.jsonl": "prompt_completion", "text.jsonl": "text",
                      "shards": "messages", "hub_layout": "alpaca",
                      "csv_parts": "prompt_completion"}
        for name, (path, rows) in shaped.items():
            if name == "latin1.jsonl":
                continue  # below: it needs data.encoding
            with self.subTest(name):
                examples, report = self._encode(source=path)
                self.assertEqual(report.format, formats_of.get(name, "sharegpt"))
                self.assertEqual((report.rows_read, report.kept, dict(report.dropped)),
                                 (rows, rows, {}))
                self.assertTrue(all(e.loss_mask.any() for e in examples))

    def test_shards_name_the_file_of_every_dropped_row_and_a_bad_first_row_is_one(self):
        folder = self.create_tempdir().full_path
        testing.write_jsonl(folder, [{"foo": 1}, testing.CHATS[1]], name="a.jsonl")
        testing.write_jsonl(folder, [{"messages": "not a list"}], name="b.jsonl")
        examples, report = self._encode(source=folder)
        self.assertEqual((report.format, report.kept), ("messages", 1))
        self.assertEqual(dict(report.dropped_rows), {sources.MISSING_FIELD: [1],
                                                     sources.BAD_MESSAGES: [3]})
        self.assertTrue(report.first_detail[sources.BAD_MESSAGES].startswith(
            "row 3: b.jsonl row 1: "), report.first_detail)
        self.assertIn("a.jsonl row 1: cannot tell the data format",
                      report.first_detail[sources.MISSING_FIELD])

    def test_text_rows_train_every_token_as_trl_does(self):
        path = testing.write_jsonl(self.create_tempdir().full_path,
                                   testing.TEXTS + [{"text": " "}, {"text": 3}])
        examples, report = self._encode(source=path)
        self.assertEqual(report.format, "text")
        self.assertEqual(dict(report.dropped_rows), {sources.EMPTY: [4],
                                                     sources.NOT_A_STRING: [5]})
        bos, eos = self.tokenizer.bos_token_id, self.tokenizer.eos_token_id
        for row, example in zip(testing.TEXTS, examples):
            ids = example.input_ids.tolist()
            # One BOS first (the rendered chat's own <bos> not doubled), EOS last.
            self.assertEqual((ids[0], ids.count(bos), ids[-1]), (bos, 1, eos))
            self.assertEqual(self.tokenizer.decode(ids[1:-1]),
                             row["text"].removeprefix(self.tokenizer.bos_token))
            self.assertEqual(example.loss_mask.tolist(), [0] + [1] * (len(ids) - 1))
        # Text that ends with EOS keeps the one it has.
        ended = testing.write_jsonl(self.create_tempdir().full_path,
                                    [{"text": "Done." + self.tokenizer.eos_token}])
        (example,), _ = self._encode(source=ended)
        self.assertEqual(example.input_ids.tolist().count(eos), 1)

    def test_answers_that_look_like_json_train_as_text(self):
        shaped = testing.write_shaped_data(self.create_tempdir().full_path)
        for name in ("json_looking.jsonl", "spreadsheet.csv"):
            examples, _ = self._encode(source=shaped[name][0])
            self.assertEqual([testing.trained_spans(self.tokenizer, e) for e in examples[:2]],
                             [["[2, 3, 5]<turn|>"], ['{"a": 1}<turn|>']], name)
        examples, _ = self._encode(source=shaped["spreadsheet.csv"][0])
        self.assertEqual(testing.trained_spans(self.tokenizer, examples[2]),
                         ["One\nTwo<turn|>"])  # a quoted cell's line end, CRLF or not

    def _same_tokens(self, rows, equivalent, **overrides):
        """`rows` (any format) encode as the `messages` rows `equivalent` do."""
        directory = self.create_tempdir().full_path
        got, _ = self._encode(source=testing.write_jsonl(directory, rows, "a.jsonl"),
                              **overrides)
        want, _ = self._encode(source=testing.write_jsonl(directory, equivalent, "b.jsonl"))
        self.assertLen(got, len(want))
        for a, b in zip(got, want):
            self.assertEqual(a.input_ids.tolist(), b.input_ids.tolist())
            self.assertEqual(a.loss_mask.tolist(), b.loss_mask.tolist())

    def test_alpaca_is_the_conversation_it_stands_for(self):
        def turn(role, content):
            return {"role": role, "content": content}
        self._same_tokens(testing.ALPACA, [
            {"messages": [turn("user", "Give the output of a NAND gate.\na=1, b=1"),
                          turn("assistant", "0")]},
            {"messages": [turn("user", "Name the flip-flop that toggles on every clock edge."),
                          turn("assistant", "A T flip-flop with T held high.")]},
            {"messages": [turn("system", "You answer briefly."), turn("user", "What toggles?"),
                          turn("assistant", "A T flip-flop."), turn("user", "And in Verilog?"),
                          turn("assistant", "always @(posedge clk) q <= ~q;")]}])

    def test_sharegpt_is_the_conversation_it_stands_for(self):
        # The tool-use row is CHATS[2] in ShareGPT's words (LLaMA-Factory's).
        first = [{"role": {"human": "user", "gpt": "assistant"}[t["from"]], "content": t["value"]}
                 for t in testing.SHAREGPT[0]["conversations"]]
        self._same_tokens(testing.SHAREGPT, [{"messages": first}, testing.CHATS[2]])
        # Other role names with data.roles; unknown ones are a counted skip that says so.
        renamed = [{"conversations": [{"from": "person", "value": t["value"]} if t["from"] ==
                                      "human" else {"from": "bot", "value": t["value"]}
                                      for t in testing.SHAREGPT[0]["conversations"]]}]
        self._same_tokens(renamed, [{"messages": first}], roles="person=user,bot=assistant")
        shouting = [{"conversations": [{**t, "from": t["from"].upper()}
                                       for t in testing.SHAREGPT[0]["conversations"]]}]
        self._same_tokens(shouting, [{"messages": first}])  # HUMAN, GPT
        source = testing.write_jsonl(self.create_tempdir().full_path, renamed)
        _, report = self._encode(source=source)
        self.assertEqual(dict(report.dropped), {sources.BAD_MESSAGES: 1})
        self.assertIn("found the text 'person'", report.first_detail[sources.BAD_MESSAGES])
        self.assertIn("data.roles", report.first_detail[sources.BAD_MESSAGES])
        with self.assertRaisesRegex(sources.DataError, "data.roles: bot=robot: a role is one of"):
            self._encode(source=source, roles="bot=robot")

    def test_openai_weight_zero_turns_are_context(self):
        examples, _ = self._encode(source=testing.write_jsonl(
            self.create_tempdir().full_path, testing.OPENAI))
        self.assertEqual(testing.trained_spans(self.tokenizer, examples[0]), ["Bonjour !<turn|>"])
        self.assertIn("Hello!", self.tokenizer.decode(examples[0].input_ids))
        # A weighted-out last answer: the conversation ends at the last trained one.
        messages = testing.OPENAI[0]["messages"]
        flipped = [{**messages[0]}, {**messages[1], "weight": 1}, {**messages[2]},
                   {**messages[3], "weight": 0}]
        examples, _ = self._encode(source=testing.write_jsonl(
            self.create_tempdir().full_path, [{"messages": flipped}]))
        self.assertEqual(testing.trained_spans(self.tokenizer, examples[0]), ["Hello!<turn|>"])
        self.assertNotIn("Bonjour", self.tokenizer.decode(examples[0].input_ids))
        nothing = [{**m, "weight": 0} if m["role"] == "assistant" else m for m in messages]
        odd = [{**m, "weight": 0.5} if m["role"] == "assistant" else m for m in messages]
        _, report = self._encode(source=testing.write_jsonl(
            self.create_tempdir().full_path, [{"messages": nothing}, {"messages": odd}]))
        self.assertEqual(dict(report.dropped_rows), {sources.NO_ASSISTANT: [1],
                                                     sources.BAD_MESSAGES: [2]})
        self.assertIn("every assistant turn has weight 0", report.first_detail[
            sources.NO_ASSISTANT])
        self.assertIn("weight: expected 0 or 1, found the number 0.5",
                      report.first_detail[sources.BAD_MESSAGES])

    def test_other_encodings_are_named_or_one_clear_error(self):
        shaped = testing.write_shaped_data(self.create_tempdir().full_path)
        path = shaped["latin1.jsonl"][0]
        with self.assertRaisesRegex(sources.DataError,
                                    rf"{path}: row 1 is not utf-8 text .*data.encoding"):
            self._encode(source=path)
        examples, report = self._encode(source=path, encoding="latin-1")
        self.assertEqual(report.kept, 1)
        self.assertIn("Café means?", self.tokenizer.decode(examples[0].input_ids))
        with self.assertRaisesRegex(sources.DataError, "not an encoding Python knows"):
            self._encode(source=path, encoding="klingon")
        # A bad byte further down is found on its own row.
        lines = os.path.join(self.create_tempdir().full_path, "late.jsonl")
        with open(lines, "wb") as f:
            f.write(json.dumps(testing.PAIRS[0]).encode() + b"\n\n" +
                    json.dumps(testing.PAIRS[2]).encode()[:-2] + b"\xff\"}\n")
        with self.assertRaisesRegex(sources.DataError, r"row 2 \(line 3\) is not utf-8 text"):
            self._encode(source=lines)
        csv_path = os.path.join(self.create_tempdir().full_path, "late.csv")
        with open(csv_path, "wb") as f:
            f.write(b"prompt,completion\r\nq,a\r\nq2,caf\xe9\r\n")
        with self.assertRaisesRegex(sources.DataError, r"row 2 is not utf-8 text"):
            self._encode(source=csv_path)
        _, report = self._encode(source=csv_path, encoding="cp1252")
        self.assertEqual(report.kept, 2)
        # UTF-16 (a spreadsheet's "Unicode text"), named.
        wide = os.path.join(self.create_tempdir().full_path, "wide.tsv")
        with open(wide, "w", encoding="utf-16", newline="") as f:
            f.write("prompt\tcompletion\r\nCaf\u00e9?\tCoffee.\r\n")
        examples, report = self._encode(source=wide, encoding="utf-16")
        self.assertEqual(report.kept, 1)
        self.assertIn("Café?", self.tokenizer.decode(examples[0].input_ids))

    def test_column_map(self):
        self.assertEqual(formats.column_map(" q=prompt , a=completion,"),
                         {"q": "prompt", "a": "completion"})
        self.assertEqual(formats.column_map(""), {})


if __name__ == "__main__":
    absltest.main()
