"""The TPU training run: plan, load, train, checkpoint, resume.

Everything that can be checked without weights is checked first, in seconds:
the run directory is writable, the mesh divides the model, the run fits in
HBM, the data yields trained tokens, the base checkpoint's files open, and an
existing checkpoint was made with this model and LoRA shape. Only then are
weights loaded and XLA compiles the step.
"""

import logging
import os
import time

import jax
import numpy as np
from jax.experimental import multihost_utils
from jax.experimental.compilation_cache import compilation_cache
from orbax.checkpoint import multihost as orbax_multihost

from common import cli
from common import machines
from common import run_dir as run_dir_lib
from common import storage
from data import packing
from data import views
from gemma4 import base_model
from gemma4 import gemma4_map
from gemma4 import orbax_lora
from training.common import billing
from training.common import lifecycle
from training.common import metrics as metrics_lib
from training.common import preemption as preemption_lib
from training.tpu import checkpoints as checkpoints_lib
from training.tpu import layer_scan
from training.tpu import libtpu_flags
from training.tpu import mesh_plan
from training.tpu import model as model_lib
from training.tpu import optimizer as optimizer_lib
from training.tpu import sharding
from training.tpu import state as state_lib
from training.tpu import train_step

log = logging.getLogger("training.tpu")


_WRONG_MACHINE_HINT = ("Run it on the machine it names, with its runtime (docs/build.md, "
                       "\"Runtimes\"), or use --config=cpu.py here.")


def setup_devices(config):
    """Virtual CPU devices and multi-process JAX; must run before JAX sees a device.

    Then refuses a config for TPU chips this process does not see, before anything
    is read or downloaded.
    """
    if machines.get(config.machine).platform == "cpu":
        # A CPU config runs JAX on CPU also where libtpu is installed (the TPU
        # image on a CPU host): JAX would otherwise start libtpu, which aborts
        # without TPU chips (//tests:training_image_test).
        jax.config.update("jax_platforms", "cpu")
    else:
        libtpu_flags.use(config)
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
            try:
                jax.distributed.initialize()
            except (RuntimeError, ValueError) as e:  # no TPU pod slice to detect
                check_devices(config)  # names what this process sees instead
                raise cli.UserError(f"jax.distributed.initialize() failed: {e}") from e
    check_devices(config)


COMPILATION_CACHE = "compilation_cache"  # RUN_DIR/compilation_cache/


class CompilationCache:
    """JAX's persistent compilation cache in the run directory, and what it did.

    `use` must come before the first compile. JAX reports each program it
    loaded from the cache or compiled and stored (jax.monitoring events); the
    trainer logs the first step's time beside them, so a rerun shows whether
    it compiled again.
    """

    def __init__(self):
        self.hits = self.stored = 0

    def use(self, config, workdir):
        """Points JAX at RUN_DIR/compilation_cache, or the config's own folder
        (or at none, when disabled); returns the path or None."""
        # JAX opens its cache once per process: a second run in this process
        # (tests) must not read or write the first one's.
        compilation_cache.reset_cache()
        if not config.compilation_cache.enabled:
            jax.config.update("jax_compilation_cache_dir", None)
            return None
        path = config.compilation_cache.dir or storage.join(workdir, COMPILATION_CACHE)
        jax.config.update("jax_compilation_cache_dir", path)
        jax.config.update("jax_persistent_cache_min_compile_time_secs",
                          float(config.compilation_cache.min_compile_s))
        jax.monitoring.register_event_listener(self._count)
        return path

    def close(self):
        jax.monitoring.unregister_event_listener(self._count)

    def _count(self, event, **_):
        if event == "/jax/compilation_cache/cache_hits":
            self.hits += 1
        elif event == "/jax/compilation_cache/cache_misses":  # JAX counts it as it writes
            self.stored += 1

    def describe(self):
        return (f"{self.hits} program(s) loaded from the compilation cache, "
                f"{self.stored} compiled and stored")


def check_devices(config):
    """Raises WrongMachine unless JAX sees the TPU chips of the config's machine."""
    devices = jax.devices()
    machines.check_visible(machines.get(config.machine), devices[0].platform, len(devices),
                           hint=_WRONG_MACHINE_HINT)


def _sync(name):
    if jax.process_count() > 1:
        multihost_utils.sync_global_devices(name)


# How long a process waits for the others to compile the step (every one
# compiles it, or loads it from the compilation cache, before any runs it).
COMPILE_BARRIER_S = 3600


def _compile_on_every_process(train, *args):
    """Compiles the step for `args` on every process before any process runs it.

    The step's collectives wait for a peer only so long: on CPU, Gloo gives up
    after 30 s, so a process that finished compiling that much before another
    failed the first step (two processes sharing 2 busy cores). The barrier
    here is the distributed runtime's (no collective), with a timeout of its
    own; the step then runs the executable compiled here."""
    if jax.process_count() == 1:
        return
    train.lower(*args).compile()
    orbax_multihost.sync_global_processes(
        "g4_step_compiled", timeout=COMPILE_BARRIER_S,
        processes=set(range(jax.process_count())))


def _any_process(flag):
    """True when `flag` is set on any process (every process must save together)."""
    if jax.process_count() == 1:
        return flag
    return bool(np.any(multihost_utils.process_allgather(np.array([flag], np.int32))))


def plan(dims, config, machine, num_devices):
    """Checks the mesh against the model and the HBM estimate against the machine."""
    mesh = mesh_plan.Mesh.from_config(config)
    accumulation, micro_batch, _ = mesh_plan.batch_shape(config)
    mesh_plan.check(mesh, dims, num_devices, micro_batch)
    estimate = mesh_plan.config_estimate(
        dims, config, layer_scan.Plan.of(dims.layer_types, config.scan_layers).scanned)
    hbm = machine.hbm_bytes_per_chip
    log.info("mesh (fsdp=%d, tp=%d), micro-batch %d x %d accumulation steps; HBM estimate "
             "per chip:\n%s", mesh.fsdp, mesh.tp, micro_batch, accumulation,
             mesh_plan.format_estimate(estimate, hbm))
    mesh_plan.check_fits(estimate, hbm)


def preflight(config):
    """`plan` from a Hub base's config.json alone, before any weight downloads.

    A mesh that cannot split the model, or a step over the chip's HBM, then
    fails in seconds instead of after a 62 GB download. Returns whether it
    planned: local and tiny bases are planned once they are open.
    """
    name = config.model.name
    if os.path.exists(name) or not base_model.is_hub_id(name):
        return False
    dims = gemma4_map.Dims.from_hf_config(base_model.config_only(name)[0])
    plan(dims, config, machines.get(config.machine), jax.device_count())
    return True


def load_state(base_dir, dims, mesh, config, total_steps):
    """Loads the base with fresh (or `lora.init_from`) LoRA factors; the state around it."""
    started = time.time()
    model = model_lib.load(base_dir, dims, mesh, config.model.dtype, config.lora, config.seed,
                           config.scan_layers)
    if config.lora.init_from:
        # An Orbax LoRA state: a checkpoint step or //conversion:import_adapter's output.
        model_lib.set_lora(model, orbax_lora.read(config.lora.init_from))
    log.info("base model loaded and LoRA added in %.1fs: %d LoRA tensors; %s",
             time.time() - started, len(model_lib.lora_names(model)),
             model.layer_plan.describe())
    return state_lib.build(model, mesh, config, total_steps, dims)


def train(config, workdir, shared_fs=False):
    """Runs (or resumes) the training run `config` in `workdir`; returns the last step.

    With several processes `workdir` must be a gs:// URL, or `shared_fs` must say
    that every host mounts it.
    """
    if not shared_fs:
        run_dir_lib.check_shared(workdir, config.distributed.num_processes)
    setup_devices(config)
    train_step.step_key(config, 0)  # an unknown dropout_rng fails here, not after loading
    if not shared_fs:
        run_dir_lib.check_shared(workdir, jax.process_count())  # pod slices: known only now
    cache = CompilationCache()
    cache_path = cache.use(config, workdir)
    planned = preflight(config)
    run = lifecycle.start(config, workdir, stack="tpu", is_main=jax.process_index() == 0,
                          barrier=lambda: _sync("base model"), data_parallel=config.mesh.fsdp)
    with run.record:
        try:
            step = _run(run, planned, cache, cache_path)
        finally:
            if cache_path:
                cache.close()
    if run.record.outcome == billing.PREEMPTED and config.preempted_exit_code:
        # Checkpointed and recorded; the status tells a JobSet to restart the job.
        raise SystemExit(config.preempted_exit_code)
    return step


def _run(run, planned, cache, cache_path):
    """`train` once the run directory and its record exist."""
    config, workdir = run.config, run.workdir
    if not planned:
        plan(run.dims, config, run.machine, jax.device_count())
    checkpoints = checkpoints_lib.manager(
        storage.join(workdir, run_dir_lib.CHECKPOINTS), config.checkpoints_to_keep,
        config.checkpoint_every_steps)
    checkpoints_lib.check_latest(checkpoints, run.lora_meta)
    log.info(lifecycle.load_data(run))

    mesh = sharding.make_mesh(config.mesh.fsdp, config.mesh.tp)
    state = load_state(run.base_dir, run.dims, mesh, config, run.total_steps)
    _, micro_batch, _ = mesh_plan.batch_shape(config)
    micro_batches = views.grain_batches(run.prepared.sequences, micro_batch,
                                        jax.process_index(), jax.process_count())
    data_iterator = iter(micro_batches.to_iter_dataset())
    step = 0
    restored = checkpoints_lib.restore_latest(checkpoints, state.lora, state.opt_state,
                                              data_iterator, state.plan)
    if restored:
        step, state.lora, state.opt_state = restored
        log.info("resumed from checkpoint at step %d", step)
        run.record.resumed(step)
    if jax.process_index() == 0:
        lifecycle.write_run_info(
            run, devices=jax.device_count(), processes=jax.process_count(),
            device_kind=jax.devices()[0].device_kind,
            parallelism={"data": config.mesh.fsdp, "tensor": config.mesh.tp,
                         "fsdp": config.mesh.fsdp > 1},
            attention=config.attention.kernel)
    if cache_path:
        log.info("compilation cache: %s", cache_path)
    return _loop(run, state, step, data_iterator, checkpoints, cache)


def _global_batch(data_iterator, shape, batch_sharding):
    micro = [next(data_iterator) for _ in range(shape[0])]
    local = {name: np.stack([m[name] for m in micro]) for name in micro[0]}
    return {name: jax.make_array_from_process_local_data(batch_sharding, value, shape)
            for name, value in local.items()}


def _evaluate(run, state, lora):
    """The validation loss: summed over every trained token of the validation set,
    divided by their number (the GPU stack's definition too)."""
    shape = mesh_plan.batch_shape(run.config)
    sequences = packing.pad_rows(run.prepared.eval_sequences, shape[0] * shape[1],
                                 run.tokenizer.pad_token_id)
    iterator = iter(views.grain_batches(sequences, shape[1], jax.process_index(),
                                        jax.process_count()).to_iter_dataset())
    total = trained = 0.0
    for _ in range(len(sequences["input_ids"]) // (shape[0] * shape[1])):
        batch = _global_batch(iterator, shape, state.batch_sharding)
        batch_total, batch_trained = jax.device_get(state.step.evaluate(lora, state.base, batch))
        total, trained = total + float(batch_total), trained + float(batch_trained)
    return total / trained, int(trained)


def _loop(run, state, step, data_iterator, checkpoints, cache=None):
    config, main = run.config, jax.process_index() == 0
    writer = metrics_lib.MetricsWriter(run.workdir, resume_step=step, enabled=main,
                                     config=config)
    preemption = preemption_lib.Preemption(agree=_any_process)
    schedule = optimizer_lib.learning_rate_schedule(config.optimizer, run.total_steps)
    batch_shape = mesh_plan.batch_shape(config)
    lora, opt_state = state.lora, state.opt_state
    progress, first_logged, compiled = None, False, False
    if main:
        from tqdm import tqdm  # pylint: disable=import-outside-toplevel
        progress = tqdm(total=run.total_steps, initial=step, desc="train", unit="step",
                        dynamic_ncols=True)
    try:
        while step < run.total_steps:
            started = time.time()
            batch = _global_batch(data_iterator, batch_shape, state.batch_sharding)
            key = train_step.step_key(config, step)
            if not compiled:
                _compile_on_every_process(state.step.train, lora, opt_state, state.base,
                                          state.rngs, batch, key)
                compiled = True
            lora, opt_state, metrics = state.step.train(lora, opt_state, state.base,
                                                        state.rngs, batch, key)
            metrics = jax.device_get(metrics)
            if cache is not None and progress is not None and not first_logged:
                first_logged = True  # the first step of this process: compiled or loaded
                log.info("first step in %.1fs: %s", time.time() - started, cache.describe())
            step += 1
            seconds = time.time() - started
            run.record.stepped(step)
            writer.count(seconds, int(metrics["tokens"]), int(metrics["trained_tokens"]))
            record = lifecycle.step_record(
                run, step=step, loss=metrics["loss"], learning_rate=schedule(step - 1),
                grad_norm=metrics["grad_norm"], trained_tokens=metrics["trained_tokens"],
                tokens=metrics["tokens"], seconds=seconds, chips=jax.device_count())
            evaluated = None
            if lifecycle.evaluates_at(run, step):
                began = time.time()
                evaluated = _evaluate(run, state, lora)
                run.record.evaluation(step, time.time() - began)
            if progress is not None:
                progress.update(1)
                progress.set_postfix(loss=f"{record['loss']:.4f}",
                                     tok_s=f"{record['tokens_per_s']:.0f}")
            stop = preemption.stop()
            began = time.time()
            saved = checkpoints_lib.save(checkpoints, step, lora, opt_state, data_iterator,
                                         {**run.lora_meta, "step": step},
                                         force=stop or step == run.total_steps, plan=state.plan)
            if saved:
                run.record.checkpoint(step, time.time() - began)
            # A checkpoint's step is always logged: a resume continues its totals.
            if saved or step % config.log_every == 0 or step == run.total_steps:
                writer.write(record)
            if evaluated is not None:
                writer.write_eval(step, *evaluated)
            if saved:
                writer.flush()
            if stop:
                log.warning("SIGTERM: saved a checkpoint at step %d, exiting", step)
                run.record.outcome = billing.PREEMPTED
                break
    finally:
        checkpoints.wait_until_finished()
        writer.close()
        if progress is not None:
            progress.close()
    return step
