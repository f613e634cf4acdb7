import hashlib
import json
import subprocess
import sys

import transformers
from absl.testing import absltest

from common import binaries
from data import tokenizer as tokenizer_lib

_VOCAB_DIGEST = (
    "import hashlib, json; from data import tokenizer as t; "
    "print(hashlib.sha256(json.dumps(t.build_tokenizer().get_vocab(), sort_keys=True)"
    ".encode()).hexdigest())")


class TokenizerTest(absltest.TestCase):

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.tokenizer = tokenizer_lib.build_tokenizer()

    def test_gemma_special_ids(self):
        t = self.tokenizer
        self.assertEqual((t.pad_token_id, t.eos_token_id, t.bos_token_id, t.unk_token_id),
                         (0, 1, 2, 3))
        for token in tokenizer_lib.SPECIAL_TOKENS:
            self.assertIn(t.convert_tokens_to_ids(token), t.all_special_ids, token)
        self.assertLen(t, tokenizer_lib.DEFAULT_VOCAB_SIZE)

    def test_gemma4_chat_format(self):
        messages = [{"role": "system", "content": "S"}, {"role": "user", "content": "U"},
                    {"role": "assistant", "content": "A"}]
        self.assertEqual(
            self.tokenizer.apply_chat_template(messages, tokenize=False),
            "<bos><|turn>system\nS<turn|>\n<|turn>user\nU<turn|>\n<|turn>model\nA<turn|>\n")
        self.assertEqual(
            self.tokenizer.apply_chat_template(messages[1:2], tokenize=False,
                                               add_generation_prompt=True, enable_thinking=True),
            "<bos><|turn>system\n<|think|><turn|>\n<|turn>user\nU<turn|>\n<|turn>model\n")
        # Thinking off: the model is handed an empty thought block.
        self.assertEqual(
            self.tokenizer.apply_chat_template(messages[1:2], tokenize=False,
                                               add_generation_prompt=True),
            "<bos><|turn>user\nU<turn|>\n<|turn>model\n<|channel>thought\n<channel|>")
        # Control tokens are single tokens, never split into bytes.
        ids = self.tokenizer("<|channel>thought\nx<channel|>", add_special_tokens=False)["input_ids"]
        self.assertEqual(self.tokenizer.convert_ids_to_tokens(ids[:1]), ["<|channel>"])

    def test_same_vocab_in_another_process(self):
        digest = hashlib.sha256(json.dumps(self.tokenizer.get_vocab(), sort_keys=True)
                                .encode()).hexdigest()
        env = binaries.this_interpreter_env()
        other = subprocess.run([sys.executable, "-c", _VOCAB_DIGEST], env=env, check=True,
                               capture_output=True, text=True).stdout.strip()
        self.assertEqual(other, digest)

    def test_save_and_load_round_trip(self):
        directory = self.create_tempdir().full_path
        self.tokenizer.save_pretrained(directory)
        loaded = transformers.AutoTokenizer.from_pretrained(directory)
        text = "module m(input a); endmodule <turn|>"
        self.assertEqual(loaded(text)["input_ids"], self.tokenizer(text)["input_ids"])
        self.assertEqual(loaded.chat_template, tokenizer_lib.CHAT_TEMPLATE)
        # Named as the real tokenizer names its special tokens.
        for name, token in tokenizer_lib.NAMED_TOKENS.items():
            self.assertEqual(getattr(loaded, name), token, name)
        self.assertCountEqual(loaded.all_special_tokens, self.tokenizer.all_special_tokens)
        self.assertEqual(tokenizer_lib.load(directory).get_vocab(), self.tokenizer.get_vocab())

    def test_end_of_turn_ids(self):
        self.assertEqual(tokenizer_lib.end_of_turn_ids(self.tokenizer),
                         sorted([1, self.tokenizer.convert_tokens_to_ids("<turn|>")]))


if __name__ == "__main__":
    absltest.main()
