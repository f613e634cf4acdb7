"""vLLM on 2 x H100 80GB (a3-highgpu-2g), the reference's GPU setup:
tensor parallel 2, bf16 KV cache, the Triton attention backend (Gemma 4 mixes
head dims 256 and 512). max_model_len matches v6e8.py."""

from serving import server_config


def get_config():
    c = server_config.base(machine="gpu-h100x2", tensor_parallel_size=2,
                           max_model_len=17408)
    c.runtime = "docker"
    c.image = server_config.IMAGES["gpu"]
    c.attention_backend = "TRITON_ATTN"
    c.startup_timeout_s = 1200
    c.image_command = server_config.IMAGE_COMMANDS["gpu"]
    return c
