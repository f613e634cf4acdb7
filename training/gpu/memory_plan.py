"""Per-GPU memory of a GPU-stack run, from the base's config.json alone.

//training/gpu:sft prints this plan before anything downloads and refuses a
config that cannot fit the machine's GPU memory, saying what to change: a
31B run that does not fit is found in seconds, not after a 62 GB download.

FSDP2 (several processes) splits the frozen base, the LoRA factors, their
gradients and AdamW's two moments over the processes; PEFT keeps LoRA factors
in float32 on a bfloat16 base. While a decoder layer runs, FSDP2 holds it
gathered, and the next one prefetched; the tied embedding is gathered for the
input and the logits. Activations are per token and per layer, with widths D
(model), F (MLP) and W (a layer's query + key + value widths):

    ACT_D * D + ACT_F * F + ACT_W * W bytes

for every layer without remat; with remat, each layer keeps its input (D in
the base dtype) and one layer at a time runs its forward again. The logits add
LOGIT_BYTES per token and vocabulary entry at the loss's backward (bf16
logits, their float32 copy, the soft-cap's tanh, the log-softmax and its
gradient).

The coefficients were measured on CPU (training/gpu/memory_calibration.py:
the bytes of every tensor alive during a step of a mid-size random Gemma 4 with
LoRA, bf16, sdpa), each from the change that one width makes: the plan sits
above the measured peak (it is a bound) and its error is printed there and in
the README. On CPU sdpa keeps each layer's attention scores, which ACT_W
absorbs; the GPU's memory-efficient kernel keeps none, so there the W term
overestimates.
"""

from common import cli
from gemma4 import gemma4_map
from training.common import memory
from training.common.flops import lora_parameter_count
from training.common.flops import parameter_count
from training.common.memory import BYTES

LORA_BYTES = 4  # PEFT's float32 factors (and so their gradients and AdamW moments)

# Calibrated on CPU (memory_calibration.py), bytes per token and per element of width.
ACT_D = 105.4
ACT_F = 20.4
ACT_W = 23.3
LOGIT_BYTES = 18.0
GATHERED_LAYERS = 2  # FSDP2: the running layer and the prefetched one


class MemoryPlanError(cli.UserError):
    """A run whose plan does not fit the machine's GPU memory."""


def _widths(dims, layer):
    attention = dims.attention(layer)
    kv = attention.kv_heads * attention.head_dim
    return dims.heads * attention.head_dim + kv * (1 if attention.k_eq_v else 2)


def layer_activation_bytes(dims, tokens, layer):
    """What one layer keeps for its backward pass, for `tokens` token positions."""
    return tokens * (ACT_D * dims.embed + ACT_F * dims.mlp + ACT_W * _widths(dims, layer))


def estimate(dims, *, processes, fsdp, micro_batch, seq_len, base_bytes, lora_rank,
             tunix_modules, remat):
    """Bytes per GPU by component."""
    shards = processes if fsdp else 1
    tokens = micro_batch * seq_len
    lora = lora_parameter_count(dims, lora_rank, tunix_modules)
    layers = [layer_activation_bytes(dims, tokens, i) for i in range(dims.num_layers)]
    if remat:
        activations = dims.num_layers * tokens * dims.embed * base_bytes + max(layers)
    else:
        activations = sum(layers)
    embedding = dims.vocab * dims.embed
    one_layer = (parameter_count(dims) - embedding) / dims.num_layers
    parts = {
        "base_weights": parameter_count(dims) * base_bytes / shards,
        "lora": lora * LORA_BYTES / shards,
        "gradients": lora * LORA_BYTES / shards,
        "optimizer_state": 2 * lora * LORA_BYTES / shards,
        "gathered_weights": ((GATHERED_LAYERS * one_layer + embedding) * base_bytes
                             if fsdp and processes > 1 else 0),
        "activations": activations,
        "logits": LOGIT_BYTES * tokens * dims.vocab,
    }
    parts["total"] = sum(parts.values())
    return parts


def config_estimate(dims, config, processes, fsdp):
    return estimate(
        dims, processes=processes, fsdp=fsdp, micro_batch=config.batch.per_device_size,
        seq_len=config.data.max_seq_len, base_bytes=BYTES[config.model.dtype],
        lora_rank=config.lora.rank,
        tunix_modules=gemma4_map.tunix_lora_modules(config.lora.target_modules),
        remat=bool(config.remat))


def format_estimate(parts, gpu_bytes=None):
    return memory.format_parts(parts, gpu_bytes, "memory per GPU")


def check_fits(parts, gpu_bytes, config):
    """Refuses a plan over the GPU's memory, naming what would bring it down."""
    if not gpu_bytes or parts["total"] <= gpu_bytes:
        return
    advice = []
    if config.batch.per_device_size > 1:
        advice.append("a smaller micro-batch (--config.batch.per_device_size, with the "
                      "effective batch kept by more accumulation steps)")
    if not config.remat:
        advice.append("remat (--config.remat=True)")
    advice.append("a shorter --config.data.max_seq_len")
    advice.append("more GPUs (--config.num_processes, FSDP shards the base over them)")
    raise MemoryPlanError(
        "the run does not fit in GPU memory: planned per GPU\n" + format_estimate(parts, gpu_bytes)
        + "\nTry " + "; or ".join(advice) + ".")


def plan(dims, config, machine, processes, fsdp, log):
    """Logs the plan, or refuses it (with the plan) when over the machine's memory."""
    parts = config_estimate(dims, config, processes, fsdp)
    gpu_bytes = machine.hbm_bytes_per_chip if machine.platform == "gpu" else 0
    check_fits(parts, gpu_bytes, config)
    log(f"memory plan per GPU ({processes} process{'es' if processes > 1 else ''}, "
        f"{'FSDP' if fsdp and processes > 1 else 'no FSDP'}, micro-batch "
        f"{config.batch.per_device_size} x {config.data.max_seq_len} tokens, remat "
        f"{'on' if config.remat else 'off'}):\n" + format_estimate(parts, gpu_bytes))
    return parts
