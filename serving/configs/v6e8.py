"""vLLM TPU on a v6e-8 host (8 chips x 32 GB), the reference's setup:
tensor parallel 8, fp8_e5m2 KV cache, chunked multimodal input off; XLA
compiles for ~8 minutes at start, hence the long start-up timeout.
max_model_len matches h100x2.py and fits the default sweep (16384 + 512)."""

from serving import server_config


def get_config():
    c = server_config.base(machine="tpu-v6e-8", tensor_parallel_size=8,
                           max_model_len=17408)
    c.runtime = "docker"
    c.image = server_config.IMAGES["tpu"]
    c.kv_cache_dtype = "fp8_e5m2"
    c.disable_chunked_mm_input = True
    c.startup_timeout_s = 1800
    return c
