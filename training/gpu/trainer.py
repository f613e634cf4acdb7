"""The GPU training run: TRL SFTTrainer + PEFT LoRA (+ FSDP), from the shared recipe.

What makes it comparable number for number with the TPU stack:
  * the same hyperparameters (training/common/hparams.py) and the same
    effective batch arithmetic (per-device x accumulation x processes);
  * the same token ids and loss masks, in the same order: the data package's
    `datasets.Dataset` view read sequentially, collated into `labels`;
  * the same loss: transformers divides the summed token loss by the trained
    tokens of the whole accumulated batch (`num_items_in_batch`), as the TPU
    step does;
  * the same schedule (HF's linear warmup + cosine equals
    training/common/schedule.py) and AdamW (see training/tpu/optimizer.py);
  * the same LoRA parameters: Tunix fuses K and V of sliding layers into one
    einsum whose LoRA has one A, so here v_proj's lora_A is tied to k_proj's.
"""

import contextlib
import json
import logging
import os
import time

import torch
import transformers
from transformers import TrainerCallback

from common import cli
from common import run_dir as run_dir_lib
from common import storage
from data import packing
from data import views
from gemma4 import gemma4_map
from training.common import billing
from training.common import hparams
from training.common import lifecycle
from training.common import metrics as metrics_lib
from training.common import preemption as preemption_lib
from training.gpu import config_base

log = logging.getLogger("training.gpu")
ADAPTER = "adapter"  # the final PEFT adapter, under the run directory


class WrongProcessCount(cli.UserError):
    pass


def world():
    return int(os.environ.get("WORLD_SIZE", "1")), int(os.environ.get("RANK", "0"))


def lora_target_regex(target_modules):
    """PEFT target_modules: the language model's projections, never the vision tower."""
    return r"^(?!.*vision).*\.(" + "|".join(sorted(target_modules)) + r")$"


def token_weighted_loss(trainer):
    """Makes the Trainer pass `num_items_in_batch` to the model, for every Gemma 4 class.

    transformers marks the multimodal Gemma4ForConditionalGeneration (the class of
    google/gemma-4-31B-it) `accepts_loss_kwargs = False`, for image tokens it may
    filter out of the loss. The Trainer then averages per-micro-batch means
    instead of dividing the summed loss by the trained tokens of the whole
    accumulated batch, as the TPU step does, and TRL's rescaling for
    `average_tokens_across_devices` then scales the loss with the process count.
    Text rows have no image token to filter, and the class's forward passes its
    loss keyword arguments on to the causal-LM loss, which takes
    `num_items_in_batch`; so the flag is set back.
    """
    trainer.model_accepts_loss_kwargs = True
    return trainer


def tie_fused_kv(model, dims):
    """Ties v_proj's lora_A to k_proj's on layers whose K and V Tunix fuses."""
    tied = 0
    for name, module in model.named_modules():
        if not name.endswith("self_attn") or not hasattr(module, "v_proj"):
            continue
        k, v = module.k_proj, module.v_proj
        if not (hasattr(k, "lora_A") and hasattr(v, "lora_A")):
            continue
        for adapter in k.lora_A:
            v.lora_A[adapter].weight = k.lora_A[adapter].weight
        tied += 1
    expected = sum(1 for layer in range(dims.num_layers) if not dims.attention(layer).k_eq_v)
    if tied != expected:
        raise gemma4_map.MappingError(f"tied k/v LoRA A on {tied} layers, expected {expected}")
    return tied


def order_buffers(model):
    """Registers every module's buffers in name order, the same on every process.

    transformers' Gemma 4 rotary embedding registers its per-layer-type buffers
    while iterating a `set` of layer types, whose order follows the process's
    string hash seed. DDP copies rank 0's buffers to the other ranks by
    position, so with another order a rank would get the sliding-window
    frequencies in its full-attention buffers and vice versa.
    """
    for module in model.modules():
        module._buffers = dict(sorted(module._buffers.items()))  # pylint: disable=protected-access
    return model


def check_checkpoints(output_dir, run):
    """The newest Trainer checkpoint, refused if made with another LoRA shape."""
    last = transformers.trainer_utils.get_last_checkpoint(output_dir) \
        if os.path.isdir(output_dir) else None
    if last is None:
        return None
    with open(os.path.join(last, "adapter_config.json")) as f:
        saved = json.load(f)
    expected = run.lora_meta
    lifecycle.check_compatible({"lora_rank": saved.get("r"), "lora_alpha": saved.get("lora_alpha")},
                               {k: expected[k] for k in ("lora_rank", "lora_alpha")}, last)
    return last


def lora_state_dict(model):
    """{name: full CPU tensor} of the model's LoRA factors, returned on every rank.

    Under FSDP2 every parameter is a DTensor sharded over the ranks, and
    gathering one is a collective that all ranks must join in the same order:
    so every rank calls this (a rank-0-only save waits forever for the
    others). Only the LoRA factors are gathered; the frozen base never leaves
    its shards (a full state dict would gather the whole 62 GB onto rank 0).
    """
    from torch.distributed.tensor import DTensor  # pylint: disable=import-outside-toplevel
    factors = {}
    # remove_duplicate=False: v_proj's lora_A is k_proj's (tie_fused_kv), and
    # the adapter file holds both names.
    for name, param in model.named_parameters(remove_duplicate=False):
        if "lora_" not in name:
            continue
        full = param.full_tensor() if isinstance(param, DTensor) else param
        factors[name] = full.detach().to("cpu", copy=True)
    return factors


def save_adapter(model, out_dir, is_main):
    """Writes the PEFT adapter of `model` into `out_dir`; every rank must call it."""
    factors = lora_state_dict(model)
    if is_main:
        model.save_pretrained(out_dir, state_dict=factors)


class _AdapterCheckpoints(TrainerCallback):
    """Each FSDP checkpoint also gets the PEFT adapter, gathered from the LoRA shards.

    With SHARDED_STATE_DICT the Trainer's checkpoints hold each rank's shards
    (for resuming) but no adapter files: this writes them, so that checkpoints
    stay readable by check_checkpoints, export and PEFT.
    """

    def __init__(self, is_main):
        self._is_main = is_main

    def on_save(self, args, state, control, model=None, **kwargs):
        out_dir = os.path.join(args.output_dir, f"checkpoint-{state.global_step}")
        save_adapter(model, out_dir, self._is_main)


def _distributed():
    return torch.distributed.is_available() and torch.distributed.is_initialized()


def _barrier():
    if _distributed():
        torch.distributed.barrier()


def _any_rank(flag):
    """True when `flag` is set on any rank: every rank must stop, and save its
    shards, at the same step (a VM's SIGTERM reaches its processes at slightly
    different times)."""
    if not _distributed():
        return flag
    on_gpu = torch.distributed.get_backend() == "nccl"
    value = torch.tensor([int(flag)], device=torch.cuda.current_device() if on_gpu else "cpu")
    torch.distributed.all_reduce(value, op=torch.distributed.ReduceOp.MAX)
    return bool(value.item())


class BucketCheckpoints(TrainerCallback):
    """The checkpoints of a gs:// run: the Trainer writes them into a local mirror,
    each is uploaded once saved (its commit marker last), and those the Trainer
    rotated out are deleted from the bucket too. `pull` brings back the newest
    committed one before a resume. Rank 0 moves the files; the others wait."""

    def __init__(self, where, is_main):
        self.mirror = storage.Mirror(where, clear=is_main)
        self._is_main = is_main

    def _committed(self):
        names = [n for n in storage.listdir(self.mirror.where) if n.startswith(_CHECKPOINT)]
        return [n for n in names
                if storage.exists(storage.join(self.mirror.where, n, storage.COMMIT_MARKER))]

    def pull(self):
        if self._is_main:
            steps = sorted(int(n[len(_CHECKPOINT):]) for n in self._committed())
            if steps:
                self.mirror.pull([f"{_CHECKPOINT}{steps[-1]}"])
        _barrier()

    def on_save(self, args, state, control, **kwargs):
        _barrier()  # every rank's shards are on the disk
        if not self._is_main:
            return
        name = f"{_CHECKPOINT}{state.global_step}"
        storage.push(os.path.join(self.mirror.local, name),
                     storage.join(self.mirror.where, name), mark_complete=True)
        kept = set(os.listdir(self.mirror.local))
        for old in self._committed():
            if old not in kept:
                storage.remove(storage.join(self.mirror.where, old))


_CHECKPOINT = "checkpoint-"  # the Trainer's folder prefix


class _RunCallback(TrainerCallback):
    """Metrics with the TPU stack's names (metrics.jsonl and the trackers), the
    run's billed segment (run.json), and SIGTERM."""

    def __init__(self, run, step_tokens, chips, enabled):
        self._run, self._step_tokens, self._chips = run, step_tokens, chips
        self._enabled = enabled
        self._writer = None
        self._started = None
        self._elapsed = 0.0
        self._since = 0.0  # the end of the last thing timed: what a save waited on
        self._eval = None  # the validation record of this step, written after its step's
        self.preemption = preemption_lib.Preemption(agree=_any_rank)
        self.preempted = False  # whether the run stopped for a SIGTERM on any rank

    def on_train_begin(self, args, state, control, **kwargs):
        self._writer = metrics_lib.MetricsWriter(self._run.workdir, resume_step=state.global_step,
                                                 enabled=self._enabled, config=self._run.config)
        if state.global_step:
            self._run.record.resumed(state.global_step)

    def on_step_begin(self, args, state, control, **kwargs):
        self._started = time.time()

    def on_save(self, args, state, control, **kwargs):
        self._run.record.checkpoint(state.global_step, time.time() - self._since)
        self._writer.flush()

    def on_step_end(self, args, state, control, **kwargs):
        self._elapsed = time.time() - self._started
        step = state.global_step
        self._run.record.stepped(step)
        trained, tokens = self._step_tokens[step - 1]
        self._writer.count(self._elapsed, tokens, trained)
        if lifecycle.evaluates_at(self._run, step):
            began = time.time()
            self._eval = (step, *evaluate(kwargs["model"], self._run, args.device))
            self._run.record.evaluation(step, time.time() - began)
        if self.preemption.stop():
            self.preempted = True
            self._run.record.outcome = billing.PREEMPTED
            control.should_save = True
            control.should_training_stop = True
        # A checkpoint's step is always logged: a resume continues its totals.
        control.should_log = control.should_log or control.should_save
        if self._eval and not control.should_log:
            self._write_eval()
        self._since = time.time()

    def _write_eval(self):
        self._writer.write_eval(*self._eval)
        self._eval = None

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not logs or "loss" not in logs:
            return
        trained, tokens = self._step_tokens[state.global_step - 1]
        self._writer.write(lifecycle.step_record(
            self._run, step=state.global_step, loss=logs["loss"],
            learning_rate=logs.get("learning_rate", 0.0), grad_norm=logs.get("grad_norm"),
            trained_tokens=trained, tokens=tokens, seconds=self._elapsed or 1e-9,
            chips=self._chips))
        if self._eval:
            self._write_eval()
        self._since = time.time()

    def on_train_end(self, args, state, control, **kwargs):
        if self._writer is not None:
            if self._eval:
                self._write_eval()
            self._writer.close()


def evaluate(model, run, device):
    """The validation loss: summed over every trained token of the validation set,
    divided by their number, as the TPU stack computes it. Every process takes its
    share of the rows (padded to whole micro-batches on every process, so each
    runs the same number of forward passes) and the sums are added up."""
    processes, rank = world()
    per_device = run.config.batch.per_device_size
    sequences = packing.pad_rows(run.prepared.eval_sequences, per_device * processes,
                                 run.tokenizer.pad_token_id)
    share = len(sequences["input_ids"]) // processes
    rows = views.hf_dataset({name: values[rank * share:(rank + 1) * share]
                             for name, values in sequences.items()})
    sums = torch.zeros(2, dtype=torch.float64, device=device)
    was_training = model.training
    model.eval()
    with torch.no_grad():
        for start in range(0, share, per_device):
            batch = {name: value.to(device) for name, value in views.collate(
                [rows[i] for i in range(start, start + per_device)]).items()}
            # num_items_in_batch=1: the causal-LM loss returns its sum, not its mean.
            loss = model(**batch, num_items_in_batch=torch.tensor(1, device=device)).loss
            sums += torch.stack([loss.double(),
                                 (batch["labels"][:, 1:] != views.IGNORE_INDEX).sum().double()])
    model.train(was_training)
    if processes > 1:
        torch.distributed.all_reduce(sums)
    total, trained = sums.tolist()
    return total / trained, int(trained)


def step_token_counts(sequences, per_step):
    """(trained tokens, real tokens) of every optimizer step, in the sequential order."""
    counts = []
    for start in range(0, len(sequences["input_ids"]) - per_step + 1, per_step):
        rows = slice(start, start + per_step)
        counts.append((int(sequences["loss_mask"][rows, 1:].sum()),
                       int((sequences["segment_ids"][rows] > 0).sum())))
    return counts


def train(config, workdir):
    """Runs (or resumes) `config` in `workdir`; returns the last optimizer step."""
    processes, rank = world()
    if processes != config.num_processes:
        raise WrongProcessCount(f"config.num_processes={config.num_processes} but {processes} "
                                "processes are running")
    run = lifecycle.start(config, workdir, stack="gpu", is_main=rank == 0,
                          barrier=lambda: lifecycle.wait_for_main(workdir, config),
                          data_parallel=processes)
    with run.record:
        step = _train(run, processes, rank)
    if run.record.outcome == billing.PREEMPTED and config.preempted_exit_code:
        # Checkpointed and recorded (`preempted`, not `failed`: outside the record);
        # the status tells a JobSet to restart the job.
        raise SystemExit(config.preempted_exit_code)
    return step


def _train(run, processes, rank):
    """`train` once the run directory and its record exist."""
    config, workdir = run.config, run.workdir
    log.info(lifecycle.load_data(run))
    bucket = None
    output_dir = storage.join(workdir, run_dir_lib.CHECKPOINTS)
    if storage.is_url(workdir):
        bucket = BucketCheckpoints(output_dir, is_main=rank == 0)
        output_dir = bucket.mirror.local
    # Creating the arguments starts torch.distributed with several processes.
    args = training_args(config, output_dir, processes, run.accumulation, run.total_steps,
                         on_gpu=torch.cuda.is_available(), rank=rank)
    if bucket:
        bucket.pull()
    resume = check_checkpoints(output_dir, run)

    model = _model(config, run.base_dir, run.dims)
    callback = _RunCallback(run, step_token_counts(run.prepared.sequences,
                                                   config.batch.effective_size),
                            chips=processes, enabled=rank == 0)
    from trl import SFTTrainer  # pylint: disable=import-outside-toplevel
    trainer = SFTTrainer(model=model, args=args, train_dataset=views.hf_dataset(
                             run.prepared.sequences),
                         data_collator=views.collate, processing_class=run.tokenizer,
                         callbacks=[callback])
    token_weighted_loss(trainer)
    if trainer.is_fsdp_enabled:  # on accelerators only (see training_args)
        trainer.add_callback(_AdapterCheckpoints(is_main=rank == 0))
    if bucket:  # last: a checkpoint is uploaded once complete
        trainer.add_callback(bucket)
    if rank == 0:
        lifecycle.write_run_info(
            run, devices=processes, processes=processes,
            device_kind=torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu",
            parallelism={"data": processes, "tensor": 1, "fsdp": bool(trainer.is_fsdp_enabled)},
            attention=config.model.attn_implementation)
    if resume:
        log.info("resuming from %s", resume)
    trainer.train(resume_from_checkpoint=resume)
    if callback.preempted:
        log.warning("SIGTERM: saved a checkpoint at step %d, exiting", trainer.state.global_step)
    else:  # every rank: the LoRA shards are gathered collectively
        final = storage.join(workdir, ADAPTER)
        with (storage.output_dir(final, overwrite=True) if rank == 0
              else contextlib.nullcontext()) as out:
            save_adapter(trainer.model, out, is_main=rank == 0)
    _leave_process_group()
    return trainer.state.global_step


def _leave_process_group():
    """Ends this rank's part in torch.distributed once every rank is done: left to
    interpreter exit, the process group's threads are torn down in no set order
    (one CPU run saw a gloo rank abort with 'terminate called without an active
    exception' after a finished run)."""
    if _distributed():
        torch.distributed.barrier()
        torch.distributed.destroy_process_group()


def _schedule(optimizer):
    """HF's cosine schedule, ending at `end_learning_rate` as the TPU stack's does."""
    if optimizer.end_learning_rate:
        return {"lr_scheduler_type": "cosine_with_min_lr",
                "lr_scheduler_kwargs": {"min_lr": optimizer.end_learning_rate}}
    return {"lr_scheduler_type": "cosine"}


def training_args(config, output_dir, processes, accumulation, total_steps, on_gpu, rank=0):
    """The SFTConfig of a run: the recipe's hyperparameters, our data, FSDP when asked.

    FSDP (version 2, one unit per decoder layer) goes through Accelerate, which
    applies it on accelerators only; with several CPU processes the same run
    is plain data parallel.

    Activation checkpointing (config.remat) is transformers' own in every
    layout, never Accelerate's FSDP `activation_checkpointing`: that one wraps
    each decoder layer in a checkpoint wrapper module, which PEFT's adapter
    state dict does not see through, so checkpoints and the adapter would lose
    the LoRA factors (docs/train-gpu.md). FSDP2 recomputes a layer under
    its pre-backward unshard either way (its pre-forward hook skips the
    all-gather in PRE_BACKWARD), so no extra all-gather is expected.
    """
    from trl import SFTConfig  # pylint: disable=import-outside-toplevel
    fsdp = config_base.use_fsdp(config, processes)
    fsdp_args = {}
    if fsdp:
        # Checkpoints keep each rank's shards (only the adapter's, for a PEFT
        # model) instead of gathering a full state dict onto rank 0;
        # _AdapterCheckpoints adds the PEFT adapter files.
        fsdp_args = dict(fsdp=True, fsdp_config={
            "version": 2, "transformer_layer_cls_to_wrap": ["Gemma4TextDecoderLayer"],
            "activation_checkpointing": False, "reshard_after_forward": True,
            "state_dict_type": "SHARDED_STATE_DICT"})
    return SFTConfig(
        output_dir=output_dir, per_device_train_batch_size=config.batch.per_device_size,
        gradient_accumulation_steps=accumulation, max_steps=total_steps,
        learning_rate=config.optimizer.learning_rate, **_schedule(config.optimizer),
        warmup_steps=hparams.warmup_steps(config.optimizer, total_steps),
        weight_decay=config.optimizer.weight_decay,
        adam_beta1=config.optimizer.b1, adam_beta2=config.optimizer.b2,
        adam_epsilon=config.optimizer.eps, max_grad_norm=config.optimizer.max_grad_norm,
        logging_steps=config.log_every, save_steps=config.checkpoint_every_steps,
        save_total_limit=config.checkpoints_to_keep, seed=config.seed, data_seed=config.seed,
        bf16=config.model.dtype == "bfloat16", use_cpu=not on_gpu,
        ddp_backend="gloo" if processes > 1 and not on_gpu else None,
        gradient_checkpointing=bool(config.remat),
        gradient_checkpointing_kwargs={"use_reentrant": False},
        train_sampling_strategy="sequential", dataloader_drop_last=True,
        dataset_kwargs={"skip_prepare_dataset": True}, remove_unused_columns=False,
        max_length=None, report_to=[], disable_tqdm=rank != 0,
        average_tokens_across_devices=True, **fsdp_args)


def _model(config, base_dir, dims):
    from peft import LoraConfig  # pylint: disable=import-outside-toplevel
    from peft import get_peft_model  # pylint: disable=import-outside-toplevel
    from peft import set_peft_model_state_dict  # pylint: disable=import-outside-toplevel
    dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16}[config.model.dtype]
    torch.manual_seed(config.seed)
    model = transformers.AutoModelForCausalLM.from_pretrained(
        base_dir, dtype=dtype, attn_implementation=config.model.attn_implementation)
    lora = LoraConfig(r=config.lora.rank, lora_alpha=config.lora.alpha,
                      lora_dropout=config.lora.dropout,
                      target_modules=lora_target_regex(config.lora.target_modules),
                      bias="none", task_type="CAUSAL_LM")
    model = order_buffers(get_peft_model(model, lora))
    tie_fused_kv(model, dims)
    if config.lora.init_from:
        # A PEFT adapter directory, e.g. the TPU stack's export (parity tests).
        from gemma4 import adapter as adapter_lib  # pylint: disable=import-outside-toplevel
        factors, saved = adapter_lib.read(config.lora.init_from)
        lifecycle.check_compatible({"lora_rank": saved["r"]}, {"lora_rank": config.lora.rank},
                                   config.lora.init_from)
        state = {k: torch.as_tensor(v) for k, v in factors.items()}
        result = set_peft_model_state_dict(model, state)
        if getattr(result, "unexpected_keys", None):
            raise gemma4_map.MappingError(f"unexpected adapter tensors {result.unexpected_keys[:3]}")
        tie_fused_kv(model, dims)
    return model
