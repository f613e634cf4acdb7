"""A tiny random Gemma 4 with the 31B architecture, for CPU defaults and tests.

Same structure as Gemma 4 31B: sliding-window layers (5) then a global layer,
global layers with K = V (one projection), their own head dim and KV-head
count, proportional RoPE on global layers, tied embeddings, logit soft-cap.
Only the sizes shrink. Head dims 64 / 128 are ones vLLM's CPU attention takes.

`save_tiny_model` writes a Hugging Face model directory (config.json,
model.safetensors, generation_config.json, tokenizer files), the form every
stage reads a base model in; `ensure` writes the one a CPU run starts from.
Run as a module (`python -m training.formats.tiny_model DIR`) it lets
another environment write one: the serving binary asks the vLLM environment,
so that serving itself never imports torch.
"""

import argparse
import os

import torch
import transformers

# Distinct sizes where possible, so that a swapped axis fails loudly in tests.
TINY_CONFIG = dict(
    hidden_size=80,
    intermediate_size=224,
    num_hidden_layers=6,
    num_attention_heads=8,
    num_key_value_heads=4,
    head_dim=64,
    num_global_key_value_heads=4,
    global_head_dim=128,
    attention_k_eq_v=True,
    sliding_window=16,
    final_logit_softcapping=30.0,
    max_position_embeddings=4096,
    hidden_size_per_layer_input=0,
    vocab_size_per_layer_input=0,
    tie_word_embeddings=True,
)


def tiny_config(vocab_size, **overrides):
    """A Gemma4TextConfig of the tiny architecture; `overrides` change any field."""
    fields = {**TINY_CONFIG, **overrides}
    fields.setdefault("vocab_size", vocab_size)
    config = transformers.Gemma4TextConfig(**fields)
    config.architectures = ["Gemma4ForCausalLM"]
    return config


def build_tiny_model(config, seed=0):
    """Random weights (std 0.02, and non-trivial norms) for `config`, in fp32."""
    torch.manual_seed(seed)
    model = transformers.Gemma4ForCausalLM(config)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "norm" in name or "scale" in name:
                param.copy_(1.0 + 0.1 * torch.randn_like(param))
            else:
                param.normal_(0.0, 0.02)
    return model.eval()


def save_tiny_model(out_dir, tokenizer, seed=0, dtype=torch.float32, **overrides):
    """Writes a tiny random Gemma 4 HF directory with `tokenizer`; returns out_dir."""
    from data import tokenizer as tokenizer_lib  # pylint: disable=import-outside-toplevel
    # Padded like real vocabularies, so that any tensor-parallel size divides it.
    config = tiny_config(-(-len(tokenizer) // 64) * 64, **overrides)
    config.pad_token_id = tokenizer.pad_token_id
    config.bos_token_id = tokenizer.bos_token_id
    config.eos_token_id = tokenizer_lib.end_of_turn_ids(tokenizer)
    model = build_tiny_model(config, seed).to(dtype)
    os.makedirs(out_dir, exist_ok=True)
    model.save_pretrained(out_dir)
    model.generation_config.eos_token_id = config.eos_token_id
    model.generation_config.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    return out_dir


def ensure(path, seed=0):
    """Writes the tiny base at `path` unless it is there (atomically); returns path."""
    from data import tokenizer as tokenizer_lib  # pylint: disable=import-outside-toplevel
    if not os.path.exists(os.path.join(path, "config.json")):
        tmp = f"{path}.tmp{os.getpid()}"
        save_tiny_model(tmp, tokenizer_lib.build_tokenizer(), seed=seed)
        os.replace(tmp, path)
    return path


def main():
    parser = argparse.ArgumentParser(description="Writes a tiny random Gemma 4 HF directory.")
    parser.add_argument("path", help="the model directory to write")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    print(ensure(args.path, args.seed))


if __name__ == "__main__":
    main()
