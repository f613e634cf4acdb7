"""The vLLM-facing adapter: v_proj copies of k_proj on K = V layers, nothing else."""

import json
import os

import numpy as np
from absl.testing import absltest

from gemma4 import adapter
from gemma4 import gemma4_map

DIMS = gemma4_map.Dims(
    vocab=64, embed=16, mlp=32, heads=2, head_dim=8, kv_heads=1, global_kv_heads=1,
    global_head_dim=16, k_eq_v_global=True,
    layer_types=(gemma4_map.SLIDING, gemma4_map.GLOBAL), sliding_window=4,
    final_logit_softcap=None, local_rope_theta=1e4, global_rope_theta=1e6,
    global_rope_proportion=0.25)
PREFIX = "base_model.model.model.language_model.layers"


def factors():
    rng = np.random.default_rng(0)
    out = {}
    for layer, projs in ((0, ("q_proj", "k_proj", "v_proj")), (1, ("q_proj", "k_proj"))):
        for proj in projs:
            for which, shape in (("lora_A", (4, 16)), ("lora_B", (8, 4))):
                out[f"{PREFIX}.{layer}.self_attn.{proj}.{which}.weight"] = (
                    rng.standard_normal(shape).astype(np.float32))
    return out


class VllmAdapterTest(absltest.TestCase):

    def test_copies_only_on_k_eq_v_layers(self):
        copies = adapter.kv_shared_copies(factors(), DIMS)
        self.assertEqual(sorted(copies), [f"{PREFIX}.1.self_attn.v_proj.lora_A.weight",
                                          f"{PREFIX}.1.self_attn.v_proj.lora_B.weight"])
        for name, value in copies.items():
            np.testing.assert_array_equal(value, factors()[name.replace("v_proj", "k_proj")])
        no_k_eq_v = gemma4_map.Dims(**{**DIMS.__dict__, "k_eq_v_global": False})
        self.assertEqual(adapter.kv_shared_copies(factors(), no_k_eq_v), {})

    def test_write_for_vllm_keeps_the_peft_adapter_and_adds_v_proj(self):
        src = self.create_tempdir().full_path
        adapter.write(src, factors(), rank=4, alpha=8.0, dropout=0.0,
                      modules=["q_proj", "k_proj"], base_model="b",
                      layer_prefix="model.language_model.")
        out = os.path.join(self.create_tempdir().full_path, "vllm")
        self.assertEqual(adapter.write_for_vllm(src, out, DIMS), out)
        served, config = adapter.read(out)
        self.assertLen(served, len(factors()) + 2)
        self.assertIn("v_proj", config["target_modules"])
        original, _ = adapter.read(src)  # untouched
        self.assertEqual(sorted(original), sorted(factors()))
        # Nothing to add: the adapter is served as it is.
        with open(os.path.join(out, adapter.CONFIG)) as f:
            self.assertEqual(json.load(f)["r"], 4)
        self.assertEqual(adapter.write_for_vllm(out, out + "2", DIMS), out)


if __name__ == "__main__":
    absltest.main()
