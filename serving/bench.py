"""Sweeps a vLLM server with vLLM's own serving benchmark.

    bazel run //serving:bench -- --config=v6e8.py --base_url=http://127.0.0.1:8000 \\
        --model=merged --server_json=runs/serve/server.json --out_dir=out/bench-tpu
    ./bazelw run //serving:bench -- --out_dir=/tmp/bench     # CPU: starts a tiny server itself

With --base_url the server is someone else's (serving:serve writes the
server.json that records its settings; its API key, if it has one, is read
from the variable the config's api_key_env names, VLLM_API_KEY by default); without, the bench starts one from
--config and --model (and --adapter) and stops it afterwards. --sweep is
'LENGTHS x RATES' (e.g. 512,1024x1,4,inf; default from the config). Writes one
JSON per point, summary.json (saturation rate, peak output tok/s and $ per 1M
output tokens per input length) and throughput/TTFT plots into --out_dir.
"""

import json
import os

from absl import app
from absl import flags

from common import cli
from common import config_cli
from common import storage
from serving import launcher
from serving import plots
from serving import server_config
from serving import sweep as sweep_lib

_CONFIG = config_cli.define_config_flag(__file__)
_BASE_URL = flags.DEFINE_string("base_url", None, "A running server (default: start one).")
_MODEL = flags.DEFINE_string("model", None, "Served model name (with --base_url) or the model "
                             "to serve (default: a tiny random Gemma 4).")
_ADAPTER = flags.DEFINE_multi_string("adapter", [], "NAME=DIR adapter for a started server; "
                                     "the sweep then targets NAME.")
_TOKENIZER = flags.DEFINE_string("tokenizer", None, "Tokenizer for the random prompts "
                                 "(default: the model directory).")
_SERVER_JSON = flags.DEFINE_string("server_json", None, "server.json of the --base_url server.")
_SWEEP = flags.DEFINE_string("sweep", None, "LENGTHS x RATES, e.g. 512,1024x1,4,inf.")
_OUTPUT_LEN = flags.DEFINE_integer("output_len", None, "Output tokens per request.")
_NUM_PROMPTS = flags.DEFINE_integer("num_prompts", None, "Requests per point.")
_LABEL = flags.DEFINE_string("label", None, "Name of this run in plots (default: the machine).")
_OUT_DIR = flags.DEFINE_string("out_dir", "runs/bench", "Where results go.")



def run(config, out_dir, *, base_url=None, model=None, adapters=None, tokenizer=None,
        server_json=None, lengths=None, rates=None, output_len=None, num_prompts=None,
        label=None, echo=True):
    """Runs the sweep (starting a server if base_url is None); returns the summary."""
    # Ours to start with, or the --base_url server's; a key in the config is
    # refused before the config is written.
    api_key = server_config.api_key(config)
    os.makedirs(out_dir, exist_ok=True)
    config_cli.write_resolved_config(config, out_dir)
    server = None
    adapters = adapters or {}
    try:
        if base_url is None:
            model_path = launcher.resolve_model(model, out_dir)
            server, record = launcher.launch(config, model_path, adapters, "127.0.0.1",
                                             launcher.free_port(), os.path.join(out_dir, "server"),
                                             echo=echo)
            base_url = record["base_url"]
            served = next(iter(adapters), model_path)
            tokenizer = tokenizer or model_path
        else:
            record = {"machine": config.machine, "base_url": base_url,
                      "settings": "unknown: pass --server_json"}
            if server_json:
                if not os.path.exists(server_json):
                    raise server_config.ConfigError(f"no server record {server_json} "
                                                    "(--server_json)")
                with open(server_json) as f:
                    record = json.load(f)
            models, version = sweep_lib.server_info(base_url, api_key=api_key)
            record.setdefault("vllm_version", version)
            served = model or models[0]
            tokenizer = tokenizer or record.get("model") or served
        record = {**record, "label": label or record.get("machine"), "benchmarked": served}
        return sweep_lib.sweep(
            bench=[launcher.vllm_binary(launcher.VLLM_BENCH)], base_url=base_url, model=served,
            tokenizer=tokenizer, input_lens=lengths or tuple(config.sweep.input_lens),
            rates=rates or tuple(config.sweep.request_rates),
            output_len=output_len or config.sweep.output_len,
            num_prompts=num_prompts or config.sweep.num_prompts,
            num_warmups=config.sweep.num_warmups, seed=config.sweep.seed,
            max_model_len=config.max_model_len, out_dir=out_dir, record=record,
            dollars_per_hour=server_config.dollars_per_hour(config),
            timeout_s=config.sweep.request_timeout_s, api_key=api_key)
    finally:
        if server is not None:
            server.stop()


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    where = config_cli.user_path(_OUT_DIR.value)
    storage.probe(where)
    lengths = rates = None
    if _SWEEP.value:
        lengths, rates = sweep_lib.parse_sweep(_SWEEP.value)
    # A gs:// --out_dir is worked on in a local mirror (pulled, so that a rerun
    # resumes the sweep) and pushed at the end, also after a failure.
    mirror = storage.Mirror(where, clear=True)
    mirror.pull()
    try:
        _bench(where, mirror.local, lengths, rates)
    finally:
        mirror.push()


def _bench(where, out_dir, lengths, rates):
    summary = run(
        _CONFIG.value, out_dir, base_url=_BASE_URL.value, model=_MODEL.value,
        adapters=launcher.parse_adapters(launcher.user_adapter_paths(_ADAPTER.value)),
        tokenizer=_TOKENIZER.value and config_cli.user_path(_TOKENIZER.value),
        server_json=_SERVER_JSON.value and config_cli.user_path(_SERVER_JSON.value),
        lengths=lengths, rates=rates, output_len=_OUTPUT_LEN.value,
        num_prompts=_NUM_PROMPTS.value, label=_LABEL.value)
    for path in plots.plot([out_dir], os.path.join(out_dir, "plots")):
        print(f"plot: {path}")
    for length, figures in summary["input_lengths"].items():
        cost = figures["dollars_per_million_output_tokens"]
        print(f"input {length}: saturation at {figures['saturation_rate']} req/s, peak "
              f"{figures['peak_output_tok_s']} output tok/s"
              + (f", ${cost:.2f} per 1M output tokens" if cost else ""))
    if not summary["complete"]:
        raise cli.UserError(f"the sweep is partial (see {where}/summary.json)")


if __name__ == "__main__":
    cli.run(main)
