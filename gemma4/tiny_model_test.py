"""The tiny base has the real checkpoint's layout, and transformers loads it as the real one."""

import json
import os

import torch
import transformers
from absl.testing import absltest

from common import gcs_emulator
from common import storage
from data import tokenizer as tokenizer_lib
from gemma4 import base_model
from gemma4 import tiny_model


class TinyModelTest(absltest.TestCase):

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.tokenizer = tokenizer_lib.build_tokenizer()
        root = absltest.get_default_test_tmpdir()
        cls.multimodal = tiny_model.save_tiny_model(os.path.join(root, "mm"), cls.tokenizer)
        cls.text = tiny_model.save_tiny_model(os.path.join(root, "text"), cls.tokenizer,
                                              multimodal=False)

    def test_multimodal_layout_as_the_real_checkpoint(self):
        config = base_model.read_config(self.multimodal)
        self.assertEqual(config["architectures"], ["Gemma4ForConditionalGeneration"])
        self.assertEqual(config["text_config"]["layer_types"][-1], "full_attention")
        self.assertTrue(config["text_config"]["attention_k_eq_v"])
        files = base_model.safetensors_files(self.multimodal)
        self.assertGreater(len(set(files.values())), 1)  # shards behind an index
        self.assertTrue(os.path.exists(
            os.path.join(self.multimodal, "model.safetensors.index.json")))
        text = [n for n in files if n.startswith("model.language_model.")]
        vision = [n for n in files if n.startswith(("model.vision_tower.", "model.embed_vision."))]
        self.assertTrue(text and vision)
        self.assertEqual(sorted(files), sorted(text + vision))
        # The media placeholders are the tokenizer's, so text can be told from media.
        for kind in ("image", "audio"):
            self.assertEqual(config[f"{kind}_token_id"], self.tokenizer.convert_tokens_to_ids(
                tokenizer_lib.NAMED_TOKENS[f"{kind}_token"]))
        self.assertEqual(config["video_token_id"],
                         self.tokenizer.convert_tokens_to_ids(tokenizer_lib.VIDEO))
        with open(os.path.join(self.multimodal, "generation_config.json")) as f:
            self.assertEqual(json.load(f)["eos_token_id"],
                             tokenizer_lib.end_of_turn_ids(self.tokenizer))
        # The processor vLLM's multimodal class builds: one image fills the
        # vision tower's soft tokens (//tests:vllm_e2e_test serves images).
        with open(os.path.join(self.multimodal, "processor_config.json")) as f:
            processor = json.load(f)
        self.assertEqual(processor["processor_class"], "Gemma4Processor")
        for budget in (processor["image_seq_length"],
                       processor["image_processor"]["max_soft_tokens"]):
            self.assertEqual(budget, config["vision_soft_tokens_per_image"])
        self.assertFalse(os.path.exists(os.path.join(self.text, "processor_config.json")))

    def test_a_base_kept_in_a_bucket_is_copied_once(self):
        os.environ[storage.CACHE_ENV] = self.create_tempdir().full_path
        with gcs_emulator.running("bkt"):
            storage.push(self.text, "gs://bkt/models/tiny", mark_complete=True)
            local = base_model.resolve("gs://bkt/models/tiny", run_dir=None)
            self.assertTrue(local.startswith(os.environ[storage.CACHE_ENV]), local)
            self.assertEqual(base_model.read_config(local), base_model.read_config(self.text))
            self.assertLen(base_model.safetensors_files(local),
                           len(base_model.safetensors_files(self.text)))
            stamp = os.path.getmtime(os.path.join(local, "config.json"))
            self.assertEqual(base_model.resolve("gs://bkt/models/tiny", run_dir=None), local)
            self.assertEqual(os.path.getmtime(os.path.join(local, "config.json")), stamp)

    def test_a_save_over_another_leaves_nothing_of_it(self):
        directory = os.path.join(self.create_tempdir().full_path, "base")
        tiny_model.save_tiny_model(directory, self.tokenizer)  # sharded, with an index
        tiny_model.save_tiny_model(directory, self.tokenizer, multimodal=False)
        self.assertEqual(sorted(n for n in os.listdir(directory) if n.startswith("model")),
                         ["model.safetensors"])
        self.assertFalse(os.path.exists(os.path.join(directory, "processor_config.json")))
        model = transformers.AutoModelForCausalLM.from_pretrained(directory)
        self.assertEqual(type(model).__name__, "Gemma4ForCausalLM")

    def test_ensure_gives_an_older_base_its_processor_config(self):
        path = os.path.join(self.create_tempdir().full_path, "base")
        tiny_model.ensure(path)
        os.remove(os.path.join(path, "processor_config.json"))  # as bases before it
        weights = os.path.getmtime(os.path.join(path, "model.safetensors.index.json"))
        tiny_model.ensure(path)
        with open(os.path.join(path, "processor_config.json")) as f:
            self.assertEqual(json.load(f), tiny_model.processor_config(
                tiny_model.TINY_VISION["default_output_length"]))
        self.assertEqual(os.path.getmtime(os.path.join(path, "model.safetensors.index.json")),
                         weights)  # nothing else rewritten

    def test_transformers_loads_the_real_class(self):
        model = transformers.AutoModelForImageTextToText.from_pretrained(
            self.multimodal, dtype=torch.float32)
        self.assertEqual(type(model).__name__, "Gemma4ForConditionalGeneration")
        # What the GPU stack asks for resolves to the same class.
        causal = transformers.AutoModelForCausalLM.from_pretrained(
            self.multimodal, dtype=torch.float32)
        self.assertEqual(type(causal).__name__, "Gemma4ForConditionalGeneration")
        ids = torch.tensor([self.tokenizer("module m; endmodule")["input_ids"]])
        with torch.no_grad():
            torch.testing.assert_close(model(ids).logits, causal(ids).logits)

    def test_text_only_variant(self):
        config = base_model.read_config(self.text)
        self.assertEqual(config["architectures"], ["Gemma4ForCausalLM"])
        files = base_model.safetensors_files(self.text)
        self.assertEqual(set(os.path.basename(f) for f in files.values()), {"model.safetensors"})
        self.assertTrue(all(n.startswith("model.layers.") or n in ("model.embed_tokens.weight",
                                                                   "model.norm.weight")
                            for n in files), sorted(files)[:5])


if __name__ == "__main__":
    absltest.main()
