"""Gemma 4's dims from config.json, in the layout of transformers up to 5.15 and in
the per_layer_config layout that 5.16 and later write."""

import copy
import re

from absl.testing import absltest

from gemma4 import base_model
from gemma4 import gemma4_map

HUB_31B = "google/gemma-4-31B-it"


def per_layer_layout(config):
    """`config` as transformers >= 5.16 saves it: the global layers' head_dim and
    KV heads moved into per_layer_config, keyed by layer index (strings, as JSON
    writes them)."""
    config = copy.deepcopy(config)
    text = config.get("text_config", config)
    overrides = {"head_dim": text.pop("global_head_dim")}
    heads = text.pop("num_global_key_value_heads", None)
    if heads is not None:
        overrides["num_key_value_heads"] = heads
    text["per_layer_config"] = {str(i): dict(overrides) for i, kind in
                                enumerate(text["layer_types"]) if kind == gemma4_map.GLOBAL}
    return config


class DimsTest(absltest.TestCase):

    def setUp(self):
        super().setUp()
        self.config = base_model.config_only(HUB_31B)[0]

    def test_the_31b_config_as_published(self):
        dims = gemma4_map.Dims.from_hf_config(self.config)
        self.assertEqual((dims.num_layers, dims.embed, dims.heads), (60, 5376, 32))
        self.assertEqual((dims.head_dim, dims.kv_heads), (256, 16))
        self.assertEqual((dims.global_head_dim, dims.global_kv_heads, dims.k_eq_v_global),
                         (512, 4, True))
        self.assertEqual(dims.attention(5), gemma4_map.LayerAttention(4, 512, True))
        self.assertEqual(dims.attention(0), gemma4_map.LayerAttention(16, 256, False))

    def test_the_same_config_in_the_per_layer_layout(self):
        newer = per_layer_layout(self.config)
        self.assertNotIn("global_head_dim", newer["text_config"])
        self.assertLen(newer["text_config"]["per_layer_config"], 10)
        self.assertEqual(gemma4_map.Dims.from_hf_config(newer),
                         gemma4_map.Dims.from_hf_config(self.config))
        # A text-only config, and integer keys (as the config object holds them).
        text = newer["text_config"]
        text["per_layer_config"] = {int(k): v for k, v in text["per_layer_config"].items()}
        self.assertEqual(gemma4_map.Dims.from_hf_config(text),
                         gemma4_map.Dims.from_hf_config(self.config))

    def test_per_layer_configs_this_stack_cannot_run_are_refused(self):
        text = per_layer_layout(self.config)["text_config"]
        cases = {
            "different global layers": ("5", {"head_dim": 256, "num_key_value_heads": 4},
                                        "different shapes"),
            "a sliding layer": ("0", {"head_dim": 128}, "overrides sliding layers [0]"),
            "another field": ("5", {"head_dim": 512, "num_key_value_heads": 4,
                                    "sliding_window": 8}, "sets ['sliding_window']"),
        }
        for name, (layer, overrides, message) in cases.items():
            with self.subTest(name):
                broken = copy.deepcopy(text)
                broken["per_layer_config"][layer] = overrides
                with self.assertRaisesRegex(gemma4_map.MappingError, re.escape(message)):
                    gemma4_map.Dims.from_hf_config(broken)


if __name__ == "__main__":
    absltest.main()
