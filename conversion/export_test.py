import json
import os
import re
from unittest import mock

import numpy as np
import torch
import transformers
from absl.testing import absltest
from absl.testing import parameterized
from huggingface_hub import ModelCard
from safetensors.numpy import load_file

from training.tpu import testing as tpu_testing  # 8 CPU devices first
# pylint: disable=wrong-import-order
from common import cli
from common import gcs_emulator
from common import run_dir as run_dir_lib
from common import storage
from conversion import exporting
from conversion import import_adapter
from conversion import merge
from conversion import model_card
from conversion import testing
from conversion import verify
from gemma4 import adapter
from gemma4 import base_model
from gemma4 import gemma4_map
from gemma4 import lora_map
from gemma4 import orbax_lora
from training.common import lifecycle

VLLM_TARGETS = {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}
CONFIGS = {
    "k_eq_v_global": {},
    "text_only": dict(multimodal=False),
    "separate_kv_global": dict(attention_k_eq_v=False, num_key_value_heads=2),
    "other_head_dims": dict(head_dim=32, global_head_dim=96, num_key_value_heads=2,
                            num_global_key_value_heads=1, hidden_size=72),
}


def make_run(directory, **overrides):
    """A fake TPU run on a tiny base: multimodal and sharded, as the real checkpoint is
    (`multimodal=False`: the text-only variant, one file)."""
    base, _ = tpu_testing.tiny_checkpoint(directory, **overrides)
    run, dims, factors, config = testing.random_run(os.path.join(directory, "run"), base)
    return run, base, dims, factors, config


def _all_tensors(model_dir):
    out = {}
    for path in set(base_model.safetensors_files(model_dir).values()):
        out.update(load_file(path))
    return out


class ExportTest(parameterized.TestCase):

    @parameterized.named_parameters(*CONFIGS.items())
    def test_tunix_peft_and_merged_logits_agree(self, overrides):
        directory = self.create_tempdir().full_path
        run, base, dims, factors, config = make_run(directory, **overrides)
        out = os.path.join(directory, "export")
        written = exporting.export(run, out, progress=False)
        differences, effect = verify.compare(base, dims, factors, config.lora.alpha,
                                             written["adapter"], written["merged"])
        self.assertLess(max(differences.values()), 1e-4, differences)
        # The LoRA is far from zero: the base alone disagrees visibly.
        self.assertGreater(effect, 1e-2)

    def test_a_run_in_a_bucket_exports_into_a_bucket(self):
        directory = self.create_tempdir().full_path
        run, _, _, _, _ = make_run(directory)
        want = exporting.export(run, os.path.join(directory, "local"), progress=False)
        with gcs_emulator.running("bkt"):
            os.environ[storage.CACHE_ENV] = os.path.join(directory, "cache")
            storage.push(run, "gs://bkt/run")
            # Orbax marks a finished step on GCS with this object (it renames locally).
            storage.write_bytes("gs://bkt/run/checkpoints/10/commit_success.txt", b"")
            written = exporting.export("gs://bkt/run", "gs://bkt/export", progress=False)
            self.assertEqual(written, {"adapter": "gs://bkt/export/adapter",
                                       "merged": "gs://bkt/export/merged"})
            got = storage.fetch("gs://bkt/export", require_complete=True)
        for kind in ("adapter", "merged"):
            local = os.path.join(got, kind)
            self.assertEqual(storage.read_json(os.path.join(local, "provenance.json"))["run_dir"],
                             "gs://bkt/run")
            names = sorted(f for f in os.listdir(want[kind]) if f.endswith(".safetensors"))
            self.assertNotEmpty(names)
            for name in names:
                expected = load_file(os.path.join(want[kind], name))
                actual = load_file(os.path.join(local, name))
                self.assertEqual(sorted(actual), sorted(expected))
                for tensor in expected:
                    np.testing.assert_array_equal(actual[tensor], expected[tensor])

    def test_verify_at_scale_settings(self):
        # bfloat16 on a 2 x 4 mesh: within the bfloat16 tolerance, and a wrong export
        # (the base instead of the merged model) is still far outside it.
        directory = self.create_tempdir().full_path
        run, base, dims, factors, config = make_run(directory)
        written = exporting.export(run, os.path.join(directory, "export"), progress=False)
        bf16, effect = verify.compare(base, dims, factors, config.lora.alpha,
                                      written["adapter"], written["merged"], "bfloat16", (2, 4))
        wrong, _ = verify.compare(base, dims, factors, config.lora.alpha, written["adapter"],
                                  base, "bfloat16", (2, 4))
        print(json.dumps({"bfloat16": bf16, "merged replaced by the base": wrong,
                          "adapter's effect": effect}))
        # The base in bfloat16 is as far from the adapter as a wrong export says.
        self.assertAlmostEqual(effect, wrong["hf_peft vs hf_merged"], delta=0.05 * effect)
        self.assertLess(max(bf16.values()), verify.TOLERANCES["bfloat16"])
        self.assertGreater(wrong["tunix_lora vs hf_merged"], 2 * verify.TOLERANCES["bfloat16"])
        # Weight by weight: the merged export is W + (alpha / r) B A (a float32 base: nothing
        # rounded away); the base in its place misses by the adapter's change.
        peft = load_file(os.path.join(written["adapter"], "adapter_model.safetensors"))
        excess, rounded_away, tensors = merge.check(base, peft, config.lora.alpha,
                                                    written["merged"])
        self.assertLessEqual(excess, merge.MERGED_EXCESS)
        self.assertLess(rounded_away, 1e-3)
        self.assertGreater(tensors, 0)
        self.assertIs(verify.held_pairs(bf16, rounded_away), bf16)
        self.assertGreater(merge.check(base, peft, config.lora.alpha, base)[0],
                           10 * merge.MERGED_EXCESS)
        # Where the merged dtype rounds much of the change away, its logits are not held.
        self.assertEqual(sorted(verify.held_pairs(bf16, 0.5)), ["tunix_lora vs hf_peft"])
        # What each model needs, said before loading; a host too small is refused.
        plan = verify.memory_plan(base, "bfloat16", (2, 4), host_available=1 << 40)
        text = sum(int(np.prod(t.shape)) for name, t in _all_tensors(base).items()
                   if name.startswith("model.language_model."))
        self.assertEqual(plan["tunix_bytes_per_device"], text * 2 // 8)
        self.assertGreater(plan["transformers_host_bytes"], text * 2)  # the vision tower too
        with self.assertRaisesRegex(verify.VerifyMemoryError, "--offload_dir"):
            verify.memory_plan(base, "bfloat16", (2, 4), host_available=1000)
        verify.memory_plan(base, "bfloat16", (2, 4), host_available=1000, offload=True)
        with self.assertRaisesRegex(cli.UserError, "needs 16 devices"):
            verify.tunix_logits(base, dims, factors, config.lora.alpha,
                                verify.tokens(dims.vocab), "bfloat16", (4, 4))

    def test_adapter_satisfies_peft_and_vllm(self):
        directory = self.create_tempdir().full_path
        run, base, _, factors, config = make_run(directory)
        out = exporting.export(run, os.path.join(directory, "a"), "peft", progress=False)["adapter"]
        saved = testing.read_json(os.path.join(out, adapter.CONFIG))
        self.assertEqual((saved["r"], saved["lora_alpha"], saved["peft_type"]),
                         (config.lora.rank, config.lora.alpha, "LORA"))
        self.assertEqual(saved["base_model_name_or_path"], base)
        # A regex on the multimodal checkpoint: the language model's projections only.
        pattern = re.compile(saved["target_modules"])
        self.assertTrue(pattern.fullmatch("model.language_model.layers.0.self_attn.q_proj"))
        self.assertFalse(pattern.fullmatch("model.vision_tower.encoder.layers.0.self_attn.q_proj"))
        names = set(re.search(r"\((.*)\)", saved["target_modules"]).group(1).split("|"))
        self.assertLessEqual(names, VLLM_TARGETS)
        self.assertFalse(saved["modules_to_save"])
        self.assertEqual(saved["bias"], "none")
        weights = load_file(os.path.join(out, adapter.WEIGHTS))
        dims = gemma4_map.Dims.from_hf_config(base_model.read_config(base))
        self.assertEqual(sorted(weights), sorted(lora_map.qwix_to_peft(
            dims, factors, layer_prefix="model.language_model.")))
        from peft import PeftModel  # pylint: disable=import-outside-toplevel
        model = PeftModel.from_pretrained(
            transformers.AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32), out)
        loaded = {n for n, _ in model.named_parameters() if "lora_" in n}
        self.assertLen(loaded, len(weights))

    def test_sharded_merge_streams_and_keeps_the_layout(self):
        directory = self.create_tempdir().full_path
        run, base, _, _, _ = make_run(directory)
        shards = sorted(f for f in os.listdir(base) if f.endswith(".safetensors"))
        self.assertGreater(len(shards), 2)
        out = exporting.export(run, os.path.join(directory, "m"), "merged",
                               progress=False)["merged"]
        self.assertEqual(sorted(f for f in os.listdir(out) if f.endswith(".safetensors")), shards)
        index = testing.read_json(os.path.join(out, merge.INDEX))
        self.assertEqual(index, testing.read_json(os.path.join(base, merge.INDEX)))
        for name in ("config.json", "tokenizer.json", "chat_template.jinja",
                     "generation_config.json", "provenance.json"):
            self.assertTrue(os.path.exists(os.path.join(out, name)), name)
        # W' = W + (alpha / r) B @ A, exactly, in float32.
        peft = load_file(os.path.join(exporting.export(
            run, os.path.join(directory, "p"), "peft", progress=False)["adapter"],
            adapter.WEIGHTS))
        deltas = lora_map.weight_factors(peft)
        name = "model.language_model.layers.1.self_attn.q_proj.weight"
        files = base_model.safetensors_files(base)
        before = load_file(files[name])[name]
        after = load_file(os.path.join(out, os.path.basename(files[name])))[name]
        a, b = deltas[name]
        np.testing.assert_allclose(after, before + 2.0 * (b @ a), rtol=1e-6, atol=1e-7)

    def test_provenance(self):
        directory = self.create_tempdir().full_path
        run, base, _, _, config = make_run(directory)
        out = exporting.export(run, os.path.join(directory, "x"), "peft",
                               progress=False)["adapter"]
        provenance = testing.read_json(os.path.join(out, "provenance.json"))
        self.assertEqual(provenance["step"], 10)
        self.assertEqual(provenance["config"]["lora"]["rank"], config.lora.rank)
        self.assertEqual(provenance["base_fingerprint"], merge.fingerprint(base))
        self.assertIn("peft", provenance["versions"])

    def test_model_card(self):
        directory = self.create_tempdir().full_path
        run, base, _, _, config = make_run(directory)
        # What a real run leaves beside the checkpoint (lifecycle.write_run_info,
        # metrics.jsonl), and a base whose own card names its license.
        info = testing.read_json(os.path.join(run, "run.json"))
        storage.write_json(os.path.join(run, "run.json"), {
            **info, "machine": "tpu-v5p-8", "devices": 4, "total_steps": 10,
            "effective_batch": 8, "packing": True,
            "recipe": lifecycle.recipe(config, 10),
            "data": {"source": "hf://datasets/zhuyaoyu/CodeV-R1-dataset/codev_r1_sft.jsonl",
                     "format": "codev", "rows_read": 120, "rows_capped": 5, "kept": 117,
                     "dropped": {"no_code": 2, "too_long": 1}, "trained_tokens": 40000,
                     "tokens": 52000}})
        with open(os.path.join(run, "metrics.jsonl"), "w") as f:
            for record in ({"step": 9, "loss": 0.5}, {"step": 10, "loss": 0.25},
                           {"step": 10, "eval_loss": 0.375, "eval_tokens": 900}):
                f.write(json.dumps(record) + "\n")
        with open(os.path.join(base, "README.md"), "w") as f:
            f.write("---\nlicense: apache-2.0\n---\n# A base\n")
        summary = {"pass_at_k": {"1": 0.625, "5": 0.75}, "num_problems": 156,
                   "pass_at_k_interval_95": {"1": [0.55, 0.7], "5": [0.68, 0.82]}}
        written = exporting.export(run, os.path.join(directory, "codev-31b"), progress=False,
                                   eval_summary=summary)
        for kind, library in (("adapter", "peft"), ("merged", "transformers")):
            card = ModelCard.load(os.path.join(written[kind], "README.md"))
            self.assertEqual(card.data.library_name, library, kind)
            self.assertEqual(card.data.license, "apache-2.0")
            self.assertEqual(card.data.datasets, ["zhuyaoyu/CodeV-R1-dataset"])
            self.assertIn("gemma4", card.data.tags)
            self.assertIsNone(card.data.base_model)  # a local base is no Hub id
            name = "codev-31b" if kind == "adapter" else "codev-31b-merged"
            self.assertEqual(card.data.model_name, name)
            results = {r.metric_type: r.metric_value for r in card.data.eval_results}
            self.assertEqual(results, {"pass@1": 0.625, "pass@5": 0.75})
            for text in (f"LoRA rank / alpha / dropout | {config.lora.rank} / "
                         f"{float(config.lora.alpha)} / {config.lora.dropout}",
                         "rows: 120 read, 117 kept, dropped 3 (no_code 2, too_long 1); "
                         "5 capped (not read)", "tokens: 52000, of which trained (the answers): 40000",
                         "final training loss: 0.2500 (step 10)",
                         "validation loss: 0.3750 (step 10, 900 tokens)",
                         "pass@1: 0.625, 95% interval [0.550, 0.700] (156 problems",
                         "carries its license (apache-2.0)", "(packed)"):
                self.assertIn(text, card.text, kind)
        # A Hub base is the card's base_model; without an evaluation, no model-index.
        card = model_card.card("adapter", provenance={"base_model": "google/gemma-4-31B-it",
                                                      "step": 3},
                               info={}, records=[], hub_base="google/gemma-4-31B-it",
                               base_dir=directory, model_name="x")
        card = ModelCard(str(card))
        self.assertEqual(card.data.base_model, "google/gemma-4-31B-it")
        self.assertIsNone(card.data.eval_results)
        self.assertIn("see the base model's card", card.text)

    def test_push_plan_and_its_errors(self):
        directory = self.create_tempdir().full_path
        run, _, _, _, _ = make_run(directory)
        written = exporting.export(run, os.path.join(directory, "x"), progress=False)
        plan = model_card.push_plan(written, "my-org/codev")
        self.assertEqual([(repo, local) for repo, local, _ in plan],
                         [("my-org/codev", written["adapter"]),
                          ("my-org/codev-merged", written["merged"])])
        self.assertEqual(plan[0][2], ["README.md", "adapter_config.json",
                                      "adapter_model.safetensors", "provenance.json"])
        self.assertIn("README.md", plan[1][2])
        self.assertIn("model.safetensors.index.json", plan[1][2])
        alone = model_card.push_plan({"merged": written["merged"]}, "my-org/codev")
        self.assertEqual(alone[0][0], "my-org/codev")
        with self.assertRaisesRegex(model_card.PushError, "takes ORG/NAME, got 'codev'"):
            model_card.push_plan(written, "codev")
        # No token: one error, before any request.
        hf_home = self.create_tempdir().full_path
        with mock.patch.dict(os.environ, {"HF_HOME": hf_home, "HF_TOKEN": "",
                                          "HF_HUB_OFFLINE": "1"}):
            with self.assertRaisesRegex(model_card.PushError, "no Hugging Face token"):
                model_card.push(plan)

    def test_atomic_output(self):
        directory = self.create_tempdir().full_path
        run, base, _, _, _ = make_run(directory)
        out = os.path.join(directory, "out")
        # A failure half-way (a base tensor of the wrong shape) leaves nothing.
        files = base_model.safetensors_files(base)
        from safetensors.numpy import save_file  # pylint: disable=import-outside-toplevel
        name = "model.language_model.layers.3.mlp.down_proj.weight"
        path = files[name]
        tensors = load_file(path)
        tensors[name] = np.zeros((3, 3), np.float32)
        broken = os.path.join(directory, "broken")
        os.makedirs(broken)
        for name in os.listdir(base):
            if name != os.path.basename(path):
                os.symlink(os.path.join(base, name), os.path.join(broken, name))
        save_file(tensors, os.path.join(broken, os.path.basename(path)))
        with self.assertRaisesRegex(merge.MergeError, "layers.3.mlp.down_proj.weight"):
            exporting.export(run, out, base_model=broken, progress=False)
        self.assertFalse(os.path.exists(out))
        self.assertEqual([n for n in os.listdir(directory) if n.startswith(".out")], [])
        exporting.export(run, out, "peft", progress=False)
        with self.assertRaises(storage.OutputExists):
            exporting.export(run, out, "peft", progress=False)
        exporting.export(run, out, "merged", overwrite=True, progress=False)
        self.assertTrue(os.path.exists(os.path.join(out, "config.json")))

    def test_bad_input_is_named(self):
        directory = self.create_tempdir().full_path
        run, base, _, _, config = make_run(directory)
        out = os.path.join(directory, "o")
        shard = sorted(f for f in os.listdir(base) if f.endswith(".safetensors"))[1]
        # Missing shard.
        os.rename(os.path.join(base, shard), os.path.join(directory, shard))
        with self.assertRaisesRegex(base_model.BaseModelError, f"missing shard .*{shard}"):
            exporting.export(run, out, progress=False)
        # Truncated shard.
        with open(os.path.join(directory, shard), "rb") as f:
            data = f.read()
        with open(os.path.join(base, shard), "wb") as f:
            f.write(data[:len(data) // 3])
        with self.assertRaisesRegex(base_model.BaseModelError, f"{shard}.*truncated or corrupt"):
            exporting.export(run, out, progress=False)
        with open(os.path.join(base, shard), "wb") as f:
            f.write(data)
        # A run config whose rank disagrees with the checkpoint.
        other = config.copy_and_resolve_references()
        other.lora.rank = 16
        from common import config_cli  # pylint: disable=import-outside-toplevel
        config_cli.write_resolved_config(other, run)
        with self.assertRaisesRegex(lora_map.LoraMapError, "rank-8 factors but the run's "
                                    "config says lora.rank=16"):
            exporting.export(run, out, progress=False)
        config_cli.write_resolved_config(config, run)
        # A checkpoint without LoRA.
        empty = os.path.join(run, run_dir_lib.CHECKPOINTS, "20")
        os.makedirs(os.path.join(empty, "optimizer"))
        with self.assertRaisesRegex(orbax_lora.NoLoraError, "20 holds no LoRA state"):
            exporting.export(run, out, progress=False)
        self.assertFalse(os.path.exists(out))

    def test_adapter_to_orbax_to_adapter_is_bit_exact(self):
        directory = self.create_tempdir().full_path
        run, base, dims, factors, config = make_run(directory)
        first = exporting.export(run, os.path.join(directory, "a1"), "peft",
                                 progress=False)["adapter"]
        imported = import_adapter.import_adapter(first, base, os.path.join(directory, "orbax"))
        restored = orbax_lora.read(imported)
        for name, value in factors.items():
            np.testing.assert_array_equal(restored[name], value, err_msg=name)
        # The TPU stack loads it: the same logits as the adapter on transformers.
        ids = verify.tokens(dims.vocab, base_model.media_token_ids(base_model.read_config(base)))
        np.testing.assert_allclose(
            verify.tunix_logits(base, dims, restored, config.lora.alpha, ids),
            verify.hf_logits(base, ids, first), atol=1e-4)
        # ... and exporting it again gives the adapter back, byte for byte.
        second = testing.fake_run(os.path.join(directory, "run2"), base, config, restored)
        again = exporting.export(second, os.path.join(directory, "a2"), "peft",
                                 progress=False)["adapter"]
        want = load_file(os.path.join(first, adapter.WEIGHTS))
        got = load_file(os.path.join(again, adapter.WEIGHTS))
        self.assertEqual(sorted(want), sorted(got))
        for name in want:
            self.assertEqual(want[name].tobytes(), got[name].tobytes(), name)



if __name__ == "__main__":
    absltest.main()
