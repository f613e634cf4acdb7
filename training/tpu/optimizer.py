"""Optax AdamW with the shared schedule, optional global-norm clipping.

Optax's `adamw` and torch's `AdamW` agree term by term (the GPU stack relies on
it): bias-corrected moments, epsilon added outside the square root
(m_hat / (sqrt(v_hat) + eps)), and decoupled weight decay scaled by the
learning rate (p -= lr * (update + wd * p), which torch writes as
p *= 1 - lr * wd before the Adam step).
"""

import jax.numpy as jnp
import optax

from training.common import hparams


def learning_rate_schedule(optimizer_config, total_steps):
    peak = optimizer_config.learning_rate
    warmup = hparams.warmup_steps(optimizer_config, total_steps)
    end = optimizer_config.end_learning_rate
    decay = max(total_steps - warmup, 1)

    def rate(step):
        # The traceable twin of training/common/schedule.py (optimizer_test
        # checks that they agree at every step).
        warm = peak * step / max(warmup, 1)
        progress = jnp.clip((step - warmup) / decay, 0.0, 1.0)
        cosine = end + (peak - end) * 0.5 * (1.0 + jnp.cos(jnp.pi * progress))
        return jnp.where(step < warmup, warm, cosine)

    return rate


def make_optimizer(optimizer_config, total_steps):
    parts = []
    if optimizer_config.max_grad_norm > 0:
        parts.append(optax.clip_by_global_norm(optimizer_config.max_grad_norm))
    parts.append(optax.adamw(
        learning_rate_schedule(optimizer_config, total_steps),
        b1=optimizer_config.b1, b2=optimizer_config.b2, eps=optimizer_config.eps,
        weight_decay=optimizer_config.weight_decay))
    return optax.chain(*parts)
