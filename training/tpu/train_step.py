"""One optimizer step over an effective batch, jitted once with explicit shardings.

The batch arrives as [accumulation, micro-batch, T] arrays (data/packing.py's
fields), and `lax.scan` walks the micro-batches, summing gradients. The loss
is the cross-entropy summed over trained tokens divided by the trained tokens
of the *whole effective batch*, the definition both stacks share
(training/common/recipe.md: Tunix's default averaged per-micro-batch means instead).

The forward pass and the loss are training/tpu/forward.py's: attention never
crosses segments (dense or splash kernel, `forward.Attention` on the model),
positions restart per segment, and logits may be made in chunks (`loss_chunk`).
"""

import dataclasses
import functools

import jax
import jax.numpy as jnp
import optax
from flax import nnx

from common import cli
from training.tpu import forward
from training.tpu import model as model_lib


class StepError(cli.UserError):
    pass


def step_key(config, step):
    """The key of optimizer step `step` (LoRA dropout's masks come from it): `step`
    folded into the key of `config.seed`, of `config.dropout_rng`'s implementation."""
    try:
        seed = jax.random.key(config.seed, impl=config.dropout_rng)
    except ValueError as e:  # JAX names the implementations it has
        raise StepError(f"config.dropout_rng={config.dropout_rng!r}: {e}") from None
    return jax.random.fold_in(seed, step)


@dataclasses.dataclass(frozen=True)
class StepFunctions:
    train: object  # (lora, opt_state, base, rngs, batch, key) -> (lora, opt_state, metrics)
    loss: object  # (lora, base, rngs, batch, key) -> summed loss / trained tokens
    evaluate: object  # (lora, base, batch) -> (summed loss, trained tokens), no dropout


def make_step(graphdef, optimizer, *, lora_shardings, opt_shardings, batch_sharding,
              eval_model, loss_chunk=0):
    """The jitted train step (donating LoRA and optimizer state), its loss, and the
    validation loss; `loss_chunk` as forward.loss_sum's `chunk`. `eval_model()`
    gives (graphdef, rng state) of the same model without dropout, since Qwix's
    LoRA dropout has no deterministic mode."""

    def accumulate(lora, base, rngs, batch, key):
        trained = jnp.sum(batch["loss_mask"][:, :, 1:]).astype(jnp.float32)
        denominator = jnp.maximum(trained, 1.0)

        def micro_step(grads, inputs):
            micro_batch, index = inputs
            micro_rngs = model_lib.dropout_keys(rngs, jax.random.fold_in(key, index))

            def loss_fn(lora):
                model = nnx.merge(graphdef, lora, micro_rngs, base)
                return forward.loss_sum(model, micro_batch, loss_chunk) / denominator

            loss, micro_grads = jax.value_and_grad(loss_fn)(lora)
            return jax.tree.map(jnp.add, grads, micro_grads), loss

        steps = batch["input_ids"].shape[0]
        zeros = jax.tree.map(jnp.zeros_like, lora)
        grads, losses = jax.lax.scan(micro_step, zeros, (batch, jnp.arange(steps)))
        return jnp.sum(losses), grads, trained

    def train(lora, opt_state, base, rngs, batch, key):
        loss, grads, trained = accumulate(lora, base, rngs, batch, key)
        updates, opt_state = optimizer.update(grads, opt_state, lora)
        lora = optax.apply_updates(lora, updates)
        metrics = {"loss": loss, "grad_norm": optax.global_norm(grads),
                   "trained_tokens": trained,
                   "tokens": jnp.sum(batch["segment_ids"] > 0).astype(jnp.float32)}
        return lora, opt_state, metrics

    def loss(lora, base, rngs, batch, key):
        return accumulate(lora, base, rngs, batch, key)[0]

    def evaluate(eval_graphdef, eval_rngs, lora, base, batch):
        def micro_step(total, micro_batch):
            model = nnx.merge(eval_graphdef, lora, eval_rngs, base)
            return total + forward.loss_sum(model, micro_batch, loss_chunk), None

        total, _ = jax.lax.scan(micro_step, jnp.zeros((), jnp.float32), batch)
        return total, jnp.sum(batch["loss_mask"][:, :, 1:]).astype(jnp.float32)

    replicated = jax.sharding.NamedSharding(batch_sharding.mesh, jax.sharding.PartitionSpec())
    train_jit = jax.jit(
        train,
        in_shardings=(lora_shardings, opt_shardings, None, None, batch_sharding, replicated),
        out_shardings=(lora_shardings, opt_shardings, replicated),
        donate_argnums=(0, 1))
    jitted = []

    def evaluate_call(lora, base, batch):
        if not jitted:  # the twin is made on first use, outside any trace
            jitted.append(jax.jit(functools.partial(evaluate, *eval_model()),
                                  in_shardings=(lora_shardings, None, batch_sharding),
                                  out_shardings=(replicated, replicated)))
        return jitted[0](lora, base, batch)

    return StepFunctions(train=train_jit, loss=jax.jit(loss), evaluate=evaluate_call)
