"""Scanned layers: the block plan, the layout conversions, and a scanned model that
computes what the unrolled one does (losses and LoRA gradients, every remat scope)."""

import dataclasses
import os
import re
import tempfile

import grain
import jax
import numpy as np
from absl.testing import absltest
from flax import nnx
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from training.tpu import testing  # sets up 8 CPU devices first
# pylint: disable=wrong-import-order
from gemma4 import gemma4_map
from gemma4 import orbax_lora
from training.tpu import checkpoints
from training.tpu import forward
from training.tpu import layer_scan
from training.tpu import model as model_lib
from training.tpu import state as state_lib

S, G = gemma4_map.SLIDING, gemma4_map.GLOBAL
# Float32 on random tiny weights: the scan's loop body is compiled apart from the
# rest of the step, so XLA rounds some sums differently. The tiny model amplifies
# any rounding: one ulp of noise on the base weights moves the final hidden
# states by 2.6e-4 to 3.4e-4 (measured), as much as the scan does (2.4e-4).
# The scan fully unrolled (the same program XLA would see unscanned) is bit-exact.
LOSS_TOLERANCE = 1e-6  # relative
GRAD_TOLERANCE = 5e-3  # of each factor's largest gradient entry


class PlanTest(absltest.TestCase):

    def test_finds_the_block_and_the_layers_after_it(self):
        cases = {
            (S,) * 5 + (G,): (1, 5, 1),  # 31B's block once (the old tiny model)
            ((S,) * 5 + (G,)) * 10: (6, 10, 0),  # 31B
            ((S,) * 5 + (G,)) * 2 + (G,): (6, 2, 1),  # a last layer forced global
            (S, S, G) * 2: (3, 2, 0),  # the tiny model
            (S, G): None,  # //training/tpu:compile --layers=0,5
            (S,) * 6 + (G,): (1, 6, 1),
            (S, G) * 3 + (G,): (2, 3, 1),
        }
        for types, expected in cases.items():
            plan = layer_scan.Plan.of(types)
            found = (plan.period, plan.repeats, plan.num_layers - plan.scanned) \
                if plan.repeats else None
            self.assertEqual(found, expected, types)
        self.assertEqual(layer_scan.Plan.of(((S,) * 5 + (G,)) * 10, scan=False).repeats, 0)
        self.assertEqual(layer_scan.Plan.of(((S,) * 5 + (G,)) * 10).runs, ((0, 5), (5, 1)))
        self.assertEqual(layer_scan.Plan.of((S, G, G, S) * 2).runs, ((0, 1), (1, 2), (3, 1)))

    def test_paths_map_both_ways(self):
        plan = layer_scan.Plan.of((S, S, G) * 3 + (G,))
        self.assertEqual(plan.describe(),
                         "10 layers: a block of 3 scanned over 3 repeats, 1 more unrolled")
        for layer in range(10):
            path = ("layers", layer, "attn", "q_einsum", "w")
            located, index = plan.locate(path)
            self.assertEqual(plan.layer_path(located, index), path)
        # Layer 7: repeat 2, the second of the sliding run; layer 8: the global run.
        self.assertEqual(plan.locate(("layers", 7, "mlp")), (("blocks", 0, "mlp"), (2, 1)))
        self.assertEqual(plan.locate(("layers", 8, "mlp")), (("blocks", 1, "mlp"), (2, 0)))
        self.assertEqual(plan.locate(("layers", 9, "mlp")), (("layers", 0, "mlp"), None))
        self.assertEqual(plan.locate(("embedder", "input_embedding")),
                         (("embedder", "input_embedding"), None))

    def test_stack_and_unstack_arrays_and_shapes(self):
        plan = layer_scan.Plan.of((S, S, G) * 2)
        flat = {("layers", i, "w"): np.full((2, 3), i, np.float32) for i in range(6)}
        stacked = layer_scan.stack_flat(plan, flat)
        np.testing.assert_array_equal(stacked[("blocks", 0, "w")][:, :, 0, 0], [[0, 1], [3, 4]])
        np.testing.assert_array_equal(stacked[("blocks", 1, "w")][:, :, 0, 0], [[2], [5]])
        back = layer_scan.unstack_flat(plan, stacked)
        self.assertEqual(set(back), set(flat))
        for path, value in flat.items():
            np.testing.assert_array_equal(back[path], value)
        mesh = testing.mesh(2, 4)
        shape = jax.ShapeDtypeStruct((8, 4), np.float32,
                                     sharding=NamedSharding(mesh, P("fsdp", "tp")))
        stacked = layer_scan.stack_flat(plan, {("layers", i, "w"): shape for i in range(6)})
        self.assertEqual(stacked[("blocks", 0, "w")].shape, (2, 2, 8, 4))
        self.assertEqual(stacked[("blocks", 0, "w")].sharding.spec, P(None, None, "fsdp", "tp"))
        back = layer_scan.unstack_flat(plan, stacked)[("layers", 4, "w")]
        self.assertEqual((back.shape, back.sharding.spec), ((8, 4), P("fsdp", "tp")))
        with self.assertRaisesRegex(ValueError, r"blocks.0.w: layers \[0, 4\], not all 2 "):
            layer_scan.stack_flat(plan, {("layers", i, "w"): flat[("layers", i, "w")]
                                         for i in (0, 4)})


class ScannedModelTest(absltest.TestCase):
    """A 10-layer tiny model: a block of (sliding, sliding, global) scanned 3 times, a
    layer after it, on the (2, 4) mesh, float32, with LoRA B noise so that every factor
    has a gradient."""

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.tmp = tempfile.TemporaryDirectory()
        cls.path, cls.dims = testing.tiny_checkpoint(
            cls.tmp.name, num_hidden_layers=10, layer_types=[S, S, G] * 3 + [S])
        cls.lora = testing.cpu_config().lora
        cls.lora.dropout = 0.0
        cls.mesh = testing.mesh(2, 4)
        cls.factors = testing.random_factors(cls.dims, cls.lora, seed=1, scale=0.3)
        batch = testing.batch(np.random.default_rng(0), 1, 2, 64, cls.dims.vocab)
        cls.batch = {name: value[0] for name, value in batch.items()}
        cls.unrolled = cls.loss_and_grads(scan=False)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()
        super().tearDownClass()

    @classmethod
    def model(cls, scan, remat=None, dtype="float32"):
        model = model_lib.load(cls.path, cls.dims, cls.mesh, dtype, cls.lora, 0, scan)
        model_lib.set_lora(model, cls.factors)
        if remat:
            model_lib.enable_remat(model, True, remat)
        return model

    @classmethod
    def loss_and_grads(cls, scan, remat=None, unroll=1, scan_runs=True):
        """(loss, {per-layer factor name: gradient}) of forward.loss_sum; `unroll`:
        repeats of the block per iteration of the scan's loop (True: all, and the
        block's runs of layers one after another, not scanned)."""
        model = cls.model(scan, remat)
        model.scan_unroll = unroll
        model.scan_runs = scan_runs and unroll is not True
        graphdef, lora, rest = nnx.split(model, nnx.LoRAParam, ...)
        loss, grads = jax.jit(jax.value_and_grad(
            lambda lora: forward.loss_sum(nnx.merge(graphdef, lora, rest), cls.batch)))(lora)
        flat = layer_scan.unstack_flat(model.layer_plan, dict(nnx.to_flat_state(grads)))
        return float(loss), {".".join(map(str, p)): np.asarray(v.get_value())
                             for p, v in flat.items()}

    def assert_close(self, found, exact=False, unrolled=None):
        (loss, grads), (want_loss, want_grads) = found, unrolled or self.unrolled
        self.assertEqual(set(grads), set(want_grads))
        self.assertLen(grads, 10 * 12)  # q, kv (k on global layers), o, gate, up, down: A and B
        if exact:
            self.assertEqual(loss, want_loss)
        self.assertLess(abs(loss - want_loss) / abs(want_loss), LOSS_TOLERANCE)
        for name, want in want_grads.items():
            self.assertGreater(np.max(np.abs(want)), 0, name)
            gap = np.max(np.abs(grads[name] - want)) / np.max(np.abs(want))
            if exact:
                self.assertEqual(gap, 0.0, name)
            self.assertLess(gap, GRAD_TOLERANCE, name)

    def test_base_is_stored_stacked_and_sharded(self):
        model = self.model(scan=True)
        self.assertEqual(model.layer_plan.describe(),
                         "10 layers: a block of 3 scanned over 3 repeats, 1 more unrolled")
        self.assertLen(model.blocks, 2)  # the block's runs: 2 sliding layers, 1 global
        self.assertLen(model.layers, 1)
        unrolled = self.model(scan=False)
        for run, first in ((0, 0), (1, 2)):
            stacked = model.blocks[run].attn.q_einsum.w.get_value()
            self.assertEqual(stacked.sharding.spec, P(None, None, "tp", "fsdp", None))
            self.assertEqual(stacked.shape[:2], (3, 2 - run))
            for repeat in range(3):
                for step in range(2 - run):
                    np.testing.assert_array_equal(
                        stacked[repeat, step],
                        unrolled.layers[3 * repeat + first + step].attn.q_einsum.w.get_value())
        np.testing.assert_array_equal(model.layers[0].mlp.up_proj.kernel.get_value(),
                                      unrolled.layers[9].mlp.up_proj.kernel.get_value())

    def test_fresh_lora_factors_are_the_same_in_both_layouts(self):
        fresh = {}
        for scan in (False, True):
            model = model_lib.load(self.path, self.dims, self.mesh, "float32", self.lora, 0, scan)
            flat = layer_scan.unstack_flat(
                model.layer_plan, dict(nnx.to_flat_state(nnx.state(model, nnx.LoRAParam))))
            fresh[scan] = {p: np.asarray(v.get_value()) for p, v in flat.items()}
        self.assertEqual(set(fresh[True]), set(fresh[False]))
        for path, value in fresh[False].items():
            np.testing.assert_array_equal(fresh[True][path], value)

    def test_scan_unrolled_by_xla_is_bit_exact(self):
        # The same computation: only XLA's compilation of the loop body differs.
        # (Per-layer remat on both sides: without remat the scan keeps only
        # `forward.scanned_saves` and recomputes the rest, which XLA fuses differently.)
        unrolled = self.loss_and_grads(scan=False, remat="layer")
        self.assert_close(self.loss_and_grads(scan=True, remat="layer", unroll=True),
                          exact=True, unrolled=unrolled)

    def test_backward_pass_does_not_rerun_the_attention_kernel(self):
        # `forward.scanned_saves` keeps what splash attention returns: its backward pass
        # then runs the backward kernel alone, as in the unrolled model.
        model = self.model(scan=True)
        forward.configure(model, forward.Attention("splash", block=128), scan_runs=True)
        batch = {name: value[0] for name, value in testing.batch(
            np.random.default_rng(0), 1, 2, 128, self.dims.vocab).items()}
        graphdef, lora, rest = nnx.split(model, nnx.LoRAParam, ...)
        jaxpr = str(jax.make_jaxpr(jax.grad(
            lambda lora: forward.loss_sum(nnx.merge(graphdef, lora, rest), batch)))(lora))
        kernels = re.findall(r"name=splash_mha_(fwd|dkv)", jaxpr)
        # Traced once each: the block's two runs and the layer after it.
        self.assertEqual((kernels.count("fwd"), kernels.count("dkv")), (3, 3))

    def kept_by_scan(self, dtype, scan_runs=True):
        """What the backward pass reads from the forward loop: the stacked (3 repeats)
        arrays that hold a value per token (the model's own variables apart)."""
        model = self.model(scan=True, dtype=dtype)
        model.scan_runs = scan_runs
        graphdef, lora, rest = nnx.split(model, nnx.LoRAParam, ...)
        # The backward function's leaves are what it keeps; traced, not run.
        backward = jax.eval_shape(lambda lora: jax.vjp(
            lambda lora: forward.loss_sum(nnx.merge(graphdef, lora, rest), self.batch),
            lora)[1], lora)
        variables = {x.shape for x in jax.tree.leaves(nnx.state(model))}
        tokens = 3 * self.batch["input_ids"].size
        return [x for x in jax.tree.leaves(backward)
                if x.shape[:1] == (3,) and x.size % tokens == 0 and x.shape not in variables]

    def test_scan_keeps_one_array_per_projection(self):
        # Without remat, per run of the block (its layers stacked in each array): the
        # layer's input, each projection's base matmul output (q, kv or k, o, gate,
        # up, down) and x @ A (rank 8), dense attention's logits and output: 15.
        # (Every matmul's output, dots_saveable, is 37 arrays here: LoRA's second
        # products too.)
        self.assertLen(self.kept_by_scan("float32"), 2 * 15)
        # The block's layers one after another in the loop: 15 per layer.
        self.assertLen(self.kept_by_scan("float32", scan_runs=False), 3 * 15)

    def test_scan_keeps_the_models_dtype(self):
        # LoRA's factors are float32, so a projection's sum (base + LoRA's term) is
        # float32 until it is rounded to bf16 (model._LoraProvider): the scan keeps
        # the base's bf16 output and x @ A instead, and the backward pass adds them
        # again. (Keeping the float32 sums made the 12-layer half-width step on a
        # v5e chip 1.23x the unrolled one.)
        kept = self.kept_by_scan("bfloat16")
        self.assertLen(kept, 2 * 15)
        # The rest are bf16: each layer's input and its 6 projections' base outputs.
        # (x @ A is float32 and rank wide; dense attention's softmax is float32.)
        groups = {(k, self.dims.heads // k) for k in (self.dims.kv_heads,
                                                      self.dims.global_kv_heads)}
        tokens = 3 * self.batch["input_ids"].size
        wide = [x for x in kept if x.size not in (tokens * self.lora.rank,
                                                  2 * tokens * self.lora.rank)
                and x.shape[-3:-1] not in groups]
        self.assertEqual([str(x.dtype) for x in wide], ["bfloat16"] * 2 * 7,
                         [x.shape for x in wide])

    def test_scan_matches_unrolled_within_float32_rounding(self):
        # Each layout of the loop's body (runs of one layer type scanned, or the block's
        # layers one after another: v6e8.py's and v5p16.py's, without remat) and each
        # remat scope, in three compiles, not four.
        self.assert_close(self.loss_and_grads(scan=True, scan_runs=False))
        self.assert_close(self.loss_and_grads(scan=True, remat="layer"))
        self.assert_close(self.loss_and_grads(scan=True, remat="block"))

    def test_checkpoints_resume_in_either_layout(self):
        config = testing.cpu_config(**{"lora.dropout": 0.0})
        rng = np.random.default_rng(2)
        states = {}
        for scan in (False, True):
            config.scan_layers = scan
            state = state_lib.build(self.model(scan), self.mesh, config, 10, self.dims)
            # Moments of their own (Adam's start at zero), each in its sharding.
            state.opt_state = jax.tree.map(
                lambda x: jax.device_put(rng.standard_normal(x.shape).astype(x.dtype),
                                         x.sharding)
                if jax.numpy.issubdtype(x.dtype, jax.numpy.floating) else x, state.opt_state)
            states[scan] = state

        def per_layer(state):
            lora, opt_state = layer_scan.unstack_tree(state.plan, (state.lora, state.opt_state))
            return [np.asarray(x) for x in jax.tree.leaves((lora, opt_state))]

        for written, read in ((False, True), (True, False)):
            with tempfile.TemporaryDirectory() as tmp:
                manager = checkpoints.manager(tmp, keep=1, every_steps=1)
                data = iter(grain.MapDataset.range(4).to_iter_dataset())
                source = states[written]
                self.assertTrue(checkpoints.save(manager, 3, source.lora, source.opt_state,
                                                 data, {"step": 3}, force=True,
                                                 plan=source.plan))
                manager.wait_until_finished()
                # On disk, layer by layer whatever the layout.
                saved = orbax_lora.read(os.path.join(tmp, "3"))
                self.assertEqual(set(saved), set(self.factors))
                target = states[read]
                step, lora, opt_state = checkpoints.restore_latest(
                    manager, target.lora, target.opt_state, data, target.plan)
                self.assertEqual(step, 3)
                restored = dataclasses.replace(target, lora=lora, opt_state=opt_state)
                for got, want in zip(per_layer(restored), per_layer(source), strict=True):
                    np.testing.assert_array_equal(got, want)
                for got, want in zip(jax.tree.leaves((lora, opt_state)),
                                     jax.tree.leaves((target.lora, target.opt_state))):
                    self.assertEqual((got.shape, got.sharding), (want.shape, want.sharding))
                manager.close()

    def test_scanned_layout_refuses_the_unpacked_pass(self):
        model = self.model(scan=True)
        with self.assertRaisesRegex(forward.ForwardError, "scanned layout"):
            model(self.batch["input_ids"], self.batch["positions"])


if __name__ == "__main__":
    absltest.main()
