"""VerilogEval spec-to-rtl with the reference's settings, on any machine.

Sampling as the reference: n=5, temperature 0.8, top_p 0.95, 1024 new
tokens, 0-shot upstream prompt. Judging as upstream VerilogEval (iverilog
-g2012, 30 s simulation limit) inside bubblewrap, on every core.
Empty paths mean defaults: `dataset_dir` is
`<repo root>/../shared/verilog-eval/dataset_spec-to-rtl` (the shared copy;
point it at `dataset_spec-to-rtl/` of your own NVlabs/verilog-eval
checkout), `icl_dir` the `icl-examples/` or `scripts/` folder beside it.
"""

from ml_collections import config_dict


def get_config():
    c = config_dict.ConfigDict()
    # Problems.
    c.dataset_dir = ""
    c.icl_dir = ""
    c.problems = ""            # ids separated by commas; "" = all of problems.txt
    c.limit = 0                # first N problems after that (0 = all)
    c.shots = 0                # in-context examples prepended (0..4; upstream protocol)
    # How problems are asked and code is read (eval/protocols.py): "upstream"
    # (VerilogEval's) or "reference" (arXiv 2605.25645's, to compare with it).
    c.protocol = "upstream"
    # Server (OpenAI-compatible chat completions, e.g. vLLM).
    c.base_url = "http://127.0.0.1:8000/v1"
    c.model = ""               # "" = the first model the server lists
    # The environment variable holding the server's API key (serving's default,
    # vLLM's own name); unset: $OPENAI_API_KEY, else none. Never the key itself:
    # config.json and `ps` would show it.
    c.api_key_env = "VLLM_API_KEY"
    c.concurrency = 8          # requests in flight (each asks for n samples)
    c.request_timeout_s = 600.0
    c.max_retries = 5
    # Sampling.
    c.n = 5
    c.temperature = 0.8
    c.top_p = 0.95
    c.max_tokens = 1024
    c.seed = -1                # < 0: unseeded
    c.keep_special_tokens = True   # vLLM skip_special_tokens=False (thinking tags)
    c.enable_thinking = False  # vLLM chat_template_kwargs.enable_thinking
    # Scoring.
    c.samples = ""             # score this completions JSONL instead of sampling
    c.out_dir = ""             # required: samples.jsonl, results.jsonl, summary.json
    c.k = ""                   # more k values for pass@k, e.g. "2,3" (1 and n always)
    c.bootstrap_seed = 0       # the 95% intervals resample problems with this seed
    c.dedup = True             # judge identical code for a problem once
    # Judging.
    c.workers = 0              # parallel samples (0 = one per core)
    c.sandbox = "bwrap"        # "bwrap", or "none" (limits only; trusted samples)
    c.iverilog = "iverilog"
    c.vvp = "vvp"
    c.compile_timeout_s = 60
    c.sim_timeout_s = 30       # upstream's limit
    c.cpu_limit_s = 60         # per process
    c.memory_limit_mb = 2048   # address space per process
    c.log_limit_kb = 1024      # largest file (log) a run may write
    c.dir_limit_mb = 256       # a run's working directory and /tmp (bwrap)
    c.scratch_dir = ""         # "" = the system temp dir
    c.keep_dirs = False        # keep each run's directory (debugging)
    c.stimulus_seed = -1       # seeds a passing sample's second stimulus (eval/judge.py):
                               # < 0 draws one for the run (summary.json records it)
    return c
