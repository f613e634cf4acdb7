"""The TPU step of a deep model, from compiles of a few of its layers.

Compiling all 60 layers of Gemma 4 31B unrolled for v5p-8 takes 4 to 5
minutes and 11 GiB of host memory on 2 cores (6 and 12 layers: 95 s, 4.8 GiB); the step's figures grow by the same amount
with every repeat of the model's block of layers (31B: 5 sliding-window
layers and one global). So an unrolled step is compiled twice, with the block
once and twice (`sizes`), and every figure XLA measured (bytes per chip by
kind, FLOPs, bytes accessed, its estimate, compile seconds) is extended along
the line through the two to the model's depth. A scanned step compiles its
block once whatever the depth (v6e-8's 12 layers took as long as its 60), so
it is compiled whole. The planner
(report/planning.py) uses it; `--check_extrapolation` of //report:plan
compiles the whole step too and prints the error (docs/compare-and-plan.md: within 3% on
v5p-8).

Results are kept in a cache directory as JSON, keyed by what determines them:
the compiled shape of the config (`aot.compiled_shape`),
the base's dimensions, the topology, the versions of the packages that build
and compile the step (JAX, jaxlib, libtpu, Flax, Qwix, Tunix, Optax) and the
source of the modules that make the step (`STEP_MODULES`), so a second plan
over the same inputs compiles nothing. A cache can also read a shipped file of
such results (`Cache(shipped=...)`): the repository's own machine configs'
steps, compiled once by `bazel run //report:ship_compiled_steps`, so a plan of
them compiles nothing on a fresh machine.
"""

import ast
import dataclasses
import hashlib
import importlib.metadata
import json
import logging
import math
import os

from common import cli
from common import storage
from training.tpu import aot
from training.tpu import layer_scan

log = logging.getLogger(__name__)

# What a compile measured that grows with the layers (aot.compile_step's keys).
_LINEAR = ("xla_flops", "xla_bytes_accessed", "optimal_seconds", "compile_seconds")


def sizes(dims, config):
    """The two layer counts compiled for `dims`'s unrolled step (its block once
    and twice), or None where it is compiled whole: a scanned step, or a model
    no deeper than two blocks."""
    if config.scan_layers:
        return None
    plan = layer_scan.Plan.of(dims.layer_types, True)
    period = plan.period if plan.repeats >= 2 else 1
    if dims.num_layers <= 2 * period:
        return None
    return period, 2 * period


def cut(dims, layers):
    """`dims` with its first `layers` layers only."""
    return dataclasses.replace(dims, layer_types=tuple(dims.layer_types[:layers]))


def line(small, large, a, b, layers):
    """The figures of `layers` layers on the line through those of `a` and `b` layers."""
    def extend(x, y):
        return x + (y - x) * (layers - a) / (b - a)
    out = {name: extend(small[name], large[name]) for name in _LINEAR}
    out["memory"] = {kind: round(extend(small["memory"][kind], large["memory"][kind]))
                     for kind in small["memory"]}
    out["host_peak_bytes"] = max(small["host_peak_bytes"], large["host_peak_bytes"])
    return out


_PACKAGES = ("jax", "jaxlib", "libtpu", "flax", "qwix", "google-tunix", "optax")


def _versions():
    versions = {}
    for package in _PACKAGES:
        try:
            versions[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            versions[package] = None
    if versions["libtpu"] is None:  # a libtpu.so given by path
        versions["libtpu"] = os.environ.get("TPU_LIBRARY_PATH")
    return versions


# The modules whose code makes the compiled step: the source part of the cache
# key. `STEP_ROOT` and these import the repository's modules in `NOT_THE_STEP`
# too, which only check, load or name things (errors, paths, config defaults
# whose values the key holds); a test walks the imports and fails on a module
# in neither list, so a new import is classified where it is added.
STEP_ROOT = "training/tpu/aot.py"
STEP_MODULES = (
    "data/packing.py", "gemma4/gemma4_map.py", "training/common/flops.py",
    "training/common/hparams.py", "training/common/memory.py", STEP_ROOT,
    "training/tpu/forward.py", "training/tpu/layer_scan.py", "training/tpu/mesh_plan.py",
    "training/tpu/model.py", "training/tpu/optimizer.py", "training/tpu/sharding.py",
    "training/tpu/state.py", "training/tpu/train_step.py")
NOT_THE_STEP = ("common/calibration.py", "common/cli.py", "common/storage.py",
                "data/pipeline.py", "gemma4/base_model.py")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def first_party_imports(path, root=ROOT):
    """The repository files (relative paths) that the module at `path` imports,
    at its top or inside functions."""
    with open(os.path.join(root, path), encoding="utf-8") as f:
        tree = ast.parse(f.read(), path)
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names = [f"{node.module}.{alias.name}" for alias in node.names] + [node.module]
        else:
            continue
        for name in names:  # (packages are folders without code: Bazel's __init__.py)
            candidate = name.replace(".", "/") + ".py"
            if os.path.isfile(os.path.join(root, candidate)):
                found.add(candidate)
    found.discard(path)
    return found


def _source_digest():
    digest = hashlib.sha256()
    for path in STEP_MODULES:
        with open(os.path.join(ROOT, path), "rb") as f:
            digest.update(path.encode() + b"\0" + f.read())
    return digest.hexdigest()


def cache_key(dims, config, machine, layers):
    what = {"config": aot.compiled_shape(config), "dims": repr(dims),
            "layers": layers, "topology": machine.topology, "versions": _versions(),
            "source": _source_digest()}
    return hashlib.sha256(json.dumps(what, sort_keys=True).encode()).hexdigest()[:32]


def needed_keys(dims, config, machine, *, whole=False):
    """The cache keys `compile_step` looks up for this step, without compiling."""
    depths = (None if whole else sizes(dims, config)) or (dims.num_layers,)
    return [cache_key(cut(dims, layers), config, machine, layers) for layers in depths]


class ShippedError(cli.UserError):
    """A shipped file of compile results that cannot be read."""


def _checked(figures):
    """`figures` if they are what aot.compile_step returns, else ValueError."""
    numbers = [figures[name] for name in _LINEAR + ("host_peak_bytes",)]
    numbers += [figures["memory"][kind] for kind in ("argument", "output", "alias", "temp")]
    if not all(isinstance(n, (int, float)) and not isinstance(n, bool) and math.isfinite(n)
               for n in numbers) or not isinstance(figures["scan"], dict):
        raise ValueError("figures that are not finite numbers")
    return figures


def read_shipped(path):
    """{key: figures} of a file `ship` wrote; {} where there is none."""
    try:
        with open(path, encoding="utf-8") as f:
            found = json.load(f)
        return {key: _checked(entry["figures"]) for key, entry in found["steps"].items()}
    except FileNotFoundError:
        return {}
    except (OSError, ValueError, KeyError, TypeError, AttributeError, RecursionError) as e:
        raise ShippedError(f"{path}: not a file of shipped compile results ({e!r}); "
                           "regenerate it with `bazel run //report:ship_compiled_steps`") from None


def ship(path, used, about):
    """Writes the compile results in `used` (Cache.used) to `path`, atomically."""
    text = json.dumps({"about": about, "versions": _versions(), "source": _source_digest(),
                       "steps": dict(sorted(used.items()))}, indent=1, sort_keys=True)
    storage.write_bytes(path, (text + "\n").encode())


class Cache:
    """Compile results as JSON files in `directory` (empty: nothing is kept),
    and read-only, those of a `shipped` file (`read_shipped`). `used` holds
    every result this cache handed out or stored, by key, with what it is."""

    def __init__(self, directory, shipped=None):
        self.directory = directory
        self.shipped = shipped or {}
        self.hits = self.misses = self.shipped_hits = 0
        self.used = {}

    def _path(self, key):
        return os.path.join(self.directory, f"{key}.json")

    def get(self, key):
        if key in self.shipped:
            self.hits += 1
            self.shipped_hits += 1
            return dict(self.shipped[key])
        if not self.directory:
            return None
        try:
            with open(self._path(key), encoding="utf-8") as f:
                value = json.load(f)
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as e:  # a torn file: compiled again and replaced
            log.warning("compile cache: %s unreadable (%s), compiling again", self._path(key), e)
            return None
        self.hits += 1
        return value

    def put(self, key, value):
        if not self.directory:
            return
        try:
            storage.write_bytes(self._path(key), json.dumps(value).encode())
        except OSError as e:  # a cache that cannot be written costs time, not the plan
            log.warning("compile cache: cannot write %s (%s); the next plan compiles again",
                        self.directory, e)


def compiled(dims, config, machine, cache):
    """aot.compile_step's figures for `dims`, from the cache or compiled (and kept)."""
    key = cache_key(dims, config, machine, dims.num_layers)
    found = cache.get(key)
    if found is None:
        cache.misses += 1
        found = aot.compile_step(dims, config, machine)
        cache.put(key, found)
        cached = False
    else:
        found.pop("cached", None)
        cached = True
    cache.used[key] = {"machine": machine.name, "layers": dims.num_layers, "figures": found}
    return {**found, "cached": cached}


def compile_step(dims, config, machine, cache, *, whole=False):
    """The step's figures (aot.compile_step's keys) for all of `dims`'s layers:
    compiled at two smaller depths and extended (`extrapolated` says from
    which), or compiled whole when `whole` or the model is small."""
    depths = None if whole else sizes(dims, config)
    if depths is None:
        measured = compiled(dims, config, machine, cache)
        return {**measured, "extrapolated": None}
    a, b = depths
    log.info("the step at %d and %d of its %d layers, extended per layer", a, b,
             dims.num_layers)
    small = compiled(cut(dims, a), config, machine, cache)
    large = compiled(cut(dims, b), config, machine, cache)
    out = line(small, large, a, b, dims.num_layers)
    out["scan"] = {"layers": layer_scan.Plan.of(dims.layer_types, False).describe()}
    out["cached"] = small["cached"] and large["cached"]
    out["extrapolated"] = {"from_layers": [a, b], "to_layers": dims.num_layers,
                           "compile_seconds": [small["compile_seconds"],
                                               large["compile_seconds"]]}
    return out
