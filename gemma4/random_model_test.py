"""The random Gemma 4: the shapes it cuts and narrows, the same bytes on every write,
and a directory transformers loads."""

import hashlib
import json
import os
import tempfile

import numpy as np
from absl.testing import absltest
from ml_collections import config_dict
from safetensors import safe_open

from gemma4 import base_model
from gemma4 import gemma4_map
from gemma4 import random_model


def config_31b():
    return base_model.config_only(random_model.DEFAULT_LIKE)[0]  # the copy shipped


def small_like(directory):
    """31B's text config at a size a CPU test writes in a second, as a config.json."""
    text = dict(config_31b()["text_config"], hidden_size=64, intermediate_size=96,
                num_attention_heads=4, num_key_value_heads=4, num_global_key_value_heads=2,
                head_dim=16, global_head_dim=32, vocab_size=1280, sliding_window=8)
    path = os.path.join(directory, "like.json")
    with open(path, "w") as f:
        json.dump(text, f)
    return path


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


class ShrinkTest(absltest.TestCase):

    def test_cuts_layers_and_divides_widths(self):
        full = gemma4_map.Dims.from_hf_config(config_31b())
        config = random_model.shrink_config(config_31b(), layers=12, width_divisor=2)
        dims = gemma4_map.Dims.from_hf_config(config)
        self.assertEqual((dims.embed, dims.mlp, dims.heads, dims.kv_heads,
                          dims.global_kv_heads), (2688, 10752, 16, 8, 2))
        self.assertEqual(dims.layer_types, full.layer_types[:12])
        self.assertEqual((dims.head_dim, dims.global_head_dim, dims.vocab),
                         (full.head_dim, full.global_head_dim, full.vocab))
        self.assertEqual((config["architectures"], config["num_hidden_layers"]),
                         (["Gemma4ForCausalLM"], 12))
        self.assertNotIn("quantization_config", config)
        self.assertEqual(gemma4_map.Dims.from_hf_config(random_model.shrink_config(config_31b())),
                         full)

    def test_per_layer_config_layout_is_cut_and_narrowed_too(self):
        text = dict(config_31b()["text_config"])
        del text["global_head_dim"], text["num_global_key_value_heads"]
        text["per_layer_config"] = {str(i): {"head_dim": 512, "num_key_value_heads": 4}
                                    for i, kind in enumerate(text["layer_types"])
                                    if kind == gemma4_map.GLOBAL}
        config = random_model.shrink_config(text, layers=12, width_divisor=2)
        self.assertEqual(config["per_layer_config"],
                         {"5": {"head_dim": 512, "num_key_value_heads": 2},
                          "11": {"head_dim": 512, "num_key_value_heads": 2}})
        dims = gemma4_map.Dims.from_hf_config(config)
        self.assertEqual((dims.global_kv_heads, dims.global_head_dim), (2, 512))

    def test_refuses_what_does_not_divide_or_exist(self):
        with self.assertRaisesRegex(random_model.RandomModelError,
                                    "does not divide num_attention_heads, "
                                    "num_global_key_value_heads, num_key_value_heads"):
            random_model.shrink_config(config_31b(), width_divisor=3)
        with self.assertRaisesRegex(random_model.RandomModelError, "the model has 60 layers"):
            random_model.shrink_config(config_31b(), layers=61)


class WriteTest(absltest.TestCase):

    def test_same_bytes_every_write_and_transformers_runs_it(self):
        with tempfile.TemporaryDirectory() as tmp:
            spec = config_dict.ConfigDict({"like": small_like(tmp), "layers": 6,
                                           "width_divisor": 2})
            config = random_model.spec_config(spec)
            first = random_model.write(os.path.join(tmp, "a"), config, seed=3)
            second = random_model.write(os.path.join(tmp, "b"), config, seed=3)
            other_seed = random_model.write(os.path.join(tmp, "c"), config, seed=4)
            weights = [os.path.join(d, random_model.WEIGHTS) for d in (first, second, other_seed)]
            self.assertEqual(sha256(weights[0]), sha256(weights[1]))
            self.assertNotEqual(sha256(weights[0]), sha256(weights[2]))
            self.assertEqual(sorted(n for n in os.listdir(tmp) if ".tmp" in n), [])

            dims = gemma4_map.Dims.from_hf_config(base_model.read_config(first))
            self.assertEqual((dims.embed, dims.heads, dims.global_kv_heads, dims.num_layers),
                             (32, 2, 1, 6))
            with safe_open(weights[0], "np") as f:
                names = set(f.keys())
                self.assertEqual(names, set(gemma4_map.base_names(dims)))
                q = f.get_tensor("model.layers.0.self_attn.q_proj.weight")
                norm = f.get_tensor("model.layers.0.input_layernorm.weight")
                scalar = f.get_tensor("model.layers.5.layer_scalar")
            self.assertEqual(str(q.dtype), "bfloat16")
            self.assertEqual(q.shape, gemma4_map.expected_hf_shape(
                dims, "model.layers.0.self_attn.q_proj.weight"))
            self.assertAlmostEqual(float(q.astype(np.float32).std()), 0.02, delta=0.003)
            self.assertAlmostEqual(float(norm.astype(np.float32).mean()), 1.0, delta=0.05)
            np.testing.assert_array_equal(scalar.astype(np.float32), [1.0])
            # What the TPU stack loads (random_model.tensors) is what the file holds.
            np.testing.assert_array_equal(
                random_model.tensors(dims, seed=3)(
                    "model.layers.0.self_attn.q_proj.weight").astype(q.dtype), q)

            # transformers reads the directory as the CausalLM it names, with the
            # embedded tokenizer's special ids (no torch was needed to write it).
            import torch  # pylint: disable=import-outside-toplevel
            import transformers  # pylint: disable=import-outside-toplevel
            model = transformers.AutoModelForCausalLM.from_pretrained(first,
                                                                      dtype=torch.float32)
            tokenizer = transformers.AutoTokenizer.from_pretrained(first)
            self.assertEqual(type(model).__name__, "Gemma4ForCausalLM")
            self.assertEqual(model.config.pad_token_id, tokenizer.pad_token_id)
            ids = tokenizer("module top(input a, output y);", return_tensors="pt")["input_ids"]
            with torch.no_grad():
                logits = model(ids).logits
            self.assertTrue(bool(torch.isfinite(logits).all()))
            self.assertGreater(float(logits.std()), 0.1)  # a model that prefers tokens

            kept = os.stat(weights[0]).st_mtime_ns
            random_model.write(first, config, seed=3)  # already there: kept, not redrawn
            self.assertEqual(os.stat(weights[0]).st_mtime_ns, kept)


if __name__ == "__main__":
    absltest.main()
