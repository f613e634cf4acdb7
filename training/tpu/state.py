"""The TPU training state, built one way for training and for the AOT compile.

`build` takes a Tunix Gemma 4 with Qwix LoRA factors and a mesh, and returns
what the step needs: the LoRA factors and the optimizer state, each with its
sharding, the frozen base, the RNG state, the batch sharding and the jitted
step. The model is either loaded (`model.load`: concrete arrays, for training)
or abstract (`abstract_model` here: shapes only, for //training/tpu:compile);
with an abstract model every leaf of the state is a `jax.ShapeDtypeStruct`
carrying its sharding, ready for `state.step.train.lower(...)`. As MaxText's
train_compile lowers the trainer's own state, the compile thus lowers exactly
the step training runs: remat, the attention kernel, LoRA and optimizer
shardings, the batch sharding and the loss are set here and nowhere else.
"""

import dataclasses

import jax
import jax.numpy as jnp
from flax import nnx
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from data import packing
from training.tpu import forward
from training.tpu import layer_scan
from training.tpu import mesh_plan
from training.tpu import model as model_lib
from training.tpu import optimizer as optimizer_lib
from training.tpu import sharding
from training.tpu import train_step


@dataclasses.dataclass
class State:
    """What the loop needs: sharded LoRA and optimizer state, the frozen base, the step."""
    lora: object
    opt_state: object
    base: object
    rngs: object
    lora_shardings: object
    opt_shardings: object
    batch_sharding: object
    step: train_step.StepFunctions
    plan: layer_scan.Plan  # the model's layer layout (training/tpu/layer_scan.py)


def abstract_model(dims, config):
    """The config's model with LoRA as shapes only, in the config's layer layout."""
    return model_lib.abstract_model(dims, config.model.dtype, config.lora, config.scan_layers)


def _is_abstract(tree):
    return any(isinstance(leaf, jax.ShapeDtypeStruct) for leaf in jax.tree.leaves(tree))


def _abstract(tree, shardings):
    return jax.tree.map(
        lambda x, sharding: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=sharding),
        tree, shardings)


def _configure(model, config, mesh):
    model_lib.enable_remat(model, config.remat, config.remat_scope)
    forward.configure(model, forward.Attention.on_mesh(config.attention.kernel,
                                                       config.attention.block, mesh),
                      scan_runs=config.scan_runs)


def _without_dropout(dims, config, mesh):
    """(graphdef, rng state) of the config's model with LoRA dropout 0: the same LoRA
    and base state evaluate through it deterministically."""
    lora = config.lora.copy_and_resolve_references()
    lora.dropout = 0.0
    model = model_lib.abstract_model(dims, config.model.dtype, lora, config.scan_layers)
    _configure(model, config, mesh)
    with jax.set_mesh(mesh):
        graphdef, _, rngs, _ = nnx.split(model, nnx.LoRAParam, nnx.RngState, ...)
    return graphdef, rngs


def build(model, mesh, config, total_steps, dims):
    """The state of `config`'s step for `model` (loaded or abstract) on `mesh`."""
    _configure(model, config, mesh)
    with jax.set_mesh(mesh):
        graphdef, lora, rngs, base = nnx.split(model, nnx.LoRAParam, nnx.RngState, ...)
    optimizer = optimizer_lib.make_optimizer(config.optimizer, total_steps)
    lora_shardings = sharding.lora_shardings(lora, mesh)
    opt_shapes = jax.eval_shape(optimizer.init, lora)
    opt_shardings = sharding.optimizer_shardings(optimizer, opt_shapes, lora_shardings, mesh)
    if _is_abstract((lora, base)):  # no LoRA factors at all: a model without layers
        replicated = NamedSharding(mesh, P())
        lora = _abstract(lora, lora_shardings)
        opt_state = _abstract(opt_shapes, opt_shardings)
        base = _abstract(base, nnx.get_named_sharding(base, mesh))
        rngs = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype,
                                                           sharding=replicated), rngs)
    else:
        lora = sharding.place(lora, lora_shardings)
        opt_state = jax.jit(optimizer.init, out_shardings=opt_shardings)(lora)
    batch_sharding = NamedSharding(mesh, P(None, "fsdp", None))

    def eval_model():  # made when the validation loss is first computed
        if config.lora.dropout > 0:
            return _without_dropout(dims, config, mesh)
        return graphdef, rngs

    step = train_step.make_step(graphdef, optimizer, lora_shardings=lora_shardings,
                                opt_shardings=opt_shardings, batch_sharding=batch_sharding,
                                loss_chunk=config.loss_chunk, eval_model=eval_model)
    return State(lora, opt_state, base, rngs, lora_shardings, opt_shardings, batch_sharding,
                 step, model.layer_plan)


def abstract_inputs(state, config):
    """The batch and step key of `config`'s step as shapes, for lowering `state.step`."""
    replicated = NamedSharding(state.batch_sharding.mesh, P())
    batch = {name: jax.ShapeDtypeStruct(mesh_plan.batch_shape(config), jnp.int32,
                                        sharding=state.batch_sharding)
             for name in packing.FIELDS}
    key = jax.eval_shape(lambda: train_step.step_key(config, 0))
    return batch, jax.ShapeDtypeStruct(key.shape, key.dtype, sharding=replicated)
