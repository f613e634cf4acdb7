"""The fine-tuning hyperparameters, the one source both training stacks read.

Values are the reference recipe's (arXiv 2605.25645, see
training/common/recipe.md): LoRA r=64, alpha=64, dropout 0.05 on a bf16 base;
AdamW (weight decay 0.001) with a linear warmup to 1e-4 over 100 steps and
cosine decay to 0; effective batch 8; the first 10,000 CodeV-R1 rows, one
epoch, shuffle seed 42, 3072 tokens.

Machine configs (training/{tpu,gpu}/configs/*.py) start from `reference()` and
change only what the machine dictates (mesh, per-device batch); the CPU default
configs shrink the run through `tiny()`.
"""

import math

from ml_collections import config_dict

from common import cli
from data import pipeline

# LoRA targets in Hugging Face module names. The TPU stack maps them to Tunix
# names through gemma4/gemma4_map.py (q_einsum, kv_einsum and the K = V
# global layers' k_einsum, attn_vec_einsum, ...), so both stacks train the same set.
class RecipeError(cli.UserError):
    """Hyperparameters that contradict each other."""


LORA_TARGET_MODULES = ("q_proj", "k_proj", "v_proj", "o_proj",
                       "gate_proj", "up_proj", "down_proj")


def reference():
    """The reference recipe, for Gemma 4 31B on CodeV-R1."""
    c = config_dict.ConfigDict()
    c.seed = 0

    c.lora = config_dict.ConfigDict()
    c.lora.rank = 64
    c.lora.alpha = 64.0
    c.lora.dropout = 0.05
    c.lora.target_modules = LORA_TARGET_MODULES
    # Start from these LoRA factors instead of fresh ones: a directory holding
    # an Orbax `lora/` state (TPU) or a PEFT adapter (GPU). Empty: fresh.
    c.lora.init_from = ""

    c.optimizer = config_dict.ConfigDict()
    c.optimizer.learning_rate = 1e-4
    c.optimizer.weight_decay = 0.001
    # Library defaults of both Optax and torch AdamW.
    c.optimizer.b1 = 0.9
    c.optimizer.b2 = 0.999
    c.optimizer.eps = 1e-8
    # Global-norm clipping; 0 disables it, as in the reference.
    c.optimizer.max_grad_norm = 0.0
    c.optimizer.warmup_steps = 100
    # Or a fraction of the run's steps, used when warmup_steps is 0.
    c.optimizer.warmup_ratio = 0.0
    # Cosine decay from the peak to `end_learning_rate` at the last step.
    c.optimizer.end_learning_rate = 0.0

    c.batch = config_dict.ConfigDict()
    # Sequences per optimizer step, over all devices and accumulation steps.
    c.batch.effective_size = 8
    # Sequences per data-parallel replica per forward/backward pass.
    c.batch.per_device_size = 1

    # The data fields are the data package's (source, format, length, packing).
    c.data = pipeline.default_config()
    # The reference trains on the first 10,000 rows of CodeV-R1: that cap holds
    # for that source only; a user's own data is read whole (data/pipeline.py).
    c.data.max_rows = pipeline.REFERENCE_CAP

    c.remat = True
    # With a validation set (data.eval_*): eval_loss every N steps (0: only at the end).
    c.eval_every_steps = 100
    c.checkpoint_every_steps = 100
    c.checkpoints_to_keep = 3
    # How often run.json's heartbeat is written: what a process killed outright
    # is billed until (training/common/billing.py). 0: every 2 s in a local run
    # directory, every 60 s in a bucket (each write is a request).
    c.heartbeat_s = 0.0
    # The exit status after a SIGTERM's checkpoint (a preempted VM). 0 on a VM; the
    # GKE JobSets (common/kubernetes.py) set 143, so that the stopped pods fail
    # their Job and the JobSet restarts them, instead of ending as complete.
    c.preempted_exit_code = 0

    # Where step metrics go beside metrics.jsonl (training/common/tracking.py):
    # TensorBoard always; "tensorboard,wandb" adds Weights & Biases.
    c.tracking = config_dict.ConfigDict()
    c.tracking.report_to = "tensorboard"
    c.tracking.project = "gemma4-sft"  # W&B project
    c.tracking.entity = ""  # W&B team or user ("": the account's default)
    c.tracking.run_name = ""  # "": the run directory's name
    c.tracking.tags = ()
    c.tracking.wandb_mode = ""  # online or offline ("": $WANDB_MODE, else online)
    return c


def model(name, dtype, **fields):
    """The `model` fields of both stacks: the base `name` (gemma4/base_model.py),
    its `dtype`, and `random`, the shape of a `random-gemma4` base
    (gemma4/random_model.py): `like`'s text model (a config.json, its
    directory or a Hub id; empty: Gemma 4 31B) cut to its first `layers` (0: all)
    and narrowed by `width_divisor`."""
    return config_dict.ConfigDict({
        "name": name, "dtype": dtype,
        "random": {"like": "", "layers": 0, "width_divisor": 1}, **fields})


def tiny(c):
    """Shrinks `c` in place for the CPU default runs: minutes on a laptop."""
    c.lora.rank = 8
    c.lora.alpha = 16.0
    c.optimizer.learning_rate = 1e-2
    c.optimizer.warmup_steps = 3
    c.batch.effective_size = 8
    c.data.source = "sample"
    c.data.max_rows = 0
    c.data.max_seq_len = 512
    c.data.epochs = 4
    c.data.packing = True
    c.eval_every_steps = 4
    c.checkpoint_every_steps = 4
    c.checkpoints_to_keep = 2
    return c


def warmup_steps(optimizer, total_steps):
    """The warmup of a run of `total_steps`: `warmup_steps`, or else the `warmup_ratio`
    fraction of the run (rounded up)."""
    if optimizer.warmup_steps < 0 or not 0 <= optimizer.warmup_ratio <= 1:
        raise RecipeError(f"warmup_steps {optimizer.warmup_steps} and warmup_ratio "
                          f"{optimizer.warmup_ratio}: steps >= 0 and a ratio in [0, 1]")
    if optimizer.warmup_steps:
        return optimizer.warmup_steps
    return math.ceil(optimizer.warmup_ratio * total_steps)


def gradient_accumulation_steps(batch, data_parallel_size):
    """Micro-steps per optimizer step, the same arithmetic on both stacks.

    effective = per_device x accumulation x data-parallel replicas; a config
    whose effective batch does not split that way is rejected.
    """
    per_step = batch.per_device_size * data_parallel_size
    if batch.effective_size <= 0:
        raise RecipeError(f"effective batch {batch.effective_size}: it must be positive "
                          "(--config.batch.effective_size)")
    if per_step <= 0 or batch.effective_size % per_step:
        raise RecipeError(
            f"effective batch {batch.effective_size} is not a multiple of "
            f"per-device batch {batch.per_device_size} x {data_parallel_size} "
            "data-parallel replicas")
    return batch.effective_size // per_step
