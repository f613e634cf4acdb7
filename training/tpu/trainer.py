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
import signal
import time

import jax
import numpy as np
from flax import nnx
from jax.experimental import multihost_utils
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from conversion import gemma4_map
from conversion import orbax_lora
from data import pipeline
from data import views
from tools import config_cli
from training.common import base_model
from training.common import flops
from training.common import hparams
from training.common import run_dir as run_dir_lib
from training.tpu import checkpoints as checkpoints_lib
from training.tpu import mesh_plan
from training.tpu import model as model_lib
from training.tpu import optimizer as optimizer_lib
from training.tpu import sharding
from training.tpu import train_step

log = logging.getLogger("training.tpu")
# Bad input, reported as one line rather than a traceback.
USER_ERRORS = (run_dir_lib.RunDirError, base_model.BaseModelError, mesh_plan.MeshError,
               checkpoints_lib.CheckpointMismatch, gemma4_map.MappingError,
               orbax_lora.NoLoraError,
               pipeline.codev.DataError, pipeline.chat.TemplateError)
_BYTES = {"bfloat16": 2, "float32": 4}


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


def _versions():
    import importlib.metadata as metadata  # pylint: disable=import-outside-toplevel
    names = ("jax", "flax", "optax", "orbax-checkpoint", "grain", "qwix", "google-tunix",
             "transformers")
    return {name: metadata.version(name) for name in names}


class _Preemption:
    """Remembers a SIGTERM (TPU preemption) until the loop can checkpoint."""

    def __init__(self):
        self.requested = False
        signal.signal(signal.SIGTERM, self._handle)

    def _handle(self, signum, frame):
        del signum, frame
        self.requested = True

    def agreed(self):
        """True when any process was asked to stop (every process must save together)."""
        if jax.process_count() == 1:
            return self.requested
        flags = multihost_utils.process_allgather(np.array([self.requested], np.int32))
        return bool(np.any(flags))


def plan(config, dims, num_devices, accumulation):
    mesh = mesh_plan.Mesh(config.mesh.fsdp, config.mesh.tp)
    micro_batch = config.batch.per_device_size * mesh.fsdp
    mesh_plan.check(mesh, dims, num_devices, micro_batch)
    modules = gemma4_map.tunix_lora_modules(config.lora.target_modules)
    estimate = mesh_plan.hbm_estimate(
        dims, mesh, seq_len=config.data.max_seq_len, micro_batch=micro_batch,
        base_bytes=_BYTES[config.model.dtype], lora_rank=config.lora.rank,
        tunix_modules=modules, remat=config.remat)
    hbm = config.hardware.hbm_gib_per_chip * mesh_plan.GIB
    log.info("mesh (fsdp=%d, tp=%d), micro-batch %d x %d accumulation steps; HBM estimate "
             "per chip:\n%s", mesh.fsdp, mesh.tp, micro_batch, accumulation,
             mesh_plan.format_estimate(estimate, hbm))
    mesh_plan.check_fits(estimate, hbm)
    return mesh, micro_batch


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
                                opt_shardings=opt_shardings, batch_sharding=batch_sharding)
    return State(lora, opt_state, base, rngs, lora_shardings, opt_shardings, batch_sharding,
                 step)


def _checkpoint_meta(config, fingerprint):
    return {"lora_rank": config.lora.rank, "lora_alpha": float(config.lora.alpha),
            "lora_targets": sorted(config.lora.target_modules), "base_model": fingerprint}


def train(config, workdir):
    """Runs (or resumes) the training run `config` in `workdir`; returns the last step."""
    setup_devices(config)
    process = jax.process_index()
    run_dir_lib.prepare(workdir)
    if process == 0:
        config_cli.write_resolved_config(config, workdir)
        base_model.resolve(config.model.name, workdir, seed=config.seed)  # creates the tiny base
    _sync("base model")
    base_dir = base_model.resolve(config.model.name, workdir, seed=config.seed)
    hf_config = base_model.read_config(base_dir)
    dims = gemma4_map.Dims.from_hf_config(hf_config)

    accumulation = hparams.gradient_accumulation_steps(config.batch, config.mesh.fsdp)
    mesh_shape, micro_batch = plan(config, dims, jax.device_count(), accumulation)
    base_files = base_model.safetensors_files(base_dir)  # every shard opens, or a clear error
    fingerprint = {"config": hf_config.get("_name_or_path") or base_dir,
                   "tensors": len(base_files), "vocab": dims.vocab, "layers": dims.num_layers}

    checkpoints = checkpoints_lib.manager(
        os.path.join(workdir, run_dir_lib.CHECKPOINTS), config.checkpoints_to_keep,
        config.checkpoint_every_steps)
    meta = _checkpoint_meta(config, fingerprint)
    checkpoints_lib.check_latest(checkpoints, meta)

    from transformers import AutoTokenizer  # pylint: disable=import-outside-toplevel
    tokenizer = AutoTokenizer.from_pretrained(base_dir)
    prepared = pipeline.prepare(config.data, tokenizer)
    micro_batches = views.grain_batches(prepared.sequences, micro_batch,
                                        jax.process_index(), jax.process_count())
    total_steps = len(micro_batches) // accumulation
    if config.max_steps:
        total_steps = min(total_steps, config.max_steps)
    if total_steps == 0:
        raise ValueError(f"{len(micro_batches)} micro-batches of {micro_batch} sequences make "
                         f"no step of {accumulation} accumulation steps: not enough data")
    log.info("data: %d rows kept of %d read (%s dropped), %d sequences, %d steps",
             prepared.report.kept, prepared.report.rows_read, dict(prepared.report.dropped),
             len(prepared.sequences["input_ids"]), total_steps)

    mesh = make_mesh(mesh_shape)
    state = build_state(base_dir, dims, mesh, config, total_steps)
    lora, opt_state = state.lora, state.opt_state

    data_iterator = iter(micro_batches.to_iter_dataset())
    step = 0
    restored = checkpoints_lib.restore_latest(checkpoints, lora, opt_state, data_iterator)
    if restored:
        step, lora, opt_state = restored
        log.info("resumed from checkpoint at step %d", step)

    if process == 0:
        run_dir_lib.write_json(os.path.join(workdir, run_dir_lib.RUN_INFO), {
            "stack": "tpu", "base_model": base_dir, "model_name": config.model.name,
            "total_steps": total_steps, "accumulation_steps": accumulation,
            "micro_batch": micro_batch, "effective_batch": config.batch.effective_size,
            "seq_len": config.data.max_seq_len, "mesh": {"fsdp": mesh_shape.fsdp,
                                                         "tp": mesh_shape.tp},
            "devices": jax.device_count(), "processes": jax.process_count(),
            "device_kind": jax.devices()[0].device_kind, "versions": _versions(),
            "lora": meta, "data": {"rows_read": prepared.report.rows_read,
                                   "kept": prepared.report.kept,
                                   "dropped": dict(prepared.report.dropped)}})
    return _loop(config, workdir, step, total_steps, accumulation, micro_batch, dims,
                 lora, opt_state, state.base, state.rngs, data_iterator, state.step,
                 state.batch_sharding, checkpoints, meta)


def _global_batch(data_iterator, accumulation, micro_batch, batch_sharding):
    micro = [next(data_iterator) for _ in range(accumulation)]
    local = {name: np.stack([m[name] for m in micro]) for name in micro[0]}
    return {name: jax.make_array_from_process_local_data(
        batch_sharding, value, (accumulation, micro_batch, value.shape[-1]))
        for name, value in local.items()}


def _loop(config, workdir, step, total_steps, accumulation, micro_batch, dims, lora, opt_state,
          base, rngs, data_iterator, step_fns, batch_sharding, checkpoints, meta):
    process = jax.process_index()
    writer = run_dir_lib.MetricsWriter(workdir, resume_step=step, enabled=process == 0)
    preemption = _Preemption()
    schedule = optimizer_lib.learning_rate_schedule(config.optimizer, total_steps)
    flops_per_token = flops.flops_per_token(dims, config.data.max_seq_len, config.lora.rank,
                                      gemma4_map.tunix_lora_modules(config.lora.target_modules))
    peak = config.hardware.peak_tflops_per_chip * 1e12
    seed_key = jax.random.key(config.seed)
    progress = None
    if process == 0:
        from tqdm import tqdm  # pylint: disable=import-outside-toplevel
        progress = tqdm(total=total_steps, initial=step, desc="train", unit="step",
                        dynamic_ncols=True)
    try:
        while step < total_steps:
            started = time.time()
            batch = _global_batch(data_iterator, accumulation, micro_batch, batch_sharding)
            key = jax.random.fold_in(seed_key, step)
            lora, opt_state, metrics = step_fns.train(lora, opt_state, base, rngs, batch, key)
            metrics = jax.device_get(metrics)
            elapsed = time.time() - started
            step += 1
            record = {
                "step": step, "loss": float(metrics["loss"]),
                "learning_rate": float(schedule(step - 1)),
                "grad_norm": float(metrics["grad_norm"]),
                "trained_tokens": int(metrics["trained_tokens"]), "tokens": int(metrics["tokens"]),
                "trained_tokens_per_s": float(metrics["trained_tokens"]) / elapsed,
                "tokens_per_s": float(metrics["tokens"]) / elapsed, "step_time_s": elapsed,
                "mfu": flops.mfu(float(metrics["tokens"]) / elapsed, flops_per_token,
                                 jax.device_count(), peak)}
            if step % config.log_every == 0 or step == total_steps:
                writer.write(record)
            if progress is not None:
                progress.update(1)
                progress.set_postfix(loss=f"{record['loss']:.4f}",
                                     tok_s=f"{record['tokens_per_s']:.0f}")
            stop = preemption.agreed()
            checkpoints_lib.save(checkpoints, step, lora, opt_state, data_iterator,
                                 {**meta, "step": step}, force=stop or step == total_steps)
            if stop:
                log.warning("SIGTERM: saved a checkpoint at step %d, exiting", step)
                break
    finally:
        checkpoints.wait_until_finished()
        writer.close()
        if progress is not None:
            progress.close()
    return step

