"""Orbax checkpoints of a TPU run: LoRA factors, optimizer state, step, data position.

Layout under RUN_DIR/checkpoints/STEP/:
  lora/       the LoRA factors (an nnx State; conversion reads it without a model)
  optimizer/  the Optax state
  data/       the Grain iterator state, one JSON file per JAX process
  meta/       step, LoRA rank/alpha/targets and the base model's fingerprint,
              checked on resume so that a checkpoint of another run is refused
Saves are asynchronous where Orbax allows; the manager keeps the newest K.

LoRA factors and optimizer moments are saved layer by layer (`layers.I...`)
whatever the run's layer layout: a scanned run (training/tpu/layer_scan.py)
unstacks them on save and stacks them on restore, so a checkpoint resumes in
either layout and conversion reads every checkpoint alike.
"""

import functools

import jax
import orbax.checkpoint as ocp
from grain import checkpoint as grain_checkpoint

from training.common import lifecycle
from training.tpu import layer_scan


@functools.cache
def _unstacker(plan):
    return jax.jit(functools.partial(layer_scan.unstack_tree, plan))


def _stacked(plan, tree, like):
    """`tree` (per layer) in `plan`'s layout, each array sharded as its twin in `like`."""
    if not plan.repeats:
        return tree
    shardings = jax.tree.map(lambda x: x.sharding, like)
    return jax.jit(functools.partial(layer_scan.stack_tree, plan), out_shardings=shardings)(tree)


def manager(directory, keep, every_steps):
    options = ocp.CheckpointManagerOptions(
        max_to_keep=keep, save_interval_steps=every_steps, enable_async_checkpointing=True,
        create=True)
    return ocp.CheckpointManager(directory, options=options)


def save(checkpoints, step, lora, opt_state, data_iterator, meta, force=False,
         plan=layer_scan.Plan(0)):
    """Saves when the manager's interval (or `force`) says so; `plan`: the layout of
    `lora` and `opt_state`, saved per layer. Returns whether it saved."""
    if not (force or checkpoints.should_save(step)):
        return False
    if plan.repeats:
        lora, opt_state = _unstacker(plan)((lora, opt_state))
    return checkpoints.save(step, args=ocp.args.Composite(
        lora=ocp.args.StandardSave(lora),
        optimizer=ocp.args.StandardSave(opt_state),
        data=grain_checkpoint.CheckpointSave(data_iterator),
        meta=ocp.args.JsonSave(meta)), force=force)


def _abstract(tree):
    return jax.tree.map(
        lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding), tree)


def check_latest(checkpoints, expected_meta):
    """Refuses a newest checkpoint made with another model or LoRA shape (cheap:
    reads its metadata only, so it runs before any weight is loaded)."""
    step = checkpoints.latest_step()
    if step is not None:
        meta = checkpoints.restore(
            step, args=ocp.args.Composite(meta=ocp.args.JsonRestore()))["meta"]
        lifecycle.check_compatible(meta, expected_meta, f"{checkpoints.directory}/{step}")


def restore_latest(checkpoints, lora, opt_state, data_iterator, plan=layer_scan.Plan(0)):
    """(step, lora, opt_state) from the newest checkpoint, or None when there is none.

    `lora` and `opt_state` give the structure, shapes and shardings to restore
    into, in `plan`'s layout; `data_iterator` is moved to the saved position in
    place. Call check_latest first.
    """
    step = checkpoints.latest_step()
    if step is None:
        return None
    templates = layer_scan.unstack_tree(plan, _abstract((lora, opt_state)))
    restored = checkpoints.restore(step, args=ocp.args.Composite(
        lora=ocp.args.StandardRestore(templates[0]),
        optimizer=ocp.args.StandardRestore(templates[1]),
        data=grain_checkpoint.CheckpointRestore(data_iterator)))
    lora, opt_state = _stacked(plan, (restored["lora"], restored["optimizer"]),
                               (lora, opt_state))
    return step, lora, opt_state
