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
                         "row 2: messages is not a list of messages")
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
            self._encode(source=source, format="sharegpt")
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

    def test_column_map(self):
        self.assertEqual(formats.column_map(" q=prompt , a=completion,"),
                         {"q": "prompt", "a": "completion"})
        self.assertEqual(formats.column_map(""), {})


if __name__ == "__main__":
    absltest.main()
