"""Serves a (fine-tuned) Gemma 4 with vLLM on TPU, GPU or CPU.

    bazel run //serving:serve -- --config=v6e8.py --model=out/merged
    bazel run //serving:serve -- --config=h100x2.py --model=google/gemma-4-31B-it \\
        --adapter=codev=out/adapter
    ./bazelw run //serving:serve        # CPU: a tiny random Gemma 4, for trying the API

The vLLM command is built from the config (tensor parallel size, max model
len, KV-cache dtype, chunked prefill, attention backend, LoRA limits), printed,
and recorded with the settings in RUN_DIR/server.json; the server's log
streams here and into RUN_DIR/server.log. SIGINT or SIGTERM stops it cleanly.

Beyond loopback (--host=0.0.0.0) the server needs an API key, read from the
environment variable the config's api_key_env names (VLLM_API_KEY by default):

    export VLLM_API_KEY=$(openssl rand -hex 24)   # clients send it as a Bearer token
    bazel run //serving:serve -- --config=h100x2.py --model=out/merged --host=0.0.0.0

--allow_no_api_key opens a server without one (a private network only).
"""

import signal
import time

from absl import app
from absl import flags

from common import cli
from common import config_cli
from serving import launcher
from serving import server_config

_CONFIG = config_cli.define_config_flag(__file__)
_MODEL = flags.DEFINE_string("model", None, "Model directory or Hub id (default: a tiny "
                             "random Gemma 4, for CPU).")
_ADAPTERS = flags.DEFINE_multi_string("adapter", [], "NAME=DIR: a PEFT adapter served as NAME.")
_HOST = flags.DEFINE_string("host", "127.0.0.1", "Address to listen on.")
_PORT = flags.DEFINE_integer("port", 8000, "Port to listen on.")
_RUN_DIR = flags.DEFINE_string("run_dir", "runs/serve", "Where server.json and server.log go.")
_SERVED_NAME = flags.DEFINE_string("served_model_name", None, "Name clients use for the model.")
_ALLOW_NO_KEY = flags.DEFINE_bool(
    "allow_no_api_key", False, "Listen beyond loopback without an API key (anyone who "
    "reaches the port can use the server).")


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    # Before anything is written or started: a key, or loopback, or consent.
    launcher.check_exposure(_HOST.value, server_config.api_key(_CONFIG.value),
                            _ALLOW_NO_KEY.value)
    run_dir = config_cli.user_path(_RUN_DIR.value)
    config_cli.write_resolved_config(_CONFIG.value, run_dir)
    adapters = launcher.parse_adapters(launcher.user_adapter_paths(_ADAPTERS.value))
    model = launcher.resolve_model(_MODEL.value, run_dir)
    stop = []
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.append(True))
    server, record = launcher.launch(_CONFIG.value, model, adapters, _HOST.value,
                                     _PORT.value, run_dir, _SERVED_NAME.value,
                                     allow_no_key=_ALLOW_NO_KEY.value)
    print(f"vLLM {record.get('vllm_version')} ready at {record['base_url']}/v1 "
          f"(model {model}{', adapters ' + ', '.join(adapters) if adapters else ''}); "
          "Ctrl-C stops it", flush=True)
    try:
        while not stop and server.alive():
            time.sleep(0.5)
    finally:
        server.stop()
    if not stop:
        raise launcher.ServerError(f"vLLM exited with code {server.process.returncode}:\n"
                                   f"{server.log_tail()}")


if __name__ == "__main__":
    cli.run(main)
