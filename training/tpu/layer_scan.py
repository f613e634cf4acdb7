"""Gemma 4's repeating block of decoder layers, stored stacked and run under one scan.

Gemma 4 31B's 60 decoder layers are 10 repeats of one block: 5 sliding-window
layers and 1 global layer. Unrolled, XLA compiles each of the 60 layers; under
`jax.lax.scan` over the repeats it compiles the block once (MaxText's
`scan_layers`, over a block as it does for Gemma 3's alternating layers).

`Plan.of(layer_types)` finds the block: the period p and the repeats R that
cover the most layers from the first one (ties: the shortest block), and the
block's runs of layers of one type (31B: 5 sliding-window layers, then 1
global). Layers after the last repeat (a tiny model whose last layer is forced
global, a `--layers` subset) run unrolled after the scan. Fewer than 2
repeats: nothing is scanned.

In the scanned layout (`stack_module`) the model holds
  blocks.J   run J of the block: one decoder layer whose every variable has two
             leading axes, [R, the run's length]: layer r * p + (the run's first
             position) + i at index [r, i]
  layers.K   the unscanned layers, layer R * p + K
so the base weights are stored stacked (stacking them inside the step would
copy the base at every step) and sharded as before, the leading axes
replicated. LoRA factors, their optimizer moments and the dropout keys are
stacked alike, since they live on the same modules. `run` scans over the
repeats and, inside, over each run's layers (`scan_runs`): XLA then compiles
one layer per run (31B: 2 layers), where the block's layers one after another
in the loop are its 6.

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
    """Layers 0 .. period x repeats - 1 run scanned, block by block; the rest unrolled.
    `runs`: the block as (first position, length) of its runs of layers of one type."""
    num_layers: int
    period: int = 1
    repeats: int = 0
    runs: tuple = ()

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
                best = cls(len(types), period, repeats, _runs(types[:period]))
        return best

    @property
    def scanned(self):
        """How many layers run under the scan."""
        return self.period * self.repeats

    def locate(self, path):
        """A per-layer path (`("layers", I, ...)`) -> (its path in this layout, its
        (repeat, index in the run) in the stacked arrays, or None); other paths stay
        as they are."""
        if len(path) < 2 or path[0] != "layers":
            return tuple(path), None
        index = int(path[1])
        if index >= self.scanned:
            return ("layers", index - self.scanned, *path[2:]), None
        position = index % self.period
        for run, (first, length) in enumerate(self.runs):
            if first <= position < first + length:
                return ("blocks", run, *path[2:]), (index // self.period, position - first)
        raise AssertionError(f"position {position} is in none of {self.runs}")

    def layer_path(self, path, index):
        """The inverse of `locate`: a path of this layout (and its index) -> per-layer path."""
        if path[0] == "blocks":
            repeat, step = index
            return ("layers", repeat * self.period + self.runs[int(path[1])][0] + step,
                    *path[2:])
        if path[0] == "layers":
            return ("layers", self.scanned + int(path[1]), *path[2:])
        return tuple(path)

    def indices(self, run):
        """Every (repeat, index in the run) of `run`'s stacked arrays, in order."""
        return [(r, i) for r in range(self.repeats) for i in range(self.runs[run][1])]

    def describe(self):
        if not self.repeats:
            return f"{self.num_layers} layers unrolled"
        rest = self.num_layers - self.scanned
        return (f"{self.num_layers} layers: a block of {self.period} scanned over "
                f"{self.repeats} repeats" + (f", {rest} more unrolled" if rest else ""))


def _runs(types):
    """(first index, length) of each run of equal consecutive `types`."""
    runs = []
    for index, kind in enumerate(types):
        if runs and types[runs[-1][0]] == kind:
            runs[-1][1] += 1
        else:
            runs.append([index, 1])
    return tuple(map(tuple, runs))


_AXES = 2  # the stacked arrays' leading axes: repeat, index in the run


def _stack_values(values, shape):
    first = values[0]
    if isinstance(first, jax.ShapeDtypeStruct):
        return jax.ShapeDtypeStruct((*shape, *first.shape), first.dtype,
                                    sharding=_with_leading_axes(first.sharding, True))
    if isinstance(first, np.ndarray):
        return np.stack(values).reshape(*shape, *first.shape)
    return jnp.stack(values).reshape(*shape, *first.shape)


def _take(value, index):
    if isinstance(value, jax.ShapeDtypeStruct):
        return jax.ShapeDtypeStruct(value.shape[_AXES:], value.dtype,
                                    sharding=_with_leading_axes(value.sharding, False))
    return value[index]


def _with_leading_axes(sharding, add):
    """A NamedSharding with the replicated leading axes added (or dropped)."""
    if not isinstance(sharding, NamedSharding):
        return sharding
    spec = tuple(sharding.spec)
    return NamedSharding(sharding.mesh, P(*(None,) * _AXES, *spec) if add
                         else P(*spec[_AXES:]))


def _respec(variable, value, add):
    """`variable` holding `value`, its declared sharding given (or rid of) the leading
    axes, so that placement and checkpoints read the right spec."""
    new = variable.replace(value)
    for key in _SHARDING_KEYS:
        spec = variable.get_metadata().get(key)
        if spec:
            new.set_metadata(key, (*(None,) * _AXES, *spec) if add else tuple(spec)[_AXES:])
    return new


def stack(members):
    """{(repeat, index in the run): leaf} of one stacked array -> that array, [repeats,
    run length, ...] (arrays, numpy arrays, shapes or Variables of them)."""
    indices = sorted(members)
    shape = (indices[-1][0] + 1, indices[-1][1] + 1)
    leaves = [members[i] for i in indices]
    if isinstance(leaves[0], nnx.Variable):
        return _respec(leaves[0], _stack_values([v.get_value() for v in leaves], shape), True)
    return _stack_values(leaves, shape)


def _take_leaf(leaf, index):
    if isinstance(leaf, nnx.Variable):
        return _respec(leaf, _take(leaf.get_value(), index), False)
    return _take(leaf, index)


def stack_flat(plan, flat):
    """{per-layer path: leaf} -> {path of `plan`'s layout: leaf}, the layers of each run
    of the block stacked over its repeats (arrays, numpy arrays, shapes or Variables
    of them)."""
    groups = {}
    for path, leaf in flat.items():
        target, index = plan.locate(tuple(path))
        groups.setdefault(target, {})[index] = leaf
    out = {}
    for target, members in groups.items():
        if None in members:
            out[target] = members[None]
        elif sorted(members) != plan.indices(target[1]):
            layers = sorted(plan.layer_path(target, i)[1] for i in members)
            raise ValueError(f"{'.'.join(map(str, target))}: layers {layers}, not all "
                             f"{plan.repeats} repeats")
        else:
            out[target] = stack(members)
    return out


def unstack_flat(plan, flat):
    """The inverse of `stack_flat`."""
    out = {}
    for path, leaf in flat.items():
        path = tuple(path)
        if path[0] == "blocks":
            for index in plan.indices(int(path[1])):
                out[plan.layer_path(path, index)] = _take_leaf(leaf, index)
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
    """Layers of one run of the block that do not have the same variables."""


def stack_module(model, plan):
    """Moves a per-layer Gemma 4 (abstract or loaded) into `plan`'s layout, in place.
    An abstract model may hold one repeat of the block instead of all: its shapes
    then stand for every repeat."""
    model.layer_plan = plan
    if not plan.repeats:
        return model
    one_repeat = len(model.layers) == plan.num_layers - plan.scanned + plan.period
    if one_repeat and not all(isinstance(v, jax.ShapeDtypeStruct)
                              for v in jax.tree.leaves(nnx.state(model, nnx.Param))):
        raise LayoutError("only an abstract model stands for every repeat with one")
    blocks = []
    for run in range(len(plan.runs)):
        indices = plan.indices(run)
        members = [model.layers[plan.layer_path(("blocks", run), (0 if one_repeat else r, i))[1]]
                   for r, i in indices]
        states = {id(m): dict(nnx.to_flat_state(nnx.state(m))) for m in members}
        flats = [states[id(m)] for m in members]
        shapes = [{p: v.get_value().shape for p, v in flat.items()} for flat in flats]
        for index, other in zip(indices[1:], shapes[1:]):
            if other != shapes[0]:
                layers = (plan.layer_path(("blocks", run), indices[0])[1],
                          plan.layer_path(("blocks", run), index)[1])
                raise LayoutError(f"layers {layers[0]} and {layers[1]} differ in their "
                                  "variables: they cannot share a scan")
        stacked = {path: stack(dict(zip(indices, (flat[path] for flat in flats))))
                   for path in flats[0]}
        blocks.append(nnx.merge(nnx.graphdef(members[0]), nnx.from_flat_state(stacked)))
    model.blocks = nnx.List(blocks)
    model.layers = nnx.List(list(model.layers)[plan.period if one_repeat else plan.scanned:])
    return model


def run(blocks, x, apply, remat=None, remat_block=False, unroll=1, scan_runs=False):
    """`apply(layer, x)` through every repeat of `blocks` (each run of the block: one
    decoder layer stacked [repeats, run length]), under one `lax.scan` over the
    repeats (`unroll` repeats per iteration). `remat`: wraps each layer's function
    (`jax.checkpoint` with a policy) for the backward pass; `remat_block`: the
    whole block rematerialized instead.

    `scan_runs`: each run of more than one layer (31B's 5 sliding-window layers)
    goes under a scan of its own inside the block's, so XLA compiles one layer
    per run; otherwise the loop's body runs the block's layers one after another
    and XLA compiles each.

    The loops read each layer's variables out of the stacked arrays at (repeat,
    index in the run), inside the (rematerialized) layer function: the arrays
    enter the loops whole, so nothing is copied out of them beforehand and
    nothing read out of them is kept for the backward pass.
    """
    if not blocks:
        return x
    graphdefs, states = zip(*(nnx.split(block) for block in blocks))
    lengths = [jax.tree.leaves(state)[0].shape[1] for state in states]
    repeats = jax.tree.leaves(states[0])[0].shape[0]
    wrap = remat or (lambda function: function)
    layers = [wrap(lambda state, repeat, index, x, g=graphdef: apply(
        nnx.merge(g, jax.tree.map(lambda v: v[repeat, index], state)), x))
        for graphdef in graphdefs]

    def body(x, repeat):
        for layer, state, length in zip(layers, states, lengths):
            if length > 1 and scan_runs:
                x, _ = jax.lax.scan(
                    lambda x, index, layer=layer, state=state: (layer(state, repeat, index, x),
                                                                None),
                    x, jnp.arange(length))
            else:
                for index in range(length):
                    x = layer(state, repeat, index, x)
        return x

    if remat_block:
        body = jax.checkpoint(body)
    x, _ = jax.lax.scan(lambda x, repeat: (body(x, repeat), None), x, jnp.arange(repeats),
                        unroll=unroll)
    return x
