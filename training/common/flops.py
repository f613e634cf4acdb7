"""Parameter counts and the FLOPs-per-token model behind MFU, for both stacks."""


def parameter_count(dims):
    """Parameters of the text model (tied embeddings counted once)."""
    total = dims.vocab * dims.embed + dims.embed
    for layer in range(dims.num_layers):
        attention = dims.attention(layer)
        head_dim = attention.head_dim
        q = o = dims.heads * head_dim * dims.embed
        kv = attention.kv_heads * head_dim * dims.embed * (1 if attention.k_eq_v else 2)
        total += q + o + kv + 3 * dims.mlp * dims.embed + 4 * dims.embed + 2 * head_dim + 1
    return total


def lora_parameter_count(dims, rank, tunix_modules):
    """Parameters of the LoRA factors Qwix creates on `tunix_modules`."""
    total = 0
    for layer in range(dims.num_layers):
        attention = dims.attention(layer)
        q_size = dims.heads * attention.head_dim
        kv_size = attention.kv_heads * attention.head_dim
        sizes = {  # (contracted size, output size) of each einsum / kernel
            "q_einsum": (dims.embed, q_size),
            "kv_einsum": None if attention.k_eq_v else (dims.embed, 2 * kv_size),
            "k_einsum": (dims.embed, kv_size) if attention.k_eq_v else None,
            "attn_vec_einsum": (q_size, dims.embed),
            "gate_proj": (dims.embed, dims.mlp), "up_proj": (dims.embed, dims.mlp),
            "down_proj": (dims.mlp, dims.embed),
        }
        total += sum(rank * sum(sizes[m]) for m in tunix_modules if sizes.get(m))
    return total


def flops_per_token(dims, seq_len, lora_rank, tunix_modules):
    """Model FLOPs per trained-on token of a LoRA step (the MFU numerator).

    Matmuls: forward 2P plus the backward pass's input gradients 2P; the
    frozen base needs no weight gradients, LoRA factors need forward, input
    and weight gradients (6 per parameter). Attention: forward 4 x heads x
    head_dim x attended keys per layer (QK^T and AV), backward twice that;
    attended keys are (T+1)/2 for causal layers and at most the window for
    sliding ones. Rematerialization is not counted (it is overhead, not
    model work), so MFU stays comparable across remat settings.
    """
    matmul_params = parameter_count(dims) - dims.vocab * dims.embed  # embedding lookup is free
    matmul_params += dims.vocab * dims.embed  # ...but the tied output projection is not
    flops = 4 * matmul_params + 6 * lora_parameter_count(dims, lora_rank, tunix_modules)
    causal_keys = (seq_len + 1) / 2
    for layer in range(dims.num_layers):
        keys = (min(dims.sliding_window, causal_keys)
                if dims.layer_types[layer] != "full_attention" else causal_keys)
        flops += 3 * 4 * dims.heads * dims.attention(layer).head_dim * keys
    return flops


def mfu(tokens_per_second, flops_per_token_value, chips, peak_flops_per_chip):
    if not peak_flops_per_chip:
        return None
    return tokens_per_second * flops_per_token_value / (chips * peak_flops_per_chip)


def compiled_flops_per_token(dims, seq_len, lora_rank, tunix_modules, *, remat,
                             dense_attention=True):
    """FLOPs per token position that the TPU stack's compiled step executes.

    What XLA's cost model should count, unlike `flops_per_token`: attention is
    computed densely over all `seq_len` keys with a mask (causal and window
    savings are not taken), and with remat every decoder layer's forward pass
    runs twice (the output projection and the embedding lookup do not).
    dense_attention=False: attention runs in a Pallas kernel, which XLA's cost
    model does not see (training/tpu/forward.py counts it), so it is left out.
    Element-wise work (norms, softmax, RoPE) is left out: well under 1% here.
    """
    embedding = dims.vocab * dims.embed
    layer_params = parameter_count(dims) - embedding
    lora = lora_parameter_count(dims, lora_rank, tunix_modules)
    forward = 2 * (layer_params + embedding) + 2 * lora
    backward = 2 * (layer_params + embedding) + 4 * lora
    recompute = 2 * (layer_params + lora) if remat else 0
    attention = sum(4 * dims.heads * dims.attention(layer).head_dim * seq_len
                    for layer in range(dims.num_layers)) if dense_attention else 0
    return forward + backward + recompute + attention * (4 if remat else 3)
