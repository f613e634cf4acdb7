"""The TPU training step compiled ahead of time for a TPU topology, on any machine.

With libtpu installed, XLA compiles for a TPU slice that is not there:
`get_topology_desc` gives compile-only devices of the machine table's
topology (tools/common/machines.py), the mesh is laid over them, and the step
that `sft` runs (train_step.make_step on the abstract model, LoRA, optimizer
state and batch, each with its sharding) is lowered and compiled. XLA then
reports the bytes each chip needs (`memory_analysis`) and the FLOPs and its
own estimate of the step time (`cost_analysis`). Nothing is allocated: the
model is built with `nnx.eval_shape`, so 31B costs no memory.

Pallas kernels (splash attention, training/tpu/forward.py) are custom calls
whose work XLA's cost model does not see: their FLOPs are counted by hand and
their time at the chips' peak is added to XLA's estimate (`analytic_kernels`
in each row says so).

XLA's cost model counts the body of a loop once: the accumulation `lax.scan`
(one micro-batch per iteration) is counted for one micro-batch, so the step's
FLOPs and time are the counted ones times the accumulation steps (the
optimizer update, a few element-wise passes over the LoRA factors, is then
counted that many times too: a slight overestimate of the step time).

libtpu lives outside the training virtualenv (`.venvs/train_tpu`, built from
third_party/requirements/train_tpu_lock.txt), so that no CPU process of the
project probes for TPU hardware: `use_libtpu` points JAX at it
(TPU_LIBRARY_PATH) and keeps JAX's own backend on CPU.
"""

import dataclasses
import gc
import glob
import os
import time
import types

from data import packing
from tools.common import cli
from training.common import flops as flops_lib
from training.common import hparams
from training.formats import gemma4_map
from training.tpu import mesh_plan

LIBTPU_SITE_ENV = "G4_LIBTPU_SITE"
_DEFAULT_SITE = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))), ".venvs", "train_tpu")
HBM_LIMIT = 0.9  # of each chip's HBM: the most a step may use


class AotError(cli.UserError):
    """No libtpu, a machine without a topology, or a run that does not fit."""


def _libtpu_candidates():
    roots = [os.environ.get(LIBTPU_SITE_ENV, ""), _DEFAULT_SITE]
    for root in filter(None, roots):
        yield from glob.glob(os.path.join(root, "libtpu", "libtpu.so"))
        yield from glob.glob(os.path.join(root, "lib", "python3*", "site-packages", "libtpu",
                                          "libtpu.so"))


def use_libtpu():
    """Makes libtpu visible to JAX for compile-only TPU devices; call before JAX starts.

    JAX's own backend stays on CPU (JAX_PLATFORMS=cpu): without it, JAX would
    look for TPU chips on this machine.
    """
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    # libtpu asks the cloud metadata server for these otherwise, and warns.
    os.environ.setdefault("TPU_SKIP_MDS_QUERY", "1")
    os.environ.setdefault("TPU_WORKER_HOSTNAMES", "localhost")
    # Compile-only devices touch no chip, so processes need not take turns
    # (libtpu otherwise holds a lock file that a second process fails on).
    os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
    if os.environ.get("TPU_LIBRARY_PATH"):
        return os.environ["TPU_LIBRARY_PATH"]
    try:
        import libtpu  # pylint: disable=import-outside-toplevel
        return libtpu.get_library_path()
    except ImportError:
        pass
    for path in _libtpu_candidates():
        os.environ["TPU_LIBRARY_PATH"] = path
        return path
    raise AotError(
        "libtpu is not installed: compiling for a TPU topology needs it. Run ./bazelw (it "
        "builds .venvs/train_tpu from third_party/requirements/train_tpu_lock.txt), `pip "
        f"install libtpu`, or set {LIBTPU_SITE_ENV} to a site-packages folder holding libtpu/.")


def topology_devices(topology):
    from jax.experimental import topologies  # pylint: disable=import-outside-toplevel
    try:
        return topologies.get_topology_desc(platform="tpu", topology_name=topology).devices
    except Exception as e:  # libtpu's errors are RuntimeErrors with long C++ traces
        raise AotError(f"libtpu cannot describe topology {topology!r}: "
                       f"{str(e).splitlines()[0]}") from e


@dataclasses.dataclass(frozen=True)
class Setting:
    """What shapes the compiled step: the mesh, the batch and the memory levers."""
    fsdp: int
    tp: int
    seq_len: int
    per_device_batch: int
    effective_batch: int
    remat: bool
    attention: str = "dense"  # forward.Attention's kernel
    block: int = 512  # splash's block size
    loss_chunk: int = 0  # forward.loss_sum's chunk (0: all logits at once)

    @property
    def micro_batch(self):
        return self.per_device_batch * self.fsdp

    @property
    def accumulation(self):
        return self.effective_batch // self.micro_batch

    @classmethod
    def from_config(cls, config):
        return cls(fsdp=config.mesh.fsdp, tp=config.mesh.tp, seq_len=config.data.max_seq_len,
                   per_device_batch=config.batch.per_device_size,
                   effective_batch=config.batch.effective_size, remat=bool(config.remat),
                   attention=config.attention.kernel, block=config.attention.block,
                   loss_chunk=config.loss_chunk)


def _shape_structs(tree, shardings):
    import jax  # pylint: disable=import-outside-toplevel
    return jax.tree.map(
        lambda x, sharding: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=sharding),
        tree, shardings)


def lower_step(dims, config, setting, devices):
    """The step `sft` runs, lowered for `devices` with abstract inputs."""
    import jax  # pylint: disable=import-outside-toplevel
    import jax.numpy as jnp  # pylint: disable=import-outside-toplevel
    import numpy as np  # pylint: disable=import-outside-toplevel
    from flax import nnx  # pylint: disable=import-outside-toplevel
    from jax.sharding import NamedSharding  # pylint: disable=import-outside-toplevel
    from jax.sharding import PartitionSpec as P  # pylint: disable=import-outside-toplevel
    from training.tpu import forward  # pylint: disable=import-outside-toplevel
    from training.tpu import model as model_lib  # pylint: disable=import-outside-toplevel
    from training.tpu import optimizer as optimizer_lib  # pylint: disable=import-outside-toplevel
    from training.tpu import sharding  # pylint: disable=import-outside-toplevel
    from training.tpu import train_step  # pylint: disable=import-outside-toplevel

    mesh = jax.sharding.Mesh(np.asarray(devices).reshape(setting.fsdp, setting.tp),
                             ("fsdp", "tp"), axis_types=(jax.sharding.AxisType.Auto,) * 2)
    model = model_lib.abstract_model(dims, config.model.dtype, config.lora)
    if config.lora.dropout > 0:
        # Concrete keys, made on the host: compile-only devices hold no arrays.
        model_lib.use_fixed_dropout_keys(model)
    model_lib.enable_remat(model, setting.remat)
    forward.configure(model, forward.Attention.on_mesh(setting.attention, setting.block, mesh))
    with jax.set_mesh(mesh):
        graphdef, lora, rngs, base = nnx.split(model, nnx.LoRAParam, nnx.RngState, ...)
        base_shardings = nnx.get_named_sharding(base, mesh)
    replicated = NamedSharding(mesh, P())
    lora_shardings = sharding.lora_shardings(lora, mesh)
    lora = _shape_structs(lora, lora_shardings)
    # The schedule's length does not change a shape: any step count compiles the same.
    optimizer = optimizer_lib.make_optimizer(config.optimizer, total_steps=1000)
    opt_state = jax.eval_shape(optimizer.init, lora)
    opt_shardings = sharding.optimizer_shardings(optimizer, opt_state, lora_shardings, mesh)
    batch_sharding = NamedSharding(mesh, P(None, "fsdp", None))
    batch_shape = (setting.accumulation, setting.micro_batch, setting.seq_len)
    batch = {name: jax.ShapeDtypeStruct(batch_shape, jnp.int32, sharding=batch_sharding)
             for name in packing.FIELDS}
    key = jax.eval_shape(lambda: jax.random.key(0))
    step = train_step.make_step(graphdef, optimizer, lora_shardings=lora_shardings,
                                opt_shardings=opt_shardings, batch_sharding=batch_sharding,
                                loss_chunk=setting.loss_chunk)
    return step.train.lower(
        lora, _shape_structs(opt_state, opt_shardings), _shape_structs(base, base_shardings),
        jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=replicated),
                     rngs),
        batch, jax.ShapeDtypeStruct(key.shape, key.dtype, sharding=replicated))


def cost(compiled):
    """XLA's cost analysis of one compiled program, per chip, as a dict."""
    analysis = compiled.cost_analysis()
    if isinstance(analysis, (list, tuple)):  # older JAX: one dict per program
        analysis = analysis[0]
    return dict(analysis or {})


def planner_bytes(dims, config, setting):
    return mesh_plan.config_estimate(
        dims, config, mesh_plan.Mesh(setting.fsdp, setting.tp), seq_len=setting.seq_len,
        micro_batch=setting.micro_batch, remat=setting.remat, attention=setting.attention)["total"]


def compile_step(dims, config, setting, machine):
    """Compiles the step of `setting` for `machine`'s topology: what XLA measured.

    Everything that can be refused without compiling (the batch split, the
    mesh) is refused first.
    """
    if not machine.topology:
        raise AotError(f"machine {machine.name!r} has no TPU topology to compile for "
                       "(tools/common/machines.py)")
    hparams.gradient_accumulation_steps(types.SimpleNamespace(
        effective_size=setting.effective_batch, per_device_size=setting.per_device_batch),
        setting.fsdp)
    mesh_plan.check(mesh_plan.Mesh(setting.fsdp, setting.tp), dims, machine.chips,
                    setting.micro_batch)
    devices = topology_devices(machine.topology)
    if len(devices) != machine.chips:
        raise AotError(f"topology {machine.topology} has {len(devices)} chips, the machine "
                       f"table says {machine.chips} for {machine.name}")
    started = time.time()
    lowered = lower_step(dims, config, setting, devices)
    compiled = lowered.compile()
    seconds = time.time() - started
    memory = compiled.memory_analysis()
    counted = cost(compiled)
    del compiled, lowered  # a 60-layer executable holds GBs of host memory
    gc.collect()
    steps = setting.accumulation  # the scan body is counted once (module docstring)
    return {
        "memory": {"argument": memory.argument_size_in_bytes,
                   "output": memory.output_size_in_bytes, "alias": memory.alias_size_in_bytes,
                   "temp": memory.temp_size_in_bytes},
        "xla_flops": counted.get("flops", 0.0) * steps * machine.chips,
        "xla_bytes_accessed": counted.get("bytes accessed", 0.0) * steps * machine.chips,
        "optimal_seconds": counted.get("optimal_seconds", 0.0) * steps,
        "compile_seconds": seconds,
    }


def row(dims, config, setting, machine, measured, *, non_padding_fraction, trained_fraction):
    """The row of compile.json: XLA's figures against the planner, flops.py and HBM,
    and the throughput they predict for data with these token fractions."""
    memory = measured["memory"]
    per_chip = memory["argument"] + memory["output"] - memory["alias"] + memory["temp"]
    modules = gemma4_map.tunix_lora_modules(config.lora.target_modules)
    positions = setting.effective_batch * setting.seq_len  # token slots per optimizer step
    per_token = flops_lib.flops_per_token(dims, setting.seq_len, config.lora.rank, modules)
    compiled_per_token = flops_lib.compiled_flops_per_token(
        dims, setting.seq_len, config.lora.rank, modules, remat=setting.remat,
        dense_attention=setting.attention == "dense")
    kernels = analytic_kernels(dims, setting, machine)
    # XLA gives a negative time when ops it cannot cost are left in the step.
    step_seconds = (measured["optimal_seconds"] + sum(k["seconds"] for k in kernels)
                    if measured["optimal_seconds"] > 0 else 0.0)
    tokens_per_s = positions * non_padding_fraction / step_seconds if step_seconds else None
    hbm = machine.hbm_bytes_per_chip
    return {
        "topology": machine.topology, "machine": machine.name, "chips": machine.chips,
        "layers": dims.num_layers,
        "mesh": {"fsdp": setting.fsdp, "tp": setting.tp}, "seq_len": setting.seq_len,
        "micro_batch": setting.micro_batch, "accumulation": setting.accumulation,
        "sequences_per_step": setting.effective_batch, "remat": setting.remat,
        "attention": setting.attention, "attention_block": setting.block,
        "loss_chunk": setting.loss_chunk,
        "per_chip_bytes": per_chip, "hbm_bytes": hbm,
        "hbm_fraction": per_chip / hbm if hbm else None, "fits": per_chip <= HBM_LIMIT * hbm,
        "memory": memory,
        "planner_bytes": planner_bytes(dims, config, setting),
        "xla_flops": measured["xla_flops"],
        "expected_compiled_flops": compiled_per_token * positions,
        "xla_optimal_seconds": measured["optimal_seconds"],
        "model_flops": per_token * positions * non_padding_fraction,
        "xla_bytes_accessed": measured["xla_bytes_accessed"],
        "optimal_seconds": step_seconds,  # XLA's estimate plus the analytic kernels
        "non_padding_fraction": non_padding_fraction, "trained_fraction": trained_fraction,
        "trained_tokens_per_step": positions * trained_fraction,
        "predicted_tokens_per_s": tokens_per_s,
        "predicted_trained_tokens_per_s": (positions * trained_fraction / step_seconds
                                           if step_seconds else None),
        "predicted_mfu": (flops_lib.mfu(tokens_per_s, per_token, machine.chips,
                                        machine.peak_flops_per_chip)
                          if tokens_per_s else None),
        "analytic_kernels": kernels,
        "compile_seconds": measured["compile_seconds"],
    }


def analytic_kernels(dims, setting, machine):
    """The step's Pallas kernels, which XLA's cost model cannot see into, counted by
    hand: FLOPs over all chips and their time at the chips' peak (compute-bound
    at these block sizes, as XLA's own estimate assumes of its matmuls)."""
    if setting.attention != "splash":
        return []
    from training.tpu import forward  # pylint: disable=import-outside-toplevel
    flops = setting.effective_batch * forward.kernel_flops(dims, setting.seq_len, setting.block,
                                                           remat=setting.remat)
    return [{"name": "splash_attention", "flops": flops,
             "seconds": flops / (machine.chips * machine.peak_flops_per_chip),
             "counted": "by hand (forward.kernel_flops), at peak"}]


def compile_row(dims, config, setting, machine, *, non_padding_fraction, trained_fraction):
    """compile_step, then its row."""
    return row(dims, config, setting, machine, compile_step(dims, config, setting, machine),
               non_padding_fraction=non_padding_fraction, trained_fraction=trained_fraction)


GIB = 2**30


def format_rows(rows):
    """The rows as an aligned text table."""
    header = ("mesh", "T", "mb x acc", "remat", "attention", "loss", "GiB/chip", "HBM %",
              "planner", "tok/s", "trained/s", "MFU", "compile s")
    lines = [header]
    for row in rows:
        mfu = row["predicted_mfu"]
        lines.append((
            f"{row['mesh']['fsdp']}x{row['mesh']['tp']}" + (" (ref)" if row.get("reference")
                                                              else ""),
            str(row["seq_len"]), f"{row['micro_batch']} x {row['accumulation']}",
            "yes" if row["remat"] else "no", row["attention"],
            f"chunk {row['loss_chunk']}" if row["loss_chunk"] else "full",
            f"{row['per_chip_bytes'] / GIB:.2f}",
            f"{100 * row['hbm_fraction']:.0f}%" if row["hbm_fraction"] is not None else "-",
            f"{row['planner_bytes'] / GIB:.2f}",
            f"{row['predicted_tokens_per_s']:.0f}" if row["predicted_tokens_per_s"] else "-",
            f"{row['predicted_trained_tokens_per_s']:.0f}"
            if row["predicted_trained_tokens_per_s"] else "-",
            f"{100 * mfu:.1f}%" if mfu is not None else "-",
            f"{row['compile_seconds']:.0f}"))
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    return "\n".join("  ".join(cell.rjust(w) for cell, w in zip(line, widths))
                     for line in lines)
