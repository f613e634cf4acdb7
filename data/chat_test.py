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

MULTI_TURN = [
    {"role": "system", "content": "You write Verilog."},
    {"role": "user", "content": "Write an inverter."},
    {"role": "assistant", "content": testing.CODE},
    {"role": "user", "content": "Now a buffer."},
    {"role": "assistant", "content": "module buf1(input a, output y); assign y = a; endmodule"},
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

    def _trained_spans(self, tokenizer, encoded):
        """Decoded runs of consecutive trained tokens."""
        spans, current = [], []
        for token, trained in zip(encoded.input_ids.tolist(), encoded.loss_mask.tolist()):
            if trained:
                current.append(token)
            elif current:
                spans.append(tokenizer.decode(current))
                current = []
        if current:
            spans.append(tokenizer.decode(current))
        return spans

    def test_last_assistant_turn_is_trained_after_the_generation_prompt(self):
        for name, (tokenizer, end_of_turn) in self.tokenizers.items():
            with self.subTest(name):
                messages = MULTI_TURN[1:] if name == "gemma3" else MULTI_TURN
                encoded = chat.ChatEncoder(tokenizer).encode(messages)
                self.assertEqual(self._trained_spans(tokenizer, encoded),
                                 [MULTI_TURN[4]["content"] + end_of_turn])
                # The generation prompt for the history, then the turn as the template ends it.
                prompt = tokenizer.apply_chat_template(
                    messages[:-1], tokenize=False, add_generation_prompt=True)
                whole = tokenizer.apply_chat_template(messages, tokenize=False)
                ending = whole[whole.rindex(MULTI_TURN[4]["content"]):]
                self.assertEqual(tokenizer.decode(encoded.input_ids), prompt + ending)
                if name != "gemma4":  # these templates open a model turn as history shows it
                    self.assertEqual(tokenizer.decode(encoded.input_ids), whole)

    def test_earlier_assistant_turns_are_context(self):
        for name, (tokenizer, end_of_turn) in self.tokenizers.items():
            with self.subTest(name):
                end_id = tokenizer.convert_tokens_to_ids(end_of_turn)
                encoded = chat.ChatEncoder(tokenizer).encode(MULTI_TURN[1:])
                ids = encoded.input_ids.tolist()
                ends = [i for i, t in enumerate(ids) if t == end_id]
                self.assertLen(ends, 4)  # user, model, user, model
                self.assertEqual([int(encoded.loss_mask[i]) for i in ends], [0, 0, 0, 1])

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
        trained = self._trained_spans(tokenizer, kept)
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
