import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import qwix
import torch
import transformers
from absl.testing import absltest
from absl.testing import parameterized
from flax import nnx

from training.tpu import testing  # sets up 8 CPU devices first
# pylint: disable=wrong-import-order
from gemma4 import base_model
from gemma4 import gemma4_map
from training.tpu import forward
from training.tpu import model as model_lib

# Every size distinct where the architecture allows, so a swapped axis fails. The
# checkpoints are multimodal (vision tensors skipped) unless `multimodal=False`.
CONFIGS = {
    "k_eq_v_global": {},
    "text_only": dict(multimodal=False),
    "separate_kv_global": dict(attention_k_eq_v=False, num_global_key_value_heads=2,
                               num_key_value_heads=4, num_attention_heads=8),
    "other_head_dims": dict(head_dim=32, global_head_dim=96, num_key_value_heads=2,
                            num_global_key_value_heads=1, hidden_size=72),
}


class LoadTest(parameterized.TestCase):

    @parameterized.named_parameters(*CONFIGS.items())
    def test_tunix_logits_match_transformers(self, overrides):
        path, dims = testing.tiny_checkpoint(self.create_tempdir().full_path, **overrides)
        mesh = testing.mesh(1, 1)
        model = model_lib.load_base(path, dims, mesh, "float32")
        hf = transformers.AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
        # Longer than the sliding window (16), two segments packed in row 0; no media
        # placeholder, which the multimodal class replaces by padding.
        text_ids = np.setdiff1d(np.arange(10, 1000),
                                base_model.media_token_ids(base_model.read_config(path)))
        ids = np.random.default_rng(0).choice(text_ids, size=(2, 40))
        with torch.no_grad():
            want = hf(torch.tensor(ids)).logits.numpy()
        segments = np.ones((2, 40), np.int32)
        positions = np.tile(np.arange(40), (2, 1))
        got = forward.packed_logits(model, jnp.asarray(ids), jnp.asarray(positions),
                                    jnp.asarray(segments))
        self.assertLess(float(np.abs(np.asarray(got) - want).max()), 1e-4)

    def test_abstract_model_declares_what_load_makes(self):
        # The ahead-of-time compile (aot.py) lowers `sft`'s step from the abstract
        # model: its parameters must have the loaded model's shapes and dtypes, LoRA's
        # factors float32 on a bf16 base (Qwix would give them the base's dtype).
        path, dims = testing.tiny_checkpoint(self.create_tempdir().full_path)
        lora = testing.cpu_config().lora

        def declared(model):
            return {path: (tuple(v.get_value().shape), str(v.get_value().dtype))
                    for path, v in nnx.to_flat_state(nnx.state(model, nnx.Param))}

        for scan in (False, True):
            loaded = declared(model_lib.load(path, dims, testing.mesh(1, 1), "bfloat16", lora,
                                             0, scan))
            self.assertEqual(declared(model_lib.abstract_model(dims, "bfloat16", lora, scan)),
                             loaded)
            factor = {p: str(p[-1]).endswith(("_lora_a", "_lora_b")) for p in loaded}
            self.assertEqual({d for p, (_, d) in loaded.items() if factor[p]}, {"float32"})
            self.assertEqual({d for p, (_, d) in loaded.items() if not factor[p]}, {"bfloat16"})

    def test_lora_projections_return_their_base_outputs_dtype(self):
        # PEFT's LoRA layers (the GPU stack) return the base output's dtype; Qwix's
        # return the base output plus LoRA's term, float32 like the factors.
        class Linear(nnx.Module):
            def __init__(self):
                self.proj = nnx.Linear(8, 6, use_bias=False, dtype=jnp.bfloat16,
                                       param_dtype=jnp.bfloat16, rngs=nnx.Rngs(0))

            def __call__(self, x):
                return self.proj(x)

        class Einsum(nnx.Module):
            def __init__(self):
                self.w = nnx.Param(jax.random.normal(jax.random.key(1), (8, 2, 4), jnp.bfloat16))

            def __call__(self, x):
                return jnp.einsum("btd,dnh->btnh", x, self.w.get_value())

        x = jnp.asarray(np.random.default_rng(0).standard_normal((2, 3, 8)), jnp.bfloat16)
        for module in (Linear, Einsum):
            outputs = {}
            for provider in (model_lib._LoraProvider, qwix.LoraProvider):
                model = qwix.apply_lora_to_model(
                    module(), provider(module_path=".*", rank=2, alpha=4.0), x,
                    rngs=nnx.Rngs(0))
                for _, factor in nnx.to_flat_state(nnx.state(model, nnx.LoRAParam)):
                    factor.set_value(jnp.full(factor.get_value().shape, 0.3, jnp.float32))
                outputs[provider] = model(x)
            ours, qwix_sum = outputs[model_lib._LoraProvider], outputs[qwix.LoraProvider]
            self.assertEqual((ours.dtype, qwix_sum.dtype), (jnp.bfloat16, jnp.float32))
            base = module()(x)  # the same weights, no LoRA
            self.assertGreater(float(jnp.abs(ours.astype(jnp.float32) - base).max()), 0.1)
            np.testing.assert_array_equal(np.asarray(ours, np.float32),
                                          np.asarray(qwix_sum.astype(jnp.bfloat16), np.float32))

    def test_missing_tensor_and_bad_shapes_are_named(self):
        directory = self.create_tempdir().full_path
        path, dims = testing.tiny_checkpoint(directory)
        from safetensors.numpy import load_file, save_file  # pylint: disable=import-outside-toplevel
        files = base_model.safetensors_files(path)
        up = "model.language_model.layers.2.mlp.up_proj.weight"
        tensors = load_file(files[up])
        broken = dict(tensors)
        del broken[up]
        save_file(broken, files[up])
        # Absent from its shard but listed in the index, then absent from both.
        with self.assertRaisesRegex(base_model.BaseModelError, "layers.2.mlp.up_proj"):
            model_lib.load_base(path, dims, testing.mesh(1, 1), "float32")
        index_path = os.path.join(path, "model.safetensors.index.json")
        with open(index_path) as f:
            index = json.load(f)
        with open(index_path, "w") as f:
            json.dump({**index, "weight_map": {k: v for k, v in index["weight_map"].items()
                                               if k != up}}, f)
        with self.assertRaisesRegex(gemma4_map.MappingError, "layers.2.mlp.up_proj"):
            model_lib.load_base(path, dims, testing.mesh(1, 1), "float32")
        save_file(tensors, files[up])
        with open(index_path, "w") as f:
            json.dump(index, f)
        q = "model.language_model.layers.1.self_attn.q_proj.weight"
        tensors = load_file(files[q])
        save_file({**tensors, q: np.zeros((8, 8), np.float32)}, files[q])
        with self.assertRaisesRegex(gemma4_map.MappingError,
                                    r"layers.1.self_attn.q_proj.weight: shape \(8, 8\)"):
            model_lib.load_base(path, dims, testing.mesh(1, 1), "float32")

    def test_truncated_shard_is_named(self):
        path, dims = testing.tiny_checkpoint(self.create_tempdir().full_path)
        file = base_model.safetensors_files(path)["model.language_model.layers.3.mlp.up_proj.weight"]
        with open(file, "r+b") as f:
            f.truncate(os.path.getsize(file) // 2)
        with self.assertRaisesRegex(base_model.BaseModelError, os.path.basename(file)):
            model_lib.load_base(path, dims, testing.mesh(1, 1), "float32")


if __name__ == "__main__":
    absltest.main()
