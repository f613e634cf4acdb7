import numpy as np
from absl.testing import absltest

from data import chat
from data import codev
from data import testing
from data import tokenizer as tokenizer_lib

# Written for this test in the style of Gemma 3 and of ChatML: other turn
# markers, other end-of-turn tokens, content trimmed by the template.
GEMMA3_STYLE = (
    "{{ bos_token }}{% for m in messages %}"
    "{% set role = 'model' if m['role'] == 'assistant' else m['role'] %}"
    "<start_of_turn>{{ role }}\n{{ m['content'] | trim }}<end_of_turn>\n{% endfor %}"
    "{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}")
CHATML_STYLE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
NO_SPECIAL_END = (
    "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}")

# Tool calls rendered after the content, as Qwen-style templates do.
TOOLS_AFTER_CONTENT = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] or '' }}"
    "{% for c in m['tool_calls'] or [] %}<tool_call>{{ c['function']['name'] }}</tool_call>"
    "{% endfor %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
# Shows past assistant turns without their content (as some reasoning templates do).
DROPS_HISTORY = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n"
    "{% if m['role'] != 'assistant' or loop.last %}{{ m['content'] }}{% endif %}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")

MULTI_TURN = [
    {"role": "system", "content": "You write Verilog."},
    {"role": "user", "content": "Write an inverter."},
    {"role": "assistant", "content": testing.CODE},
    {"role": "user", "content": "Now a buffer."},
    {"role": "assistant", "content": "module buf1(input a, output y); assign y = a; endmodule"},
]

TOOLS = [{"type": "function", "function": {
    "name": "pinout", "description": "Pin names of a logic part.",
    "parameters": {"type": "object", "properties": {"part": {"type": "string"}},
                   "required": ["part"]}}}]
TOOL_CALL = [
    {"role": "system", "content": "You know logic parts."},
    {"role": "user", "content": "What is pin 1 of an SN74HC04?"},
    {"role": "assistant", "content": None, "tool_calls": [
        {"type": "function", "function": {"name": "pinout", "arguments": {"part": "SN74HC04"}}}]},
    {"role": "tool", "content": "1A, 1Y, 2A, 2Y"},
    {"role": "assistant", "content": "Pin 1 is 1A, an inverter input."},
]


def _tokenizers():
    return {
        "gemma4": (tokenizer_lib.build_tokenizer(), "<turn|>"),
        "gemma3": (tokenizer_lib.build_tokenizer(
            chat_tokens=("<start_of_turn>", "<end_of_turn>"),
            chat_template=GEMMA3_STYLE), "<end_of_turn>"),
        "chatml": (tokenizer_lib.build_tokenizer(
            chat_tokens=("<|im_start|>", "<|im_end|>"), chat_template=CHATML_STYLE), "<|im_end|>"),
    }


class ChatEncoderTest(absltest.TestCase):

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.tokenizers = _tokenizers()

    def test_every_assistant_turn_is_trained_by_default(self):
        for name, (tokenizer, end_of_turn) in self.tokenizers.items():
            with self.subTest(name):
                messages = MULTI_TURN[1:] if name == "gemma3" else MULTI_TURN
                encoded = chat.ChatEncoder(tokenizer).encode(messages)
                expected = [MULTI_TURN[2]["content"].strip(), MULTI_TURN[4]["content"]]
                self.assertEqual(testing.trained_spans(tokenizer, encoded),
                                 [content + end_of_turn for content in expected])
                # The served prompt for the last turn, then the turn as the template ends it.
                prompt = tokenizer.apply_chat_template(
                    messages[:-1], tokenize=False, add_generation_prompt=True)
                whole = tokenizer.apply_chat_template(messages, tokenize=False)
                ending = whole[whole.rindex(MULTI_TURN[4]["content"]):]
                self.assertEqual(tokenizer.decode(encoded.input_ids), prompt + ending)
                if name != "gemma4":  # these templates open a model turn as history shows it
                    self.assertEqual(tokenizer.decode(encoded.input_ids), whole)

    def test_last_turn_only(self):
        for name, (tokenizer, end_of_turn) in self.tokenizers.items():
            with self.subTest(name):
                end_id = tokenizer.convert_tokens_to_ids(end_of_turn)
                every = chat.ChatEncoder(tokenizer).encode(MULTI_TURN[1:])
                last = chat.ChatEncoder(tokenizer, turns="last").encode(MULTI_TURN[1:])
                np.testing.assert_array_equal(every.input_ids, last.input_ids)
                self.assertEqual(testing.trained_spans(tokenizer, last),
                                 [MULTI_TURN[4]["content"] + end_of_turn])
                ends = [i for i, t in enumerate(last.input_ids.tolist()) if t == end_id]
                self.assertLen(ends, 4)  # user, model, user, model
                self.assertEqual([int(last.loss_mask[i]) for i in ends], [0, 0, 0, 1])
                self.assertEqual([int(every.loss_mask[i]) for i in ends], [0, 1, 0, 1])

    def test_tool_calls_are_trained_and_tools_reach_the_template(self):
        tokenizer, _ = self.tokenizers["gemma4"]
        encoded = chat.ChatEncoder(tokenizer).encode(TOOL_CALL, tools=TOOLS)
        text = tokenizer.decode(encoded.input_ids)
        self.assertIn("<|tool>declaration:pinout", text)
        self.assertEqual(testing.trained_spans(tokenizer, encoded), [
            "<|tool_call>call:pinout{part:<|\"|>SN74HC04<|\"|>}<tool_call|><turn|>",
            "Pin 1 is 1A, an inverter input.<turn|>"])
        prompt = tokenizer.apply_chat_template(
            TOOL_CALL[:-1], tools=TOOLS, tokenize=False, add_generation_prompt=True)
        prompt_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
        self.assertEqual(encoded.input_ids[:len(prompt_ids)].tolist(), prompt_ids)
        self.assertEqual(int(encoded.loss_mask[len(prompt_ids)]), 1)

    def test_tool_calls_after_the_content(self):
        tokenizer = tokenizer_lib.build_tokenizer(
            chat_tokens=("<|im_start|>", "<|im_end|>", "<tool_call>", "</tool_call>"),
            chat_template=TOOLS_AFTER_CONTENT)
        messages = [{"role": "user", "content": "Pinout?"},
                    {**TOOL_CALL[2], "content": "Looking it up."}]
        encoded = chat.ChatEncoder(tokenizer).encode(messages)
        self.assertEqual(testing.trained_spans(tokenizer, encoded),
                         ["Looking it up.<tool_call>pinout</tool_call><|im_end|>"])

    def test_template_that_rewrites_history_trains_the_last_turn_only(self):
        tokenizer = tokenizer_lib.build_tokenizer(
            chat_tokens=("<|im_start|>", "<|im_end|>"), chat_template=DROPS_HISTORY)
        with self.assertRaisesRegex(chat.TemplateError, "drops or rewrites"):
            chat.ChatEncoder(tokenizer).encode(MULTI_TURN[1:])
        encoded = chat.ChatEncoder(tokenizer, turns="last").encode(MULTI_TURN[1:])
        self.assertEqual(testing.trained_spans(tokenizer, encoded),
                         [MULTI_TURN[4]["content"] + "<|im_end|>"])

    def test_prompt_tokens_match_the_generation_prompt(self):
        tokenizer, _ = self.tokenizers["gemma4"]
        messages = MULTI_TURN[:3]
        encoded = chat.ChatEncoder(tokenizer).encode(messages)
        prompt = tokenizer.apply_chat_template(
            messages[:2], tokenize=False, add_generation_prompt=True)
        prompt_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
        self.assertEqual(encoded.input_ids[:len(prompt_ids)].tolist(), prompt_ids)
        self.assertFalse(encoded.loss_mask[:len(prompt_ids)].any())
        self.assertTrue(encoded.loss_mask[len(prompt_ids)])

    def test_thinking_policies(self):
        tokenizer, _ = self.tokenizers["gemma4"]
        row = codev.Row(1, "Be terse.", "Write inv.", testing.GOOD_RESPONSE)
        stripped = chat.ChatEncoder(tokenizer).encode(codev.to_messages(row))
        self.assertNotIn("inverter is one assign", tokenizer.decode(stripped.input_ids))
        self.assertNotIn(tokenizer_lib.THINK, tokenizer.decode(stripped.input_ids))

        kept = chat.ChatEncoder(tokenizer, enable_thinking=True).encode(
            codev.to_messages(row, "keep_thinking", "keep"))
        text = tokenizer.decode(kept.input_ids)
        self.assertIn("<|turn>system\n<|think|>Be terse.<turn|>", text)
        trained = testing.trained_spans(tokenizer, kept)
        self.assertLen(trained, 1)
        self.assertTrue(trained[0].startswith("<|channel>thought\nAn inverter is one assign."))

    def test_template_without_special_end_of_turn_is_refused(self):
        tokenizer = tokenizer_lib.build_tokenizer(chat_template=NO_SPECIAL_END)
        with self.assertRaisesRegex(chat.TemplateError, "end-of-turn"):
            chat.ChatEncoder(tokenizer).encode(MULTI_TURN[1:3])

    def test_conversation_without_assistant(self):
        tokenizer, _ = self.tokenizers["gemma4"]
        with self.assertRaisesRegex(chat.TemplateError, "without an assistant"):
            chat.ChatEncoder(tokenizer).encode(MULTI_TURN[:2])
        with self.assertRaisesRegex(chat.TemplateError, "without an assistant"):
            chat.ChatEncoder(tokenizer).encode(MULTI_TURN[:4])


if __name__ == "__main__":
    absltest.main()
