"""The TPU training run: plan, load, train, checkpoint, resume.

Everything that can be checked without weights is checked first, in seconds:
the run directory is writable, the mesh divides the model, the run fits in
HBM, the data yields trained tokens, the base checkpoint's files open, and an
existing checkpoint was made with this model and LoRA shape. Only then are
weights loaded and XLA compiles the step.
"""

import dataclasses
import logging
import os
import time
import types

import jax
import numpy as np
from flax import nnx
from jax.experimental import multihost_utils
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from data import views
from tools.common import machines
from training.common import hparams
from training.common import lifecycle
from training.common import run_dir as run_dir_lib
from training.formats import base_model
from training.formats import gemma4_map
from training.formats import orbax_lora
from training.tpu import checkpoints as checkpoints_lib
from training.tpu import forward
from training.tpu import mesh_plan
from training.tpu import model as model_lib
from training.tpu import optimizer as optimizer_lib
from training.tpu import sharding
from training.tpu import train_step

log = logging.getLogger("training.tpu")


def setup_devices(config):
    """Virtual CPU devices and multi-process JAX; must run before JAX sees a device."""
    if config.cpu_devices:
        jax.config.update("jax_num_cpu_devices", config.cpu_devices)
    dist = config.distributed
    if dist.num_processes > 1 or dist.auto:
        if not dist.auto:
            jax.config.update("jax_cpu_collectives_implementation", "gloo")
            jax.distributed.initialize(coordinator_address=dist.coordinator_address,
                                       num_processes=dist.num_processes,
                                       process_id=dist.process_id)
        else:
            jax.distributed.initialize()


def _sync(name):
    if jax.process_count() > 1:
        multihost_utils.sync_global_devices(name)


def _any_process(flag):
    """True when `flag` is set on any process (every process must save together)."""
    if jax.process_count() == 1:
        return flag
    return bool(np.any(multihost_utils.process_allgather(np.array([flag], np.int32))))


def plan(run, num_devices):
    """Checks the mesh against the model and the HBM estimate against the machine."""
    config = run.config
    mesh = mesh_plan.Mesh(config.mesh.fsdp, config.mesh.tp)
    micro_batch = config.batch.per_device_size * mesh.fsdp
    mesh_plan.check(mesh, run.dims, num_devices, micro_batch)
    estimate = mesh_plan.config_estimate(
        run.dims, config, mesh, seq_len=config.data.max_seq_len, micro_batch=micro_batch,
        remat=config.remat, attention=config.attention.kernel)
    hbm = run.machine.hbm_bytes_per_chip
    log.info("mesh (fsdp=%d, tp=%d), micro-batch %d x %d accumulation steps; HBM estimate "
             "per chip:\n%s", mesh.fsdp, mesh.tp, micro_batch, run.accumulation,
             mesh_plan.format_estimate(estimate, hbm))
    mesh_plan.check_fits(estimate, hbm)
    return mesh, micro_batch


def preflight(config):
    """`plan` from a Hub base's config.json alone, before any weight downloads.

    A mesh that cannot split the model, or a step over the chip's HBM, then
    fails in seconds instead of after a 62 GB download. Returns plan's
    (mesh, micro-batch), or None for local and tiny bases, which `plan` checks
    once they are open.
    """
    name = config.model.name
    if os.path.exists(name) or not base_model.is_hub_id(name):
        return None
    dims = gemma4_map.Dims.from_hf_config(base_model.config_only(name)[0])
    return plan(types.SimpleNamespace(
        config=config, dims=dims, machine=machines.get(config.machine),
        accumulation=hparams.gradient_accumulation_steps(config.batch, config.mesh.fsdp)),
        jax.device_count())


def make_mesh(shape):
    devices = np.asarray(jax.devices()).reshape(shape.fsdp, shape.tp)
    return jax.sharding.Mesh(devices, ("fsdp", "tp"),
                             axis_types=(jax.sharding.AxisType.Auto,) * 2)


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


def build_state(base_dir, dims, mesh, config, total_steps):
    """Loads the base, adds LoRA, places LoRA and optimizer state, jits the step."""
    started = time.time()
    model = model_lib.load(base_dir, dims, mesh, config.model.dtype, config.lora, config.seed)
    if config.lora.init_from:
        # An Orbax LoRA state: a checkpoint step or //conversion:import_adapter's output.
        model_lib.set_lora(model, orbax_lora.read(config.lora.init_from))
    model_lib.enable_remat(model, config.remat)
    forward.configure(model, forward.Attention.on_mesh(config.attention.kernel,
                                                       config.attention.block, mesh))
    graphdef, lora, rngs, base = nnx.split(model, nnx.LoRAParam, nnx.RngState, ...)
    log.info("base model loaded and LoRA added in %.1fs: %d LoRA tensors",
             time.time() - started, len(nnx.to_flat_state(lora)))
    optimizer = optimizer_lib.make_optimizer(config.optimizer, total_steps)
    lora_shardings = sharding.lora_shardings(lora, mesh)
    lora = sharding.place(lora, lora_shardings)
    opt_shardings = sharding.optimizer_shardings(
        optimizer, jax.eval_shape(optimizer.init, lora), lora_shardings, mesh)
    opt_state = jax.jit(optimizer.init, out_shardings=opt_shardings)(lora)
    batch_sharding = NamedSharding(mesh, P(None, "fsdp", None))
    step = train_step.make_step(graphdef, optimizer, lora_shardings=lora_shardings,
                                opt_shardings=opt_shardings, batch_sharding=batch_sharding,
                                loss_chunk=config.loss_chunk)
    return State(lora, opt_state, base, rngs, lora_shardings, opt_shardings, batch_sharding,
                 step)


def train(config, workdir):
    """Runs (or resumes) the training run `config` in `workdir`; returns the last step."""
    setup_devices(config)
    planned = preflight(config)
    run = lifecycle.start(config, workdir, stack="tpu", is_main=jax.process_index() == 0,
                          barrier=lambda: _sync("base model"), data_parallel=config.mesh.fsdp)
    mesh_shape, micro_batch = planned or plan(run, jax.device_count())
    checkpoints = checkpoints_lib.manager(
        os.path.join(workdir, run_dir_lib.CHECKPOINTS), config.checkpoints_to_keep,
        config.checkpoint_every_steps)
    checkpoints_lib.check_latest(checkpoints, run.lora_meta)
    log.info(lifecycle.load_data(run))

    state = build_state(run.base_dir, run.dims, make_mesh(mesh_shape), config, run.total_steps)
    micro_batches = views.grain_batches(run.prepared.sequences, micro_batch,
                                        jax.process_index(), jax.process_count())
    data_iterator = iter(micro_batches.to_iter_dataset())
    step = 0
    restored = checkpoints_lib.restore_latest(checkpoints, state.lora, state.opt_state,
                                              data_iterator)
    if restored:
        step, state.lora, state.opt_state = restored
        log.info("resumed from checkpoint at step %d", step)
    if jax.process_index() == 0:
        lifecycle.write_run_info(
            run, devices=jax.device_count(), processes=jax.process_count(),
            device_kind=jax.devices()[0].device_kind,
            parallelism={"data": mesh_shape.fsdp, "tensor": mesh_shape.tp,
                         "fsdp": mesh_shape.fsdp > 1})
    return _loop(run, state, step, data_iterator, micro_batch, checkpoints)


def _global_batch(data_iterator, accumulation, micro_batch, batch_sharding):
    micro = [next(data_iterator) for _ in range(accumulation)]
    local = {name: np.stack([m[name] for m in micro]) for name in micro[0]}
    return {name: jax.make_array_from_process_local_data(
        batch_sharding, value, (accumulation, micro_batch, value.shape[-1]))
        for name, value in local.items()}


def _loop(run, state, step, data_iterator, micro_batch, checkpoints):
    config, main = run.config, jax.process_index() == 0
    writer = run_dir_lib.MetricsWriter(run.workdir, resume_step=step, enabled=main)
    preemption = lifecycle.Preemption(agree=_any_process)
    schedule = optimizer_lib.learning_rate_schedule(config.optimizer, run.total_steps)
    seed_key = jax.random.key(config.seed)
    lora, opt_state = state.lora, state.opt_state
    progress = None
    if main:
        from tqdm import tqdm  # pylint: disable=import-outside-toplevel
        progress = tqdm(total=run.total_steps, initial=step, desc="train", unit="step",
                        dynamic_ncols=True)
    try:
        while step < run.total_steps:
            started = time.time()
            batch = _global_batch(data_iterator, run.accumulation, micro_batch,
                                  state.batch_sharding)
            key = jax.random.fold_in(seed_key, step)
            lora, opt_state, metrics = state.step.train(lora, opt_state, state.base,
                                                        state.rngs, batch, key)
            metrics = jax.device_get(metrics)
            step += 1
            record = lifecycle.step_record(
                run, step=step, loss=metrics["loss"], learning_rate=schedule(step - 1),
                grad_norm=metrics["grad_norm"], trained_tokens=metrics["trained_tokens"],
                tokens=metrics["tokens"], seconds=time.time() - started,
                chips=jax.device_count())
            if step % config.log_every == 0 or step == run.total_steps:
                writer.write(record)
            if progress is not None:
                progress.update(1)
                progress.set_postfix(loss=f"{record['loss']:.4f}",
                                     tok_s=f"{record['tokens_per_s']:.0f}")
            stop = preemption.stop()
            checkpoints_lib.save(checkpoints, step, lora, opt_state, data_iterator,
                                 {**run.lora_meta, "step": step},
                                 force=stop or step == run.total_steps)
            if stop:
                log.warning("SIGTERM: saved a checkpoint at step %d, exiting", step)
                break
    finally:
        checkpoints.wait_until_finished()
        writer.close()
        if progress is not None:
            progress.close()
    return step
