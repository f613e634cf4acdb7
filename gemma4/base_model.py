"""Finding and checking the base model a run starts from (both stacks).

`model.name` in a training config is one of:
  * `tiny-random-gemma4`: the CPU default; a tiny random Gemma 4 (and the
    embedded tokenizer) written once into the run directory by
    `tiny_model.ensure`, so that resuming, exporting and serving the run all
    see the same base;
  * `random-gemma4`: a random Gemma 4 of a real model's shape, cut and narrowed
    as the config's `model.random` says (random_model.py), written once into
    the run directory as the tiny one is: one TPU chip's smoke test;
  * a local Hugging Face directory (config.json + safetensors);
  * a Hub id such as `google/gemma-4-31B-it`, downloaded on the training VM
    into the Hugging Face cache (HF_HOME: put it on a persistent disk);
  * a gs:// URL of such a directory (a copy kept in the team's bucket), copied
    once into the local cache (common/storage.py; G4_CACHE_DIR) and reused.
Checks that need no weights (config, files listed by the index, readable
shard headers) run here, before any long work.
"""

import json
import os

from common import cli
from common import storage

TINY = "tiny-random-gemma4"
RANDOM = "random-gemma4"
IN_RUN_DIR = (TINY, RANDOM)  # bases a run writes into its own directory
TINY_DIR = "base_model"  # where a run directory keeps such a base
# README.md: the base's model card, whose license an export's card carries.
_HUB_PATTERNS = ["*.json", "*.safetensors", "tokenizer*", "*.jinja", "*.model", "README.md"]


class BaseModelError(cli.UserError):
    """A base model that cannot be used; the message names the file."""


def tiny_dir(run_dir):
    return storage.join(run_dir, TINY_DIR)


def is_hub_id(name):
    """Whether `name` reads as a Hugging Face Hub id (owner/repo), not a path."""
    return name.count("/") == 1 and not name.startswith((".", "/"))


def resolve(name, run_dir):
    """A local directory for the base model `name` (see module docstring).

    A base of IN_RUN_DIR must already exist in `run_dir` (the run writes it).
    """
    if storage.is_url(name):  # a model kept in a bucket: copied to the local cache once
        return storage.fetch(name)
    if name in IN_RUN_DIR:
        path = tiny_dir(run_dir)
        if storage.is_url(path):
            return storage.fetch(path, require_complete=True)
        if not os.path.exists(os.path.join(path, "config.json")):
            raise BaseModelError(f"{run_dir} holds no {name} base model ({path}); the run "
                                 "that created this directory did not finish setting up")
        return path
    if os.path.isdir(name):
        return os.path.abspath(name)
    if is_hub_id(name):
        from huggingface_hub import snapshot_download  # pylint: disable=import-outside-toplevel
        try:
            return snapshot_download(name, allow_patterns=_HUB_PATTERNS)
        except Exception as e:  # network, auth, missing repo alike
            raise BaseModelError(f"cannot download base model {name}: {hub_error(name, e)}") \
                from e
    raise BaseModelError(f"base model {name!r} is neither {TINY!r}, {RANDOM!r}, a directory, "
                         "nor a Hub id")


def hub_error(name, error):
    """A Hub download's failure in one line: for a gated model (Gemma is), the fix."""
    text = str(error)
    first = text.strip().splitlines()[0] if text.strip() else type(error).__name__
    gated = (type(error).__name__ in ("GatedRepoError", "RepositoryNotFoundError")
             or any(f"{code} Client Error" in text for code in (401, 403))
             or "gated" in text.lower())
    if not gated:
        return first
    token = "HF_TOKEN is set" if os.environ.get("HF_TOKEN") else "no HF_TOKEN is set"
    return (f"{name} is gated or private and {token}: accept its licence at "
            f"https://huggingface.co/{name} with your Hugging Face account, then export "
            "HF_TOKEN=<a read token of that account> (huggingface.co/settings/tokens) or "
            f"run `hf auth login` ({first})")


# Copies of public Hub configs, for what needs only a config.json (the TPU stack's
# ahead-of-time compile): no download, and the same answer offline.
HUB_CONFIGS = {"google/gemma-4-31B-it": "google--gemma-4-31B-it"}
_HUB_CONFIGS_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "hub_configs")


def config_only(name):
    """(config.json dict, where it came from) for a directory, a file or a Hub id.

    Hub ids in HUB_CONFIGS read the copy shipped in hub_configs/ (see its
    PROVENANCE.md); other Hub ids download config.json alone.
    """
    if os.path.isdir(name):
        path = os.path.join(name, "config.json")
    elif os.path.isfile(name):
        path = name
    elif name in HUB_CONFIGS:
        path = os.path.join(_HUB_CONFIGS_DIR, HUB_CONFIGS[name], "config.json")
    elif is_hub_id(name):
        from huggingface_hub import hf_hub_download  # pylint: disable=import-outside-toplevel
        try:
            path = hf_hub_download(name, "config.json")
        except Exception as e:  # network, auth, missing repo alike
            raise BaseModelError(f"cannot download {name}/config.json: {hub_error(name, e)}") \
                from e
    else:
        raise BaseModelError(f"{name!r} is neither a config.json, a directory, nor a Hub id")
    return _read_json(path), os.path.abspath(path)


def _read_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except FileNotFoundError:
        raise BaseModelError(f"{path} does not exist") from None
    except json.JSONDecodeError as e:
        raise BaseModelError(f"{path} is not valid JSON: {e}") from None


def read_config(model_dir):
    path = os.path.join(model_dir, "config.json")
    if not os.path.exists(path):
        raise BaseModelError(f"{model_dir} has no config.json: not a Hugging Face model")
    return _read_json(path)


def media_token_ids(config):
    """The placeholder ids a multimodal config.json names (image, audio, video).

    A multimodal Gemma 4 replaces these tokens' embeddings by media features
    (by padding when no media comes with them), so text must never hold them.
    """
    return sorted({config[key] for key in ("image_token_id", "audio_token_id", "video_token_id")
                   if isinstance(config.get(key), int)})


def safetensors_files(model_dir):
    """{tensor name: file} for the model's safetensors, checking every file opens."""
    from safetensors import safe_open  # pylint: disable=import-outside-toplevel
    index_path = os.path.join(model_dir, "model.safetensors.index.json")
    if os.path.exists(index_path):
        with open(index_path) as f:
            weight_map = json.load(f)["weight_map"]
        files = sorted(set(weight_map.values()))
    else:
        single = os.path.join(model_dir, "model.safetensors")
        if not os.path.exists(single):
            raise BaseModelError(f"{model_dir} has neither model.safetensors nor "
                                 "model.safetensors.index.json")
        files, weight_map = ["model.safetensors"], None
    names = {}
    for file in files:
        path = os.path.join(model_dir, file)
        if not os.path.exists(path):
            raise BaseModelError(f"missing shard {path} (listed in the index)")
        try:
            with safe_open(path, "np") as f:
                keys = list(f.keys())
        except Exception as e:  # safetensors raises its own error type for bad files
            raise BaseModelError(f"cannot read {path}: {e} (truncated or corrupt?)") from e
        names.update({key: file for key in keys})
    if weight_map is not None:
        absent = sorted(set(weight_map) - set(names))
        if absent:
            raise BaseModelError(f"tensors listed in the index but absent from their shard: "
                                 f"{absent[:5]}")
    return {name: os.path.join(model_dir, file) for name, file in names.items()}
