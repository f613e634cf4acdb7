import time

from absl.testing import absltest

from common import machines
from gemma4 import gemma4_map
from training.common import flops
from training.common import hparams
from training.common import memory
from training.tpu import mesh_plan

GEMMA4_31B = gemma4_map.Dims(
    vocab=262144, embed=5376, mlp=21504, heads=32, head_dim=256, kv_heads=16,
    global_kv_heads=4, global_head_dim=512, k_eq_v_global=True,
    layer_types=(("sliding_attention",) * 5 + ("full_attention",)) * 10, sliding_window=1024,
    final_logit_softcap=30.0, local_rope_theta=1e4, global_rope_theta=1e6,
    global_rope_proportion=0.25)
TARGETS = gemma4_map.tunix_lora_modules(hparams.LORA_TARGET_MODULES)


class MeshPlanTest(absltest.TestCase):

    def test_tp8_on_31b_fails_fast_naming_the_dimension(self):
        started = time.time()
        with self.assertRaises(mesh_plan.MeshError) as raised:
            mesh_plan.check(mesh_plan.Mesh(1, 8), GEMMA4_31B, 8)
        self.assertLess(time.time() - started, 1.0)
        message = str(raised.exception)
        self.assertIn("tp=8 does not divide the global KV heads (4)", message)
        self.assertIn("Valid meshes for 8 devices: (fsdp=2, tp=4), (fsdp=4, tp=2), "
                      "(fsdp=8, tp=1)", message)

    def test_reference_meshes_are_valid(self):
        mesh_plan.check(mesh_plan.Mesh(1, 4), GEMMA4_31B, 4)  # v5p-8
        mesh_plan.check(mesh_plan.Mesh(2, 4), GEMMA4_31B, 8)  # v5p-16

    def test_device_count_and_batch(self):
        problems = mesh_plan.problems(mesh_plan.Mesh(2, 4), GEMMA4_31B, 4, batch_per_step=3)
        self.assertIn("fsdp x tp = 2 x 4 = 8 but there are 4 devices", problems)
        self.assertIn("fsdp=2 does not divide the 3 sequences of a micro-batch", problems)

    def test_parameter_counts(self):
        self.assertAlmostEqual(flops.parameter_count(GEMMA4_31B) / 1e9, 30.7, delta=0.1)
        # r x (in + out) per LoRA'd projection: q, fused kv or k, o, 3 MLP.
        self.assertEqual(flops.lora_parameter_count(GEMMA4_31B, 64, TARGETS), 472_514_560)

    def test_hbm_estimate_and_refusal(self):
        parts = mesh_plan.hbm_estimate(
            GEMMA4_31B, mesh_plan.Mesh(1, 4), seq_len=3072, micro_batch=1, base_bytes=2,
            lora_rank=64, tunix_modules=TARGETS)
        # The bf16 base split over 4 chips dominates: 30.7e9 x 2 / 4 bytes.
        self.assertAlmostEqual(parts["base_weights"] / memory.GIB, 14.29, delta=0.01)
        self.assertLess(parts["total"], 95.74 * memory.GIB)
        mesh_plan.check_fits(parts, 95.74 * memory.GIB)
        with self.assertRaisesRegex(mesh_plan.MeshError, "does not fit in HBM"):
            mesh_plan.check_fits(parts, 16 * memory.GIB)
        # Remat: every layer's input (5376 bf16 per token), and one layer
        # recomputed at a time, holding what an unrolled global layer keeps
        # (85,760 bytes per token) and dense attention's float32 scores.
        scores = 3072 * 3072 * 8 * 4
        self.assertAlmostEqual(
            parts["activations"], 60 * 3072 * 5376 * 2 + 85_760 * 3072 + scores
            + mesh_plan.LOGIT_BYTES * 3072 * 262144 / 4, delta=1)
        without_remat = mesh_plan.hbm_estimate(
            GEMMA4_31B, mesh_plan.Mesh(1, 4), seq_len=3072, micro_batch=1, base_bytes=2,
            lora_rank=64, tunix_modules=TARGETS, remat=False)
        self.assertGreater(without_remat["activations"], parts["activations"])
        splash = mesh_plan.hbm_estimate(
            GEMMA4_31B, mesh_plan.Mesh(1, 4), seq_len=3072, micro_batch=1, base_bytes=2,
            lora_rank=64, tunix_modules=TARGETS, remat=False, attention="splash")
        # Splash keeps no T x T scores: one fp32 [T, T] per 8 local heads per layer.
        self.assertAlmostEqual(without_remat["activations"] - splash["activations"],
                               60 * 3072 * 3072 * 8 * 4, delta=1)
        scanned = mesh_plan.hbm_estimate(
            GEMMA4_31B, mesh_plan.Mesh(1, 4), seq_len=3072, micro_batch=1, base_bytes=2,
            lora_rank=64, tunix_modules=TARGETS, remat=False, attention="splash", scanned_layers=60)
        # The scan keeps per token, in bf16 (tp=4): a sliding layer's input, o and
        # down (3 x 5376), q and the attention output (2 x 32 x 256 / 4), k and v
        # (2 x 16 x 256 / 4), gate and up (2 x 21504 / 4), and x @ A of its 6 LoRA
        # projections (6 x 64): 33,408 values; a global layer's the same with
        # 512-wide heads and one K = V projection of 4 heads: 35,968. 50 sliding
        # and 10 global layers over 3072 tokens, and the logits:
        kept = (50 * 33_408 + 10 * 35_968) * 3072 * 2
        logits = mesh_plan.LOGIT_BYTES * 3072 * 262144 / 4
        self.assertAlmostEqual(scanned["activations"], kept + logits, delta=1)
        # Half scanned (a block that does not repeat to the end): the rest keep
        # what unscanned layers keep.
        half = mesh_plan.hbm_estimate(
            GEMMA4_31B, mesh_plan.Mesh(1, 4), seq_len=3072, micro_batch=1, base_bytes=2,
            lora_rank=64, tunix_modules=TARGETS, remat=False, attention="splash",
            scanned_layers=30)
        unscanned_layer = (splash["activations"] - logits) / 60
        self.assertAlmostEqual(half["activations"], (25 * 33_408 + 5 * 35_968) * 3072 * 2
                               + 30 * unscanned_layer + logits, delta=1)
        self.assertLess(scanned["activations"], splash["activations"])
        # Unrolled, a sliding layer keeps per token (tp=4), in bf16: the stream,
        # 2 x 5376; gate, up and their product, 3 x 5376; q (32 x 256 / 4) and
        # k and v (2 x 16 x 256 / 4), twice each; attention's output, 2048; the
        # o and down projections' outputs, 2 x 5376 / 4: 39,808 values, 79,616
        # bytes. A global layer's q is 4096 wide and its K = V 512: 85,760 bytes.
        self.assertAlmostEqual(splash["activations"],
                               (50 * 79_616 + 10 * 85_760) * 3072 + logits, delta=1)
        # rbg's masks, a byte per element of the LoRA projections' inputs: q, kv,
        # gate and up cut to 5376 / 4, o's 32 heads x 256 (x 512 global) / 4,
        # down's 21504 / 4.
        masks = mesh_plan.hbm_estimate(
            GEMMA4_31B, mesh_plan.Mesh(1, 4), seq_len=3072, micro_batch=1, base_bytes=2,
            lora_rank=64, tunix_modules=TARGETS, remat=False, attention="splash",
            dropout_masks=True)
        self.assertAlmostEqual(masks["activations"] - splash["activations"],
                               (50 * 12_800 + 10 * 14_848) * 3072, delta=1)
        self.assertEqual(parts["gathered_weights"], 0)
        two_hosts = mesh_plan.hbm_estimate(
            GEMMA4_31B, mesh_plan.Mesh(2, 4), seq_len=3072, micro_batch=2, base_bytes=2,
            lora_rank=64, tunix_modules=TARGETS)
        self.assertGreater(two_hosts["gathered_weights"], 0)  # fsdp all-gathers weights

    def test_reference_mfu_is_about_five_percent(self):
        per_token = flops.flops_per_token(GEMMA4_31B, 3072, 64, TARGETS)
        # training/common/recipe.md: 763 tok/s on a v5p-8 (4 chips) is ~5% MFU.
        v5p8 = machines.get("tpu-v5p-8")
        self.assertAlmostEqual(flops.mfu(763, per_token, v5p8.chips, v5p8.peak_flops_per_chip),
                               0.056, delta=0.005)


if __name__ == "__main__":
    absltest.main()
