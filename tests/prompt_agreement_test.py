"""The prompt a server renders for a row is a prefix of that row's training sequence.

Eval and serving send chat messages; vLLM renders them with the model's template
and `add_generation_prompt`, with the template arguments `eval/sampling.py`
sends (thinking off or on), then tokenizes the text without adding specials.
Training must have put exactly those tokens before the trained span, or the
fine-tuned model is asked to continue a prompt it never saw. With Google's
Gemma 4 template the two differ unless training renders the prompt the same
way: a past model turn has no thought block, a generation prompt with thinking
off opens and closes an empty one.
"""

from absl.testing import absltest

from data import codev
from data import formats
from data import pipeline
from data import testing
from data import tokenizer as tokenizer_lib
from eval import sampling

# (response policy, thinking): each training policy with the eval setting that matches it.
CASES = (("strip_thinking", False), ("keep_thinking", True))


class PromptAgreementTest(absltest.TestCase):

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.tokenizer = tokenizer_lib.build_tokenizer()
        cls.rows = [r for r in codev.read_rows("sample") if isinstance(r, codev.Row)]

    def served_prompt(self, messages, thinking):
        """The token ids vLLM's chat endpoint makes of `messages`, as eval sends them."""
        settings = sampling.Settings(model="m", enable_thinking=thinking)
        text = self.tokenizer.apply_chat_template(
            messages, tokenize=False, add_generation_prompt=True,
            **sampling.template_kwargs(settings))
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    def test_every_sample_row_both_thinking_modes(self):
        self.assertGreater(len(self.rows), 10)
        for policy, thinking in CASES:
            for system_policy in codev.SYSTEM_POLICIES:
                config = pipeline.default_config()
                config.response_policy, config.system_policy = policy, system_policy
                encoder = pipeline.encoder_for(self.tokenizer, config)
                for row in self.rows:
                    with self.subTest(policy=policy, system=system_policy, row=row.number):
                        messages = codev.to_messages(row, policy, system_policy)
                        prompt = self.served_prompt(messages[:-1], thinking)
                        encoded = encoder.encode(messages)
                        head = encoded.input_ids[:len(prompt)].tolist()
                        if head != prompt:
                            self.fail("training sequence does not start with the served prompt:\n"
                                      f"  served:  {self.tokenizer.decode(prompt)!r}\n"
                                      f"  trained: {self.tokenizer.decode(head)!r}")
                        self.assertFalse(encoded.loss_mask[:len(prompt)].any())
                        self.assertEqual(int(encoded.loss_mask[len(prompt)]), 1)

    def test_multi_turn_rows_with_system_prompts_and_a_tool_call(self):
        # Every assistant turn of a user's conversation, asked for on its own, is
        # served the prompt that training put before that turn's trained span
        # (the last turn after the generation prompt, earlier ones as history).
        config = pipeline.default_config()
        encoder = pipeline.encoder_for(self.tokenizer, config)
        for number, row in enumerate(testing.CHATS):
            conversation = formats.Converter(config, row)(row)
            messages, tools = conversation.messages, conversation.tools
            answers = [i for i, m in enumerate(messages) if m["role"] == "assistant"]
            if number == 2:  # the row this test needs a tool call in
                self.assertTrue(messages[2].get("tool_calls"))
            for turn in answers:
                with self.subTest(row=number, turn=turn):
                    prompt = self.tokenizer(self.tokenizer.apply_chat_template(
                        messages[:turn], tools=tools, tokenize=False, add_generation_prompt=True),
                        add_special_tokens=False)["input_ids"]
                    encoded = encoder.encode(messages[:turn + 1], tools)
                    self.assertEqual(encoded.input_ids[:len(prompt)].tolist(), prompt)
                    self.assertEqual(int(encoded.loss_mask[len(prompt)]), 1)
                    # Earlier answers are trained, the rest of the prompt is not.
                    trained_before = int(encoded.loss_mask[:len(prompt)].astype(bool).sum())
                    self.assertEqual(trained_before > 0, turn != answers[0])

    def test_the_template_is_googles(self):
        # The behaviour this test exists for: an empty thought block when thinking is off.
        text = self.tokenizer.apply_chat_template(
            [{"role": "user", "content": "u"}], tokenize=False, add_generation_prompt=True)
        self.assertTrue(text.endswith("<|turn>model\n<|channel>thought\n<channel|>"), text)


if __name__ == "__main__":
    absltest.main()
