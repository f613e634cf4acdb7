"""LoRA and optimizer sharding on meshes (2,4), (4,2), (8,1), (1,8) of 8 CPU devices."""

import jax
import numpy as np
from absl.testing import absltest
from absl.testing import parameterized
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from training.tpu import testing  # sets up 8 CPU devices first
# pylint: disable=wrong-import-order
from training.tpu import mesh_plan
from training.tpu import sharding
from training.tpu import trainer

MESHES = ((2, 4), (4, 2), (8, 1), (1, 8))
# Head counts chosen so that some meshes are invalid: tp=8 never divides the
# KV heads; tp=4 does not divide "narrow"'s 2 global KV heads.
MODELS = {
    "wide": dict(num_attention_heads=8, num_key_value_heads=4, num_global_key_value_heads=4),
    "narrow": dict(num_attention_heads=8, num_key_value_heads=2, num_global_key_value_heads=2),
}


class FitSpecTest(absltest.TestCase):

    def test_pads_trims_and_replicates_indivisible_axes(self):
        mesh = testing.mesh(2, 4)
        self.assertEqual(sharding.fit_spec(("tp",), (8, 3, 5), mesh), P("tp", None, None))
        self.assertEqual(sharding.fit_spec((None, "tp", "fsdp", None), (4, 8), mesh),
                         P(None, "tp"))
        self.assertEqual(sharding.fit_spec(("fsdp", "tp"), (6, 6), mesh), P("fsdp", None))
        self.assertEqual(sharding.spec_problems((6,), P("tp"), mesh),
                         ["axis tp (4) does not divide 6"])
        (problem,) = sharding.spec_problems((6, 4), P("fsdp"), mesh)
        self.assertIn("has 1 entries for rank 2", problem)


class MeshShardingTest(parameterized.TestCase):

    @parameterized.product(model=list(MODELS), mesh_shape=MESHES)
    def test_specs_and_a_jitted_step(self, model, mesh_shape):
        path, dims = testing.tiny_checkpoint(self.create_tempdir().full_path, **MODELS[model])
        shape = mesh_plan.Mesh(*mesh_shape)
        problems = mesh_plan.problems(shape, dims, 8)
        mesh = testing.mesh(*mesh_shape)
        config = testing.cpu_config(**{"mesh.fsdp": shape.fsdp, "mesh.tp": shape.tp,
                                       "batch.effective_size": 2 * shape.fsdp,
                                       "optimizer.warmup_steps": 0})
        if problems:
            # The plan's verdict matches what sharding the real model does.
            with self.assertRaisesRegex(ValueError, "divide"):
                trainer.load_state(path, dims, mesh, config, total_steps=4)
            return
        state = trainer.load_state(path, dims, mesh, config, total_steps=4)
        lora_leaves = jax.tree.leaves(state.lora)
        self.assertNotEmpty(lora_leaves)
        for leaf in lora_leaves:  # placed as planned, leaf by leaf
            self.assertEqual(sharding.spec_problems(leaf.shape, leaf.sharding.spec, mesh), [])
        self.assertEqual(sharding.tree_problems(state.lora, state.lora_shardings), [])
        self.assertEqual(sharding.tree_problems(state.opt_state, state.opt_shardings), [])
        for leaf in jax.tree.leaves(state.opt_state):
            self.assertIsInstance(leaf.sharding, NamedSharding)
            self.assertLen(leaf.sharding.spec, leaf.ndim)
        # Moments live exactly where their parameters do.
        mu = state.opt_state[0][0].mu
        for param, moment in zip(jax.tree.leaves(state.lora), jax.tree.leaves(mu)):
            self.assertEqual(param.sharding.spec, moment.sharding.spec)

        if 1 in mesh_shape or (model, mesh_shape) == ("wide", (4, 2)):
            # The step is compiled where both axes shard, once per mesh (~45 s each):
            # "wide" on 2 x 4, "narrow" on 4 x 2 (tp=2: 4 query heads per KV head on
            # a shard, as on 31B's global layers).
            return
        rng = np.random.default_rng(0)
        batch = testing.batch(rng, accumulation=1, micro_batch=2 * shape.fsdp, seq_len=32,
                              vocab=dims.vocab)
        batch = {k: jax.device_put(v, state.batch_sharding) for k, v in batch.items()}
        before = [np.asarray(x) for x in jax.tree.leaves(state.lora)]
        lora, opt_state, metrics = state.step.train(
            state.lora, state.opt_state, state.base, state.rngs, batch, jax.random.key(0))
        self.assertTrue(np.isfinite(float(metrics["loss"])))
        self.assertEqual(sharding.tree_problems(lora, state.lora_shardings), [])
        changed = [not np.array_equal(a, np.asarray(b))
                   for a, b in zip(before, jax.tree.leaves(lora))]
        self.assertTrue(any(changed))
        del opt_state


if __name__ == "__main__":
    absltest.main()
