import jax.numpy as jnp
import numpy as np
import optax
from absl.testing import absltest

from training.common import hparams
from training.common import schedule
from training.tpu import optimizer


class OptimizerTest(absltest.TestCase):

    def test_schedule_matches_the_shared_definition(self):
        config = hparams.reference().optimizer
        rate = optimizer.learning_rate_schedule(config, 1244)
        for step in (0, 1, 50, 99, 100, 101, 600, 1243, 1244):
            np.testing.assert_allclose(float(rate(jnp.asarray(step))),
                                       schedule.learning_rate(step, 1e-4, 100, 1244),
                                       rtol=1e-6, atol=1e-12)
        self.assertEqual(schedule.learning_rate(0, 1e-4, 100, 1244), 0.0)
        self.assertEqual(schedule.learning_rate(100, 1e-4, 100, 1244), 1e-4)
        self.assertAlmostEqual(schedule.learning_rate(1244, 1e-4, 100, 1244), 0.0)

    def test_adamw_step_by_hand(self):
        config = hparams.reference().optimizer
        config.warmup_steps = 0
        tx = optimizer.make_optimizer(config, total_steps=10)
        params = {"w": jnp.asarray([1.0, -2.0])}
        grads = {"w": jnp.asarray([0.5, 0.25])}
        updates, _ = tx.update(grads, tx.init(params), params)
        # First step: m_hat = g, v_hat = g^2, so the Adam direction is g/(|g| + eps).
        lr = 1e-4
        want = -lr * (np.sign([0.5, 0.25]) / (1 + 1e-8 / np.abs([0.5, 0.25]))
                      + 0.001 * np.asarray([1.0, -2.0]))
        np.testing.assert_allclose(np.asarray(updates["w"]), want, rtol=1e-5)  # float32

    def test_clipping_is_optional(self):
        config = hparams.reference().optimizer
        config.warmup_steps = 0
        params = {"w": jnp.zeros(3)}
        grads = {"w": jnp.full(3, 100.0)}
        plain = optimizer.make_optimizer(config, 10)
        self.assertLen(plain.init(params), 1)  # adamw only
        config.max_grad_norm = 1.0
        clipped = optimizer.make_optimizer(config, 10)
        self.assertLen(clipped.init(params), 2)  # clip, then adamw
        self.assertIsInstance(clipped.init(params)[0], optax.EmptyState)
        # Adam normalizes the scale away, but clipping changes the moments it keeps.
        _, plain_state = plain.update(grads, plain.init(params), params)
        _, clipped_state = clipped.update(grads, clipped.init(params), params)
        self.assertAlmostEqual(float(plain_state[0][0].mu["w"][0]), 10.0, places=4)
        self.assertAlmostEqual(float(clipped_state[1][0].mu["w"][0]), 0.1 / np.sqrt(3),
                               places=6)


if __name__ == "__main__":
    absltest.main()
