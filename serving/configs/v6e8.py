"""vLLM TPU on a v6e-8 host (8 chips x 32 GB), the reference's setup:
tensor parallel 8, fp8_e5m2 KV cache, chunked multimodal input off; XLA
compiles for ~8 minutes at start, hence the long start-up timeout.
max_model_len matches h100x2.py and fits the default sweep (16384 + 512).

The fine-tuned model is served merged, not as base + LoRA adapter: vLLM's TPU
backend (tpu-inference, v0.27.0 and b8692ff01f) runs Gemma 4 on its JAX path
(tpu_inference/models/common/model_loader.py registers
Gemma4ForConditionalGeneration to models/jax/gemma4_mm.py, and the default
MODEL_IMPL_TYPE=auto picks that path for every architecture outside
_VLLM_PREFERRED_ARCHITECTURES), where get_flax_model sets no LoRA manager; LoRA
is implemented for the torchax path only (tpu_inference/lora/), tested there on
Qwen2.5 only. With --enable-lora the JAX path stops at start-up."""

from serving import server_config


def get_config():
    c = server_config.base(machine="tpu-v6e-8", tensor_parallel_size=8,
                           max_model_len=17408)
    c.runtime = "docker"
    c.image = server_config.IMAGES["tpu"]
    c.kv_cache_dtype = "fp8_e5m2"
    c.disable_chunked_mm_input = True
    c.startup_timeout_s = 1800
    c.image_command = server_config.IMAGE_COMMANDS["tpu"]
    c.lora = False
    c.lora_note = "vLLM's TPU backend runs Gemma 4 on its JAX path, which has no LoRA"
    return c
