import numpy as np
from absl.testing import absltest
from absl.testing import parameterized
from ml_collections import config_dict

from gemma4 import lora_map
from training.common import hparams
from training.tpu import testing as tpu_testing

CONFIGS = {
    "k_eq_v_global": {},
    "separate_kv_global": dict(attention_k_eq_v=False, num_key_value_heads=2),
    "other_head_dims": dict(head_dim=32, global_head_dim=96, num_key_value_heads=2,
                            num_global_key_value_heads=1, hidden_size=72),
}


def lora_config(rank=4):
    return config_dict.ConfigDict({"rank": rank, "alpha": 8.0, "dropout": 0.0,
                                   "target_modules": hparams.LORA_TARGET_MODULES})


class LoraMapTest(parameterized.TestCase):

    @parameterized.named_parameters(*CONFIGS.items())
    def test_round_trip_is_exact_and_peft_shapes_are_hf(self, overrides):
        _, dims = tpu_testing.tiny_checkpoint(self.create_tempdir().full_path, **overrides)
        qwix = tpu_testing.random_factors(dims, lora_config())
        peft = lora_map.qwix_to_peft(dims, qwix)
        for name, value in peft.items():
            layer = int(name.split(".layers.")[1].split(".")[0])
            head_dim = dims.attention(layer).head_dim
            if name.endswith("lora_A.weight"):
                self.assertEqual(value.shape[0], 4, name)
            if ".q_proj.lora_B" in name:
                self.assertEqual(value.shape, (dims.heads * head_dim, 4))
            if ".o_proj.lora_A" in name:
                self.assertEqual(value.shape, (4, dims.heads * head_dim))
            if ".down_proj.lora_B" in name:
                self.assertEqual(value.shape, (dims.embed, 4))
        back = lora_map.peft_to_qwix(dims, peft)
        self.assertEqual(sorted(back), sorted(qwix))
        for name in qwix:
            np.testing.assert_array_equal(back[name], qwix[name], err_msg=name)
        global_layer = dims.layer_types.index("full_attention")
        has_v = any(f"layers.{global_layer}.self_attn.v_proj" in n for n in peft)
        self.assertEqual(has_v, not dims.k_eq_v_global)

    def test_fused_kv_needs_one_a(self):
        _, dims = tpu_testing.tiny_checkpoint(self.create_tempdir().full_path)
        peft = lora_map.qwix_to_peft(dims, tpu_testing.random_factors(dims, lora_config()))
        name = next(n for n in peft if ".layers.0.self_attn.v_proj.lora_A" in n)
        peft[name] = peft[name] + 1.0
        with self.assertRaisesRegex(lora_map.LoraMapError, "layer 0: k_proj and v_proj have "
                                    "different lora_A"):
            lora_map.peft_to_qwix(dims, peft)
        del peft[name]
        with self.assertRaisesRegex(lora_map.LoraMapError, "needs both lora_A and lora_B"):
            lora_map.peft_to_qwix(dims, peft)

    def test_multimodal_prefix(self):
        _, dims = tpu_testing.tiny_checkpoint(self.create_tempdir().full_path)
        peft = lora_map.qwix_to_peft(dims, tpu_testing.random_factors(dims, lora_config()),
                                     "model.language_model.")
        self.assertTrue(all(n.startswith("base_model.model.model.language_model.layers.")
                            for n in peft))
        self.assertEqual(lora_map.peft_layer_prefix(peft), "model.language_model.")

    def test_empty_checkpoint(self):
        with self.assertRaisesRegex(lora_map.LoraMapError, "no LoRA factor"):
            lora_map.qwix_to_peft(None, {})


if __name__ == "__main__":
    absltest.main()
