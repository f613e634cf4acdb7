"""Gemma 4's repeating block of decoder layers, stored stacked and run under one scan.

Gemma 4 31B's 60 decoder layers are 10 repeats of one block: 5 sliding-window
layers and 1 global layer. Unrolled, XLA compiles each of the 60 layers; under
`jax.lax.scan` over the repeats it compiles the block once (MaxText's
`scan_layers`, over a block as it does for Gemma 3's alternating layers).

`Plan.of(layer_types)` finds the block: the period p and the repeats R that
cover the most layers from the first one (ties: the shortest block). Layers
after the last repeat (a tiny model whose last layer is forced global, a
`--layers` subset) run unrolled after the scan. Fewer than 2 repeats: nothing
is scanned.

In the scanned layout (`stack_module`) the model holds
  blocks.J   block position J (0 <= J < p): one decoder layer whose every
             variable has a leading axis of R, layer r * p + J at index r
  layers.K   the unscanned layers, layer R * p + K
so the base weights are stored stacked (stacking them inside the step would
copy the base at every step) and sharded as before, the leading axis
replicated. LoRA factors, their optimizer moments and the dropout keys are
stacked alike, since they live on the same modules.

Nothing outside the training step sees this layout: checkpoints, `init_from`,
conversion and export name layers one by one (`layers.I`), and
`stack_flat` / `unstack_flat` convert at those boundaries, so a checkpoint
written by an unrolled run resumes scanned and the other way round.
"""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

_SHARDING_KEYS = ("out_sharding", "sharding", "sharding_names")


@dataclasses.dataclass(frozen=True)
class Plan:
    """Layers 0 .. period x repeats - 1 run scanned, block by block; the rest unrolled."""
    num_layers: int
    period: int = 1
    repeats: int = 0

    @classmethod
    def of(cls, layer_types, scan=True):
        """The longest-covering repeating block of `layer_types` (none when `scan` is off
        or no block repeats twice)."""
        types = tuple(layer_types)
        best = cls(len(types))
        if not scan:
            return best
        for period in range(1, len(types) // 2 + 1):
            repeats = 1
            while ((repeats + 1) * period <= len(types)
                   and types[repeats * period:(repeats + 1) * period] == types[:period]):
                repeats += 1
            if repeats >= 2 and repeats * period > best.scanned:
                best = cls(len(types), period, repeats)
        return best

    @property
    def scanned(self):
        """How many layers run under the scan."""
        return self.period * self.repeats

    def locate(self, path):
        """A per-layer path (`("layers", I, ...)`) -> (its path in this layout, the
        repeat index in its stacked arrays, or None); other paths stay as they are."""
        if len(path) < 2 or path[0] != "layers":
            return tuple(path), None
        index = int(path[1])
        if index < self.scanned:
            return ("blocks", index % self.period, *path[2:]), index // self.period
        return ("layers", index - self.scanned, *path[2:]), None

    def layer_path(self, path, repeat):
        """The inverse of `locate`: a path of this layout (and repeat) -> per-layer path."""
        if path[0] == "blocks":
            return ("layers", repeat * self.period + int(path[1]), *path[2:])
        if path[0] == "layers":
            return ("layers", self.scanned + int(path[1]), *path[2:])
        return tuple(path)

    def describe(self):
        if not self.repeats:
            return f"{self.num_layers} layers unrolled"
        rest = self.num_layers - self.scanned
        return (f"{self.num_layers} layers: a block of {self.period} scanned over "
                f"{self.repeats} repeats" + (f", {rest} more unrolled" if rest else ""))


def _stack_values(values):
    first = values[0]
    if isinstance(first, jax.ShapeDtypeStruct):
        return jax.ShapeDtypeStruct((len(values), *first.shape), first.dtype,
                                    sharding=_with_leading_axis(first.sharding, True))
    if isinstance(first, np.ndarray):
        return np.stack(values)
    return jnp.stack(values)


def _take(value, repeat):
    if isinstance(value, jax.ShapeDtypeStruct):
        return jax.ShapeDtypeStruct(value.shape[1:], value.dtype,
                                    sharding=_with_leading_axis(value.sharding, False))
    return value[repeat]


def _with_leading_axis(sharding, add):
    """A NamedSharding with a replicated leading axis added (or dropped)."""
    if not isinstance(sharding, NamedSharding):
        return sharding
    spec = tuple(sharding.spec)
    return NamedSharding(sharding.mesh, P(None, *spec) if add else P(*spec[1:]))


def _respec(variable, value, add):
    """`variable` holding `value`, its declared sharding given (or rid of) the leading
    axis, so that placement and checkpoints read the right spec."""
    new = variable.replace(value)
    for key in _SHARDING_KEYS:
        spec = variable.get_metadata().get(key)
        if spec:
            new.set_metadata(key, (None, *spec) if add else tuple(spec)[1:])
    return new


def _stack_leaves(leaves):
    if isinstance(leaves[0], nnx.Variable):
        return _respec(leaves[0], _stack_values([v.get_value() for v in leaves]), True)
    return _stack_values(leaves)


def _take_leaf(leaf, repeat):
    if isinstance(leaf, nnx.Variable):
        return _respec(leaf, _take(leaf.get_value(), repeat), False)
    return _take(leaf, repeat)


def stack_flat(plan, flat):
    """{per-layer path: leaf} -> {path of `plan`'s layout: leaf}, the repeats of each block
    position stacked (arrays, numpy arrays, shapes or Variables of them)."""
    groups = {}
    for path, leaf in flat.items():
        target, repeat = plan.locate(tuple(path))
        groups.setdefault(target, {})[repeat] = leaf
    out = {}
    for target, members in groups.items():
        if None in members:
            out[target] = members[None]
        elif sorted(members) != list(range(plan.repeats)):
            raise ValueError(f"{'.'.join(map(str, target))}: repeats {sorted(members)} of "
                             f"{plan.repeats}")
        else:
            out[target] = _stack_leaves([members[r] for r in range(plan.repeats)])
    return out


def unstack_flat(plan, flat):
    """The inverse of `stack_flat`."""
    out = {}
    for path, leaf in flat.items():
        path = tuple(path)
        if path[0] == "blocks":
            for repeat in range(plan.repeats):
                out[plan.layer_path(path, repeat)] = _take_leaf(leaf, repeat)
        else:
            out[plan.layer_path(path, None)] = leaf
    return out


def _map_states(function, tree):
    def convert(node):
        if not isinstance(node, nnx.State):
            return node
        return nnx.from_flat_state(function(dict(nnx.to_flat_state(node))))
    return jax.tree.map(convert, tree, is_leaf=lambda x: isinstance(x, nnx.State))


def stack_tree(plan, tree):
    """Every nnx State in `tree` (LoRA factors, optimizer moments) from the per-layer
    layout to `plan`'s; jit it for sharded arrays."""
    if not plan.repeats:
        return tree
    return _map_states(lambda flat: stack_flat(plan, flat), tree)


def unstack_tree(plan, tree):
    """The inverse of `stack_tree`."""
    if not plan.repeats:
        return tree
    return _map_states(lambda flat: unstack_flat(plan, flat), tree)


class LayoutError(ValueError):
    """Layers of one block position that do not have the same variables."""


def stack_module(model, plan):
    """Moves a per-layer Gemma 4 (abstract or loaded) into `plan`'s layout, in place."""
    model.layer_plan = plan
    if not plan.repeats:
        return model
    blocks = []
    for position in range(plan.period):
        members = [model.layers[r * plan.period + position] for r in range(plan.repeats)]
        flats = [dict(nnx.to_flat_state(nnx.state(m))) for m in members]
        shapes = [{p: v.get_value().shape for p, v in flat.items()} for flat in flats]
        for index, other in enumerate(shapes[1:], 1):
            if other != shapes[0]:
                raise LayoutError(f"layers {position} and {index * plan.period + position} "
                                  "differ in their variables: they cannot share a scan")
        stacked = {path: _stack_leaves([flat[path] for flat in flats])
                   for path in flats[0]}
        blocks.append(nnx.merge(nnx.graphdef(members[0]), nnx.from_flat_state(stacked)))
    model.blocks = nnx.List(blocks)
    model.layers = nnx.List(list(model.layers)[plan.scanned:])
    return model


def run(blocks, x, apply, remat_block=False, unroll=1):
    """`apply(layer, x)` through every repeat of `blocks` (one stacked decoder layer per
    block position), under one `lax.scan` (`unroll` repeats per iteration);
    `remat_block`: the whole block rematerialized in the backward pass (else as
    `apply` does)."""
    if not blocks:
        return x
    graphdefs, states = zip(*(nnx.split(block) for block in blocks))

    def body(x, sliced):
        for graphdef, state in zip(graphdefs, sliced):
            x = apply(nnx.merge(graphdef, state), x)
        return x

    if remat_block:
        body = jax.checkpoint(body)
    x, _ = jax.lax.scan(lambda x, sliced: (body(x, sliced), None), x, states, unroll=unroll)
    return x
