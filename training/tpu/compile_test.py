"""The TPU step compiled ahead of time for v5p-8 (libtpu, no TPU): bytes and FLOPs.

The 31B test compiles two layers of the real model (one sliding, one K = V
global; every width real, sequence length 3072) with v5p8.py's settings
(tp=4, micro-batch 2 x 4, splash attention, no remat) and holds XLA to the
planner and to flops.py; the binary's test compiles the reference's settings
(dense attention, remat) on small widths.
"""

import dataclasses
import json
import os
import re
import subprocess
import sys
import tempfile
from unittest import mock

from common import binaries
from common import gcs_emulator
from common import storage
from training.tpu import aot

aot.use_libtpu()  # before JAX starts

# pylint: disable=wrong-import-position
import jax
import jax.numpy as jnp
from absl.testing import absltest
from jax.sharding import SingleDeviceSharding

from common import calibration
from common import machines
from gemma4 import base_model
from gemma4 import gemma4_map
from training.common import hparams
from training.tpu import libtpu_flags
from training.tpu import mesh_plan
from training.tpu.configs import v5p8

V5P8 = machines.get("tpu-v5p-8")


def real_31b(layers):
    hf_config, _ = base_model.config_only("google/gemma-4-31B-it")
    dims = gemma4_map.Dims.from_hf_config(hf_config)
    return dataclasses.replace(dims, layer_types=tuple(dims.layer_types[i] for i in layers))


def small_dims():
    """A few-MB Gemma 4 with the real layer kinds: compiles in seconds."""
    return dataclasses.replace(real_31b([0, 5]), vocab=1024, embed=256, mlp=512, heads=8,
                               kv_heads=4, global_kv_heads=4, head_dim=64, global_head_dim=128)


def v5p8_with(**overrides):
    """v5p8.py with fields overridden (`"mesh.tp": 8`)."""
    config = v5p8.get_config()
    config.update_from_flattened_dict(overrides)
    return config


def compile_dropout(per_chip):
    """Compiles a dropout mask over an input sharded 4 ways (v5p-8's tp) in this
    process, `dropout_rng_per_chip` as given: each generator's output shape, XLA's
    estimate and `aot.cost`'s. Run in a process of its own (libtpu's flags)."""
    libtpu_flags.use(v5p8_with(dropout_rng_per_chip=per_chip))
    mesh = jax.sharding.Mesh(aot.topology_devices(V5P8.topology), ("tp",))
    split = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec(None, "tp"))
    replicated = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())
    key = jax.eval_shape(lambda: jax.random.key(0, impl="rbg"))

    def dropout(key, x):
        return jnp.where(jax.random.bernoulli(key, 0.95, x.shape), x / 0.95, 0)

    compiled = jax.jit(dropout, out_shardings=split).lower(
        jax.ShapeDtypeStruct(key.shape, key.dtype, sharding=replicated),
        jax.ShapeDtypeStruct((256, 4096), jnp.bfloat16, sharding=split)).compile()
    xla = compiled.cost_analysis()
    xla = xla[0] if isinstance(xla, (list, tuple)) else xla
    return {"generated": re.findall(r"= u32\[([0-9,]+)\]\S* rng-bit-generator\(",
                                    compiled.as_text()),
            "xla_seconds": xla["optimal_seconds"],
            "seconds": aot.cost(compiled)["optimal_seconds"]}


class CompileTest(absltest.TestCase):

    def test_shipped_31b_config_has_the_recipe_widths(self):
        dims = real_31b(range(60))
        self.assertEqual((dims.vocab, dims.embed, dims.mlp, dims.heads, dims.head_dim),
                         (262144, 5376, 21504, 32, 256))
        self.assertEqual((dims.kv_heads, dims.global_kv_heads, dims.global_head_dim),
                         (16, 4, 512))
        self.assertTrue(dims.k_eq_v_global)
        self.assertEqual(dims.layer_types.count(gemma4_map.GLOBAL), 10)

    def check_31b_two_layers(self, config):
        row = aot.compile_row(real_31b([0, 5]), config, V5P8,
                              non_padding_fraction=0.3, trained_fraction=0.2)
        print(json.dumps(row, indent=1))
        self.assertEqual(row["topology"], "v5p:2x2x1")
        self.assertTrue(row["fits"])
        # FLOPs: flops.py's count of what the compiled step executes (attention
        # dense over all keys, or left to the Pallas kernel XLA does not see;
        # remat's second forward pass) leaves out only the element-wise work
        # (norms, softmax, RoPE, the optimizer): under 2%.
        self.assertAlmostEqual(row["xla_flops"] / row["expected_compiled_flops"], 1.0, delta=0.02)
        # Bytes: the planner is a formula, not a simulation of XLA's buffer
        # assignment; within 15% of XLA's per-chip total it sizes runs safely
        # under the 90% HBM limit (common/machines.py).
        self.assertAlmostEqual(row["planner_bytes"] / row["per_chip_bytes"], 1.0, delta=0.15)
        self.assertGreater(row["optimal_seconds"], 0)
        self.assertGreater(row["predicted_mfu"], 0)
        return row

    def test_31b_two_layers_on_v5p8_agree_with_planner_and_flops(self):
        config = v5p8.get_config()
        self.assertEqual((config.mesh.fsdp, config.mesh.tp, *mesh_plan.batch_shape(config),
                          config.attention.kernel, config.remat, config.dropout_rng),
                         (1, 4, 4, 2, 3072, "splash", False, "rbg"))
        row = self.check_31b_two_layers(config)
        # Splash attention is a Pallas kernel: counted by hand, its time added.
        [kernel] = row["analytic_kernels"]
        self.assertEqual(kernel["name"], "splash_attention")
        self.assertAlmostEqual(row["optimal_seconds"],
                               row["xla_optimal_seconds"] + kernel["seconds"])

    def test_rng_bit_generator_minus_one_second_is_taken_out(self):
        device = SingleDeviceSharding(aot.topology_devices(V5P8.topology)[0])
        key = jax.eval_shape(lambda: jax.random.key(0, impl="rbg"))

        def dropped_matmul(key, x):
            return jnp.where(jax.random.bernoulli(key, 0.5, x.shape), x, 0) @ x

        compiled = jax.jit(dropped_matmul).lower(
            jax.ShapeDtypeStruct(key.shape, key.dtype, sharding=device),
            jax.ShapeDtypeStruct((1024, 1024), jnp.bfloat16, sharding=device)).compile()
        xla = compiled.cost_analysis()
        xla = xla[0] if isinstance(xla, (list, tuple)) else xla
        self.assertLess(xla["optimal_seconds"], -0.99)  # one generator: -1 s, "unknown"
        corrected = aot.cost(compiled)["optimal_seconds"]
        self.assertAlmostEqual(corrected, xla["optimal_seconds"] + 1)
        self.assertGreater(corrected, 0)

    def test_per_chip_masks_draw_each_chips_part_and_are_costed_like_whole_ones(self):
        results = {}
        for per_chip in (False, True):
            done = subprocess.run(
                [sys.executable, "-c", "import json, sys; from training.tpu import "
                 "compile_test; print(json.dumps(compile_test.compile_dropout("
                 f"{per_chip})))"],
                capture_output=True, text=True, timeout=300,
                env=binaries.this_interpreter_env(LIBTPU_INIT_ARGS=None))
            self.assertEqual(done.returncode, 0, done.stderr[-3000:])
            results[per_chip] = json.loads(done.stdout.strip().splitlines()[-1])
        whole, part = results[False], results[True]
        # Without the flag every chip draws the whole mask; with it, its quarter.
        self.assertEqual(whole["generated"], ["256,4096"])
        self.assertEqual(part["generated"], ["256,1024"])
        # One unknown (-1 s) for the generator; three more for its state's offset.
        self.assertAlmostEqual(whole["seconds"], whole["xla_seconds"] + 1, places=4)
        self.assertAlmostEqual(part["seconds"], part["xla_seconds"] + 4, places=4)
        for result in (whole, part):
            self.assertGreater(result["seconds"], 0)
            self.assertLess(result["seconds"], 1e-3)

    def test_xla_counts_loops_once_and_the_layer_scan_once_per_repeat(self):
        # Small widths, (sliding, sliding, global) twice: scanned, a block of 3 over 2
        # repeats, with a scan over its 2 sliding layers inside.
        dims = dataclasses.replace(small_dims(), layer_types=(
            gemma4_map.SLIDING, gemma4_map.SLIDING, gemma4_map.GLOBAL) * 2)
        devices = aot.topology_devices(V5P8.topology)

        def config(accumulation, scan):
            return v5p8_with(**{"data.max_seq_len": 256, "batch.per_device_size": 1,
                                "batch.effective_size": accumulation, "scan_layers": scan,
                                "scan_runs": True})

        # compile_step multiplies XLA's counts by the accumulation steps: true only
        # while XLA counts a loop's body once. A change of XLA fails here.
        one = aot.cost(aot.lower_step(dims, config(1, False), devices).compile())["flops"]
        unrolled = aot.compile_step(dims, config(4, False), V5P8)
        steps = 4 * V5P8.chips  # accumulation x chips, as compile_step scales
        self.assertAlmostEqual(unrolled["xla_flops"] / steps / one, 1.0, delta=0.01)
        self.assertNotIn("repeats", unrolled["scan"])
        # The layer scan: XLA alone counts one repeat of the block and one layer of
        # its run, short of the unrolled step; counted per layer and repeat, the
        # FLOPs agree. (XLA's step time
        # does not, at these widths: per-op costs dominate it, and the loop adds
        # ops; 1.34x measured. The README holds the 31B figures.)
        scanned = aot.compile_step(dims, config(4, True), V5P8)
        self.assertEqual((scanned["scan"]["period"], scanned["scan"]["repeats"]), (3, 2))
        self.assertEqual(scanned["scan"]["runs"], ((0, 2), (2, 1)))
        self.assertLess(scanned["scan"]["counted_flops"] * steps, 0.8 * unrolled["xla_flops"])
        self.assertGreater(scanned["scan"]["runs_unrolled_flops"],
                           1.1 * scanned["scan"]["counted_flops"])
        # The scanned step does more by one product: its backward pass computes
        # LoRA's (x @ A) @ B again (forward.scanned_saves), 2 x tokens x rank x
        # output width per projection, 7% of the step at these widths (0.7% at 31B).
        accumulation, micro_batch, seq_len = mesh_plan.batch_shape(config(4, True))
        widths = sum(dims.heads * a.head_dim + (1 if a.k_eq_v else 2) * a.kv_heads * a.head_dim
                     + 2 * dims.embed + 2 * dims.mlp
                     for a in map(dims.attention, range(dims.num_layers)))
        again = 2 * accumulation * micro_batch * seq_len * config(4, True).lora.rank * widths
        self.assertAlmostEqual((scanned["xla_flops"] - again) / unrolled["xla_flops"], 1.0,
                               delta=0.02)
        self.assertGreater(again / unrolled["xla_flops"], 0.03)

    def test_without_xla_estimate_the_roofline_scaled_by_the_generation_measured(self):
        # one_chip.py's counts on v5e:1x1 (common/calibration.json): compute-bound.
        measured = {"xla_flops": 1.442e14, "xla_bytes_accessed": 5.395e11}
        kernels = [{"flops": 1.407e13}]
        v5e, v6e = machines.get("tpu-v5litepod-1"), machines.get("tpu-v6e-1")
        roofline = aot.roofline_seconds(measured, kernels, v5e)
        self.assertAlmostEqual(roofline, (1.442e14 + 1.407e13) / 197e12)
        self.assertAlmostEqual(aot.roofline_seconds({**measured, "xla_bytes_accessed": 1e12},
                                                    kernels, v5e), 1e12 / 819e9)  # memory-bound
        basis = aot.prediction_basis(v5e, -2070.7, roofline)
        factor = calibration.factors("step_seconds_over_roofline", generation="v5e")[0][1]
        self.assertAlmostEqual(basis["seconds"], roofline * factor)
        self.assertEqual(basis["runs"], ["v5e-1x1-one_chip-2026-12-06"])
        # No measured v6e run: the bare roofline, said to be so.
        roofline = aot.roofline_seconds(measured, kernels, v6e)
        basis = aot.prediction_basis(v6e, -1.0, roofline)
        self.assertEqual(basis["seconds"], roofline)
        self.assertIn("not calibrated", basis["basis"])
        self.assertEqual(aot.prediction_basis(v5e, 0.5, roofline),
                         {"seconds": 0.5, "basis": "xla"})

    def test_every_tpu_machine_has_a_topology_libtpu_compiles_for(self):
        for machine in machines.MACHINES.values():
            if machine.platform == "tpu":
                with self.subTest(machine.name):
                    self.assertLen(aot.topology_devices(machine.topology), machine.chips)

    def test_tp8_is_refused_before_any_compile(self):
        config = v5p8_with(**{"mesh.fsdp": 1, "mesh.tp": 8})
        with mock.patch.object(aot, "lower_step", side_effect=AssertionError("compiled")):
            with self.assertRaisesRegex(mesh_plan.MeshError,
                                        r"tp=8 does not divide the global KV heads \(4\)"):
                aot.compile_row(real_31b(range(60)), config, machines.get("tpu-v5p-16"),
                                non_padding_fraction=1.0, trained_fraction=1.0)

    def test_a_batch_that_does_not_split_is_refused_before_any_compile(self):
        for effective in (4, 0):  # under one micro-batch of 2 x 4; none at all
            config = v5p8_with(**{"mesh.fsdp": 4, "mesh.tp": 1,
                                  "batch.effective_size": effective})
            with mock.patch.object(aot, "lower_step", side_effect=AssertionError("compiled")):
                with self.assertRaisesRegex(hparams.RecipeError, f"effective batch {effective}"):
                    aot.compile_row(real_31b(range(60)), config, machines.get("tpu-v5p-16"),
                                    non_padding_fraction=1.0, trained_fraction=1.0)

    def test_binary_writes_compile_json_and_compares_with_the_reference(self):
        with tempfile.TemporaryDirectory() as tmp:
            base = os.path.join(tmp, "config.json")
            dims = small_dims()
            with open(base, "w") as f:
                json.dump({"text_config": {
                    "vocab_size": dims.vocab, "hidden_size": dims.embed,
                    "intermediate_size": dims.mlp, "num_attention_heads": dims.heads,
                    "head_dim": dims.head_dim, "num_key_value_heads": dims.kv_heads,
                    "num_global_key_value_heads": dims.global_kv_heads,
                    "global_head_dim": dims.global_head_dim, "attention_k_eq_v": True,
                    "layer_types": list(dims.layer_types), "sliding_window": 128}}, f)
            # Into a bucket, offline (a closed loopback port for the Hub): the step's
            # token fractions are measured on rows of CodeV-R1's length profile.
            command = binaries.command("//training/tpu:compile", "--config=v5p8.py",
                       f"--base_config={base}", "--workdir=gs://bkt/compile", "--compare_reference",
                       "--config.data.max_seq_len=256", "--config.data.packing=True",
                       "--config.batch.per_device_size=2",
                       "--reference_non_padding_fraction=0.3",
                       "--reference_trained_fraction=0.19")
            with gcs_emulator.running("bkt"):
                done = subprocess.run(command, capture_output=True, text=True, timeout=600,
                                      env=binaries.child_env(HF_ENDPOINT="http://127.0.0.1:9"))
                self.assertEqual(done.returncode, 0, done.stderr[-3000:])
                result = storage.read_json("gs://bkt/compile/compile.json")
            self.assertIn("offline (127.0.0.1 unreachable): counting synthetic:1000", done.stdout)
            self.assertFalse(os.path.exists("gs:"))  # no local folder named after the URL
            reference, ours = result["rows"]
            self.assertTrue(reference["reference"])
            self.assertEqual((reference["micro_batch"], reference["accumulation"]), (1, 8))
            self.assertEqual((ours["micro_batch"], ours["accumulation"]), (2, 4))
            for field in ("topology", "mesh", "seq_len", "per_chip_bytes", "hbm_bytes",
                          "planner_bytes", "xla_flops", "model_flops", "optimal_seconds",
                          "predicted_tokens_per_s", "predicted_trained_tokens_per_s",
                          "predicted_mfu", "compile_seconds", "host_peak_bytes"):
                self.assertIn(field, ours)
            # Each row's high-water mark is taken when its step is compiled, in order.
            self.assertLess(0, reference["host_peak_bytes"])
            self.assertLessEqual(reference["host_peak_bytes"], ours["host_peak_bytes"])
            self.assertLessEqual(ours["host_peak_bytes"], result["host_peak_bytes"])
            self.assertAlmostEqual(
                result["trained_tokens_per_s_ratio"],
                ours["predicted_trained_tokens_per_s"] / reference[
                    "predicted_trained_tokens_per_s"])
            self.assertIn("ours / reference", done.stdout)
            # The reference: dense attention, all logits, JAX's default dropout generator;
            # ours: v5p8.py's splash kernel and rbg masks.
            self.assertEqual((reference["attention"], reference["loss_chunk"], ours["attention"]),
                             ("dense", 0, "splash"))
            self.assertEqual((reference["dropout_rng"], ours["dropout_rng"]),
                             ("threefry2x32", "rbg"))
            self.assertEqual(reference["analytic_kernels"], [])
            self.assertIn("counted by hand", done.stdout)


if __name__ == "__main__":
    absltest.main()
