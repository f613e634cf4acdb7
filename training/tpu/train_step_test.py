import jax
import jax.numpy as jnp
import numpy as np
from absl.testing import absltest

from training.tpu import testing  # sets up 8 CPU devices first
# pylint: disable=wrong-import-order
from training.tpu import forward
from training.tpu import model as model_lib
from training.tpu import train_step
from training.tpu import trainer


class LossTest(absltest.TestCase):

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        path, cls.dims = testing.tiny_checkpoint(absltest.get_default_test_tmpdir())
        cls.mesh = testing.mesh(1, 1)
        cls.model = model_lib.load_base(path, cls.dims, cls.mesh, "float32")

    def test_packed_segments_lose_exactly_what_separate_rows_lose(self):
        rng = np.random.default_rng(0)
        # Both longer than the sliding window (16), so local layers see a cut-off.
        a, b = rng.integers(5, 1000, 21), rng.integers(5, 1000, 27)
        length = 64

        def row(pieces):
            ids = np.zeros(length, np.int32)
            segments = np.zeros(length, np.int32)
            positions = np.zeros(length, np.int32)
            start = 0
            for number, piece in enumerate(pieces, start=1):
                ids[start:start + len(piece)] = piece
                segments[start:start + len(piece)] = number
                positions[start:start + len(piece)] = np.arange(len(piece))
                start += len(piece)
            mask = (segments > 0).astype(np.int32)
            mask[[0, len(pieces[0])] if len(pieces) > 1 else [0]] = 0
            return {"input_ids": ids, "segment_ids": segments, "positions": positions,
                    "loss_mask": mask}

        def loss(rows):
            batch = {k: jnp.asarray(np.stack([r[k] for r in rows])) for k in rows[0]}
            return float(forward.loss_sum(self.model, batch))

        packed = loss([row([a, b])])
        separate = loss([row([a])]) + loss([row([b])])
        self.assertAlmostEqual(packed, separate, delta=1e-4 * abs(separate))

    def test_loss_is_normalized_over_the_whole_effective_batch(self):
        config = testing.cpu_config(**{"lora.dropout": 0.0, "mesh.fsdp": 1, "mesh.tp": 1})
        path, dims = testing.tiny_checkpoint(self.create_tempdir().full_path)
        state = trainer.load_state(path, dims, self.mesh, config, total_steps=10)
        rng = np.random.default_rng(1)
        batch = testing.batch(rng, accumulation=3, micro_batch=2, seq_len=32, vocab=dims.vocab)
        batch["loss_mask"][1] = 0  # an accumulation step with nothing to train
        batch["loss_mask"][2, :, 5:9] = 1
        key = jax.random.key(0)
        got = float(state.step.loss(state.lora, state.base, state.rngs,
                                    jax.tree.map(jnp.asarray, batch), key))
        total = batch["loss_mask"][:, :, 1:].sum()
        sums = [float(state.step.loss(state.lora, state.base, state.rngs,
                                      jax.tree.map(lambda x, i=i: jnp.asarray(x[i:i + 1]), batch),
                                      key)) * max(batch["loss_mask"][i, :, 1:].sum(), 1)
                for i in range(3)]
        self.assertAlmostEqual(got, sum(sums) / total, delta=1e-5)


    def test_validation_loss_is_deterministic_and_ignores_dropout(self):
        # Qwix's LoRA dropout always drops: the validation loss goes through a twin
        # of the model without it, and equals the dropout-free model's summed loss.
        path, dims = testing.tiny_checkpoint(self.create_tempdir().full_path)
        rng = np.random.default_rng(2)
        batch = jax.tree.map(jnp.asarray, testing.batch(rng, accumulation=2, micro_batch=2,
                                                        seq_len=32, vocab=dims.vocab))
        results = {}
        for dropout in (0.0, 0.5):
            config = testing.cpu_config(**{"lora.dropout": dropout, "mesh.fsdp": 1,
                                           "mesh.tp": 1})
            state = trainer.load_state(path, dims, self.mesh, config, total_steps=10)
            # A LoRA that changes the output, the same for both configs.
            lora = jax.tree.map(lambda x: x + 0.05, state.lora)
            results[dropout] = [tuple(map(float, state.step.evaluate(lora, state.base, batch)))
                                for _ in range(2)]
            if dropout:  # the training loss does drop out: it differs from the validation's
                loss = float(state.step.loss(lora, state.base, state.rngs, batch,
                                             jax.random.key(0)))
                total, trained = results[dropout][0]
                self.assertGreater(abs(loss - total / trained), 1e-4)
        self.assertEqual(results[0.5][0], results[0.5][1])
        np.testing.assert_allclose(results[0.5][0], results[0.0][0], rtol=1e-6)
        self.assertEqual(results[0.0][0][1], float(np.asarray(batch["loss_mask"])[:, :, 1:].sum()))


class StepKeyTest(absltest.TestCase):

    def test_dropout_masks_come_from_the_configured_generator(self):
        path, dims = testing.tiny_checkpoint(self.create_tempdir().full_path)
        batch = jax.tree.map(jnp.asarray, testing.batch(
            np.random.default_rng(3), accumulation=1, micro_batch=2, seq_len=32,
            vocab=dims.vocab))
        losses = {}
        for rng in ("rbg", "threefry2x32"):
            config = testing.cpu_config(**{"lora.dropout": 0.5, "mesh.fsdp": 1, "mesh.tp": 1,
                                           "dropout_rng": rng})
            state = trainer.load_state(path, dims, testing.mesh(1, 1), config, total_steps=10)
            lora = jax.tree.map(lambda x: x + 0.05, state.lora)  # B != 0: dropout shows

            def loss(step, config=config, state=state, lora=lora):
                key = train_step.step_key(config, step)
                self.assertEqual(str(jax.random.key_impl(key)), rng)
                return float(state.step.loss(lora, state.base, state.rngs, batch, key))

            losses[rng] = [loss(0), loss(0), loss(1)]
            self.assertEqual(losses[rng][0], losses[rng][1])  # a step's masks are fixed
            self.assertNotEqual(losses[rng][0], losses[rng][2])  # and differ across steps
        # The same seed and step, another generator: other masks.
        self.assertNotEqual(losses["rbg"][0], losses["threefry2x32"][0])

    def test_threefry_keys_are_jax_defaults_folded_by_step(self):
        config = testing.cpu_config(**{"dropout_rng": "threefry2x32", "seed": 7})
        expected = jax.random.fold_in(jax.random.key(7), 12)
        np.testing.assert_array_equal(jax.random.key_data(train_step.step_key(config, 12)),
                                      jax.random.key_data(expected))

    def test_an_unknown_generator_is_refused_by_name(self):
        config = testing.cpu_config(**{"dropout_rng": "mersenne"})
        with self.assertRaisesRegex(train_step.StepError,
                                    r"config\.dropout_rng='mersenne'.*threefry2x32"):
            train_step.step_key(config, 0)


if __name__ == "__main__":
    absltest.main()
