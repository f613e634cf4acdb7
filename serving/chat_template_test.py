"""The served template (serving/chat_template.py) renders, with contents given as
OpenAI text parts (as vLLM hands them to Gemma 4's template), what Gemma 4's
own template renders with the contents as strings; tested with transformers'
renderer, the one vLLM calls."""

import contextlib
import copy
import json
import os

from absl.testing import absltest

from data import testing as data_testing
from data import tokenizer as tokenizer_lib
from serving import chat_template

IMAGE = {"type": "image"}
SYSTEM = "\nYou write Verilog.\n"  # eval/prompts.py's system prompt is of this form
QUESTION = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Build a wire."}]


def as_parts(messages):
    """Every string content as one text part, as vLLM's OpenAI content format does."""
    out = copy.deepcopy(messages)
    for message in out:
        if isinstance(message.get("content"), str):
            message["content"] = [{"type": "text", "text": message["content"]}]
    return out


class ChatTemplateTest(absltest.TestCase):

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.tokenizer = tokenizer_lib.build_tokenizer()
        cls.gemma = cls.tokenizer.chat_template  # Google's, data/templates/
        cls.served = chat_template.with_prelude(cls.gemma)
        cls.conversations = [(QUESTION, None)] + [
            (row["messages"], row.get("tools")) for row in data_testing.CHATS]

    def render(self, template, messages, tools=None, **kwargs):
        return self.tokenizer.apply_chat_template(
            messages, tools=tools, chat_template=template, tokenize=False, **kwargs)

    def test_text_parts_render_as_the_strings_do(self):
        for messages, tools in self.conversations:
            for prompt in (True, False):
                want = self.render(self.gemma, messages, tools, add_generation_prompt=prompt)
                self.assertEqual(self.render(self.served, as_parts(messages), tools,
                                             add_generation_prompt=prompt), want)
                # Strings pass through: the same text as Gemma 4's template alone.
                self.assertEqual(self.render(self.served, messages, tools,
                                             add_generation_prompt=prompt), want)

    def test_without_the_prelude_the_system_prompt_is_printed_as_a_list(self):
        text = self.render(self.gemma, as_parts(QUESTION), add_generation_prompt=True)
        self.assertIn("[{'type': 'text', 'text': '", text)
        served = self.render(self.served, as_parts(QUESTION), add_generation_prompt=True)
        self.assertNotIn("'type'", served)
        self.assertIn("<|turn>system\nYou write Verilog.<turn|>", served)

    def test_several_text_parts_join_with_newlines(self):
        parts = [{"role": "system", "content": [{"type": "text", "text": "One."},
                                                {"type": "text", "text": "Two."}]},
                 {"role": "user", "content": "Hi"}]
        strings = [{"role": "system", "content": "One.\nTwo."}, {"role": "user", "content": "Hi"}]
        self.assertEqual(self.render(self.served, parts, add_generation_prompt=True),
                         self.render(self.gemma, strings, add_generation_prompt=True))

    def test_a_message_with_an_image_keeps_its_parts(self):
        messages = [{"role": "user", "content": [IMAGE, {"type": "text", "text": "What?"}]}]
        want = self.render(self.gemma, messages, add_generation_prompt=True)
        self.assertIn("<|image|>", want)
        self.assertEqual(self.render(self.served, messages, add_generation_prompt=True), want)
        with_system = [{"role": "system", "content": [{"type": "text", "text": "Be brief."}]},
                       *messages]
        self.assertEqual(
            self.render(self.served, with_system, add_generation_prompt=True),
            self.render(self.gemma, [{"role": "system", "content": "Be brief."}, *messages],
                        add_generation_prompt=True))

    def test_write_reads_the_model_directory(self):
        tmp = self.create_tempdir().full_path
        model = os.path.join(tmp, "model")
        self.tokenizer.save_pretrained(model)
        with contextlib.chdir(tmp):  # a relative run directory
            path, source = chat_template.write(model, "run")
        self.assertEqual(path, os.path.join(tmp, "run", chat_template.FILE_NAME))
        self.assertEqual(source, os.path.join(model, chat_template.FILE_NAME))
        with open(path) as f:
            self.assertEqual(f.read(), self.served)
        # An older layout: the template inside tokenizer_config.json, named templates.
        os.remove(os.path.join(model, chat_template.FILE_NAME))
        config_path = os.path.join(model, "tokenizer_config.json")
        with open(config_path) as f:
            config = json.load(f)
        config["chat_template"] = [{"name": "tool_use", "template": "x"},
                                   {"name": "default", "template": self.gemma}]
        with open(config_path, "w") as f:
            json.dump(config, f)
        path, source = chat_template.write(model, os.path.join(tmp, "run2"))
        self.assertEqual(source, f"{config_path}:chat_template")
        with open(path) as f:
            self.assertEqual(f.read(), self.served)
        # No template at all: nothing written, and why.
        del config["chat_template"]
        with open(config_path, "w") as f:
            json.dump(config, f)
        path, why = chat_template.write(model, os.path.join(tmp, "run3"))
        self.assertIsNone(path)
        self.assertIn("tokenizer_config.json", why)
        self.assertFalse(os.path.exists(os.path.join(tmp, "run3")))

    def test_a_broken_tokenizer_config_is_named(self):
        model = self.create_tempdir().full_path
        with open(os.path.join(model, "tokenizer_config.json"), "w") as f:
            f.write("{not json")
        with self.assertRaisesRegex(chat_template.TemplateError, "tokenizer_config.json"):
            chat_template.model_template(model)


if __name__ == "__main__":
    absltest.main()
