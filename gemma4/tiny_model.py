"""A tiny random Gemma 4 with the 31B architecture, for CPU defaults and tests.

The default is what `google/gemma-4-31B-it` is: a multimodal
`Gemma4ForConditionalGeneration` (the text model under `model.language_model.*`,
a small vision tower under `model.vision_tower.*` and `model.embed_vision.*`),
saved as transformers saves the real one (safetensors shards plus
`model.safetensors.index.json`), with the embedded tokenizer (Google's chat
template, the real special tokens) and the config's image/audio/video token
ids pointing at its tokens. `multimodal=False` gives the text-only
`Gemma4ForCausalLM` in one file, the variant some tests keep.

The text model has the 31B's structure: sliding-window layers (5) then a
global layer, global layers with K = V (one projection), their own head dim
and KV-head count, proportional RoPE on global layers, tied embeddings, logit
soft-cap. Only the sizes shrink. Head dims 64 / 128 are ones vLLM's CPU
attention takes.

`save_tiny_model` writes a Hugging Face model directory (config.json,
safetensors, generation_config.json, tokenizer files, and for the multimodal
base the real checkpoint's processor_config.json), the form every stage
reads a base model in; `ensure` writes the one a CPU run starts from. Run as a
module (`python -m gemma4.tiny_model DIR`) it lets another
environment write one: the serving binary asks the vLLM environment, so that
serving itself never imports torch.
"""

import argparse
import json
import os

import torch
import transformers

# Distinct sizes where possible, so that a swapped axis fails loudly in tests.
TINY_CONFIG = dict(
    hidden_size=80,
    intermediate_size=224,
    num_hidden_layers=6,
    # Two repeats of a block of two sliding-window layers and one global layer
    # (31B: ten of five and one), so the TPU stack's CPU runs scan over layers.
    layer_types=["sliding_attention", "sliding_attention", "full_attention"] * 2,
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
    use_bidirectional_attention="vision",  # as the 31B: image tokens see each other
)


# A small vision tower of the 31B's kind (no clipped linears, standardized
# patches, 3 x 3 pooling, 16-pixel patches, 70 soft tokens: the smallest image
# size the real image processor offers).
TINY_VISION = dict(
    hidden_size=48,
    intermediate_size=96,
    num_hidden_layers=2,
    num_attention_heads=2,
    num_key_value_heads=2,
    head_dim=24,
    global_head_dim=24,
    patch_size=16,
    pooling_kernel_size=3,
    default_output_length=70,
    position_embedding_size=1024,
    standardize=True,
    use_clipped_linears=False,
)
# The shards of the multimodal save: a few, as the real checkpoint has many.
SHARD_SIZE = "2MB"


def processor_config(soft_tokens):
    """processor_config.json as the real checkpoint lays it out, `soft_tokens` per image.

    The real values (Gemma 4's published processor: unnormalized pixels
    rescaled by 1/255, 16-pixel patches pooled 3 x 3, bicubic resampling; 70
    soft tokens and 32 frames per video; 40 ms of audio per token) except the
    image budget, 280 tokens there and the tiny vision tower's here.
    """
    pixels = {"do_convert_rgb": True, "do_rescale": True, "do_resize": True,
              "image_mean": [0.0, 0.0, 0.0], "image_std": [1.0, 1.0, 1.0],
              "patch_size": 16, "pooling_kernel_size": 3, "resample": 3,
              "rescale_factor": 1.0 / 255.0}
    return {
        "processor_class": "Gemma4Processor",
        "image_seq_length": soft_tokens,
        "audio_ms_per_token": 40,
        "audio_seq_length": 750,
        "image_processor": {**pixels, "image_processor_type": "Gemma4ImageProcessor",
                            "do_normalize": False, "image_seq_length": soft_tokens,
                            "max_soft_tokens": soft_tokens},
        "video_processor": {**pixels, "video_processor_type": "Gemma4VideoProcessor",
                            "do_normalize": True, "do_sample_frames": True,
                            "max_soft_tokens": 70, "num_frames": 32, "return_metadata": False},
        "feature_extractor": {"feature_extractor_type": "Gemma4AudioFeatureExtractor"},
    }


def tiny_config(vocab_size, **overrides):
    """A Gemma4TextConfig of the tiny architecture; `overrides` change any field."""
    fields = {**TINY_CONFIG, **overrides}
    fields.setdefault("vocab_size", vocab_size)
    config = transformers.Gemma4TextConfig(**fields)
    config.architectures = ["Gemma4ForCausalLM"]
    return config


def tiny_multimodal_config(text_config, tokenizer):
    """A Gemma4Config around `text_config`, its media token ids from `tokenizer`."""
    from data import tokenizer as tokenizer_lib  # pylint: disable=import-outside-toplevel
    named = tokenizer_lib.NAMED_TOKENS
    ids = {f"{kind}_token_id": tokenizer.convert_tokens_to_ids(named[f"{kind}_token"])
           for kind in ("image", "boi", "eoi", "audio", "boa", "eoa")}
    ids["video_token_id"] = tokenizer.convert_tokens_to_ids(tokenizer_lib.VIDEO)
    config = transformers.Gemma4Config(
        text_config=text_config.to_dict(),
        vision_config=transformers.Gemma4VisionConfig(**TINY_VISION), audio_config=None,
        vision_soft_tokens_per_image=TINY_VISION["default_output_length"],
        tie_word_embeddings=text_config.tie_word_embeddings,
        eoa_token_index=ids["eoa_token_id"], **ids)
    config.architectures = ["Gemma4ForConditionalGeneration"]
    return config


def build_tiny_model(config, seed=0, embedding_std=0.02):
    """Random weights (std 0.02, and non-trivial norms) for `config`, in fp32.

    `embedding_std` sets the token embeddings' scale. They are tied to the
    output: with std 0.02 a logit stays within about +-1.6 (80 dimensions after
    the final norm), so no fine-tune can make one token likely; a larger scale
    gives a base that LoRA can teach to reproduce text (the pipeline's demo)."""
    torch.manual_seed(seed)
    multimodal = isinstance(config, transformers.Gemma4Config)
    cls = transformers.Gemma4ForConditionalGeneration if multimodal else transformers.Gemma4ForCausalLM
    model = cls(config)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "norm" in name or "scale" in name:
                param.copy_(1.0 + 0.1 * torch.randn_like(param))
            elif name.endswith("language_model.embed_tokens.weight") or \
                    name == "model.embed_tokens.weight":
                param.normal_(0.0, embedding_std)
            else:
                param.normal_(0.0, 0.02)
    return model.eval()


def save_tiny_model(out_dir, tokenizer, seed=0, dtype=torch.float32, multimodal=True,
                    embedding_std=0.02, **overrides):
    """Writes a tiny random Gemma 4 HF directory with `tokenizer`; returns out_dir.

    `overrides` change fields of the text config.
    """
    from data import tokenizer as tokenizer_lib  # pylint: disable=import-outside-toplevel
    # Padded like real vocabularies, so that any tensor-parallel size divides it.
    text = tiny_config(-(-len(tokenizer) // 64) * 64, **overrides)
    text.pad_token_id = tokenizer.pad_token_id
    text.bos_token_id = tokenizer.bos_token_id
    eos = tokenizer_lib.end_of_turn_ids(tokenizer)
    text.eos_token_id = eos
    config = text
    shards = {}
    if multimodal:
        config = tiny_multimodal_config(text, tokenizer)
        config.eos_token_id = eos
        shards = {"max_shard_size": SHARD_SIZE}
    model = build_tiny_model(config, seed, embedding_std).to(dtype)
    os.makedirs(out_dir, exist_ok=True)
    for name in os.listdir(out_dir):  # an earlier save's weights, index or processor
        if name.startswith("model") and name.endswith((".safetensors", ".index.json")) \
                or name == "processor_config.json":
            os.remove(os.path.join(out_dir, name))
    model.save_pretrained(out_dir, **shards)
    model.generation_config.eos_token_id = eos
    model.generation_config.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    if multimodal:  # what vLLM's multimodal class builds its image processor from
        _write_processor_config(out_dir)
    return out_dir


def _write_processor_config(model_dir):
    tmp = os.path.join(model_dir, f"processor_config.json.tmp{os.getpid()}")
    with open(tmp, "w") as f:
        json.dump(processor_config(TINY_VISION["default_output_length"]), f, indent=2)
    os.replace(tmp, os.path.join(model_dir, "processor_config.json"))


def ensure(path, seed=0, embedding_std=0.02):
    """Writes the tiny base at `path` unless it is there (atomically); returns path.

    A multimodal base written before it had a processor config gets one.
    """
    from data import tokenizer as tokenizer_lib  # pylint: disable=import-outside-toplevel
    config_path = os.path.join(path, "config.json")
    if not os.path.exists(config_path):
        tmp = f"{path}.tmp{os.getpid()}"
        save_tiny_model(tmp, tokenizer_lib.build_tokenizer(), seed=seed,
                        embedding_std=embedding_std)
        os.replace(tmp, path)
    elif not os.path.exists(os.path.join(path, "processor_config.json")):
        with open(config_path) as f:
            if "vision_config" in json.load(f):
                _write_processor_config(path)
    return path


def main():
    parser = argparse.ArgumentParser(description="Writes a tiny random Gemma 4 HF directory.")
    parser.add_argument("path", help="the model directory to write")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    print(ensure(args.path, args.seed))


if __name__ == "__main__":
    main()
