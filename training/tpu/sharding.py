"""The mesh, and PartitionSpecs for the LoRA factors and the optimizer state.

`make_mesh` is the one constructor of the ("fsdp", "tp") mesh, for training,
the AOT compile, verify and tests: `jax.make_mesh` orders the devices so that
on TPUs each axis follows the chips' interconnect (on CPU the order is the
plain reshape).

Qwix gives a LoRA factor the sharding of its base weight, transposed to the
factor's axes. That can leave a spec whose length differs from the factor's
rank (the reference patched Tunix for exactly this) or an axis that does not
divide the dimension it splits (a rank-8 factor on tp=16). `fit_spec` repairs
both: it pads or trims the spec to the rank and replicates any axis that does
not divide. Optimizer moments follow their parameters; scalars (the step
count) are replicated. `spec_problems` is the check the tests run leaf by leaf.
"""

import jax
import optax
from flax import nnx
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P


AXES = ("fsdp", "tp")


def make_mesh(fsdp, tp, devices=None):
    """The (fsdp, tp) mesh over the first fsdp x tp of `devices` (default: all of them)."""
    return jax.make_mesh((fsdp, tp), AXES, axis_types=(jax.sharding.AxisType.Auto,) * 2,
                         devices=jax.devices() if devices is None else devices)


def _axis_size(mesh, axis):
    if axis is None:
        return 1
    names = axis if isinstance(axis, tuple) else (axis,)
    size = 1
    for name in names:
        size *= mesh.shape[name]
    return size


def fit_spec(spec, shape, mesh):
    """`spec` made valid for an array of `shape` on `mesh`."""
    entries = list(spec)[:len(shape)] + [None] * max(0, len(shape) - len(spec))
    return P(*(axis if axis is not None and dim % _axis_size(mesh, axis) == 0 else None
               for axis, dim in zip(entries, shape)))


def spec_problems(shape, spec, mesh):
    found = []
    if len(spec) != len(shape):
        found.append(f"spec {spec} has {len(spec)} entries for rank {len(shape)}")
    for axis, dim in zip(spec, shape):
        if axis is not None and dim % _axis_size(mesh, axis):
            found.append(f"axis {axis} ({_axis_size(mesh, axis)}) does not divide {dim}")
    return found


def declared_spec(variable):
    """The axis names Qwix/Tunix attached to a variable (metadata or placement)."""
    metadata = variable.get_metadata()
    for key in ("out_sharding", "sharding", "sharding_names"):
        if metadata.get(key):
            return tuple(metadata[key])
    placed = getattr(variable.get_value(), "sharding", None)
    return tuple(placed.spec) if isinstance(placed, NamedSharding) else ()


def lora_shardings(lora_state, mesh):
    """An nnx State of NamedShardings for a State of LoRA factors."""
    def sharding(variable):
        spec = fit_spec(declared_spec(variable), variable.get_value().shape, mesh)
        return variable.replace(NamedSharding(mesh, spec))
    return jax.tree.map(sharding, lora_state, is_leaf=lambda x: isinstance(x, nnx.Variable))


def place(tree, shardings):
    return jax.tree.map(jax.device_put, tree, shardings)


def optimizer_shardings(optimizer, abstract_opt_state, param_shardings, mesh):
    """Moments take their parameter's sharding; everything else is replicated."""
    replicated = NamedSharding(mesh, P())
    return optax.tree_map_params(
        optimizer, lambda _, sharding: sharding, abstract_opt_state, param_shardings,
        transform_non_params=lambda leaf: replicated)


def tree_problems(tree, shardings):
    """(path, problem) for every leaf whose sharding does not fit it."""
    found = []
    leaves = jax.tree_util.tree_leaves_with_path(tree)
    specs = jax.tree.leaves(shardings, is_leaf=lambda x: isinstance(x, NamedSharding))
    if len(leaves) != len(specs):
        return [("<tree>", f"{len(leaves)} leaves but {len(specs)} shardings")]
    for (path, leaf), sharding in zip(leaves, specs):
        for problem in spec_problems(leaf.shape, sharding.spec, sharding.mesh):
            found.append((jax.tree_util.keystr(path), problem))
    return found
