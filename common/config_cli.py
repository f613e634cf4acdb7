"""The one way every stage binary takes its ml_collections config file.

    _CONFIG = config_cli.define_config_flag(__file__)   # --config, default cpu.py

`--config=v5p8.py` (a bare file name) resolves against the binary's own
`configs/` folder; anything with a slash is a path, relative to the user's
working directory (`BUILD_WORKING_DIRECTORY` under `bazel run`, since Bazel runs
the binary inside its runfiles tree). `--config.a.b=value` overrides work as
ml_collections defines them, and unknown fields are errors because the loaded
config is locked. `write_resolved_config` records what a run actually used.
"""

import difflib
import importlib.util
import json
import os
import re
import sys

from absl import flags
from ml_collections import config_dict
from ml_collections import config_flags

from common import storage

CONFIGS_DIRNAME = "configs"
DEFAULT_CONFIG = "cpu.py"
RESOLVED_CONFIG_FILENAME = "config.json"


def user_working_dir():
    """The directory the user ran the command from (also under `bazel run`)."""
    return os.environ.get("BUILD_WORKING_DIRECTORY") or os.getcwd()


def user_path(path):
    """An absolute path for a path the user typed (flags such as --workdir); a
    gs:// URL stays a URL (common/storage.py reads and writes both)."""
    if not path:
        return path
    if storage.is_url(path):
        return storage.check_url(path)
    return os.path.abspath(os.path.join(user_working_dir(), os.path.expanduser(path)))


def path_or_id(name):
    """`name` as a path the user typed (resolved as `user_path`) where one exists
    there, else as given: a Hub id (a base model, a tokenizer)."""
    path = user_path(name)
    return path if os.path.exists(path) else name


def resolve_config_path(value, configs_dir):
    """Maps a --config value to a file, keeping any `:args` suffix for get_config."""
    path, sep, args = value.partition(":")
    if "/" in path:
        resolved = user_path(path)
    else:
        resolved = os.path.join(configs_dir, path)
    if not os.path.isfile(resolved):
        available = sorted(
            f for f in os.listdir(configs_dir)
            if f.endswith(".py") and not f.startswith("_")) if os.path.isdir(configs_dir) else []
        where = (f"{resolved}" if "/" in path
                 else f"{configs_dir} (bare names are looked up there)")
        raise ValueError(
            f"no config file {path!r}: not found at {where}. "
            f"Available configs: {', '.join(available) or 'none'}.")
    return resolved + sep + args


def load(value, configs_dir):
    """The ConfigDict of a --config value (a name in `configs_dir` or a path,
    `:args` passed to get_config), read outside flag parsing."""
    path, _, args = resolve_config_path(value, configs_dir).partition(":")
    spec = importlib.util.spec_from_file_location("_g4_loaded_config", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.get_config(args) if args else module.get_config()


class _ResolvingParser(flags.ArgumentParser):
    """Wraps ml_collections' config file parser with our path resolution."""

    def __init__(self, inner, name, configs_dir):
        self._inner = inner
        self._name = name
        self._configs_dir = configs_dir

    def parse(self, argument):
        config = self._inner.parse(resolve_config_path(argument, self._configs_dir))
        # The stock parser defers a load error to first access; the path was
        # checked above, so anything but a ConfigDict here is a broken file.
        if not isinstance(config, config_dict.ConfigDict):
            raise ValueError(f"{argument}: get_config() must return a ConfigDict, "
                             f"got {type(config).__name__}")
        _check_override_fields(config, self._name, sys.argv)
        return config

    def flag_type(self):
        return self._inner.flag_type()


def _check_override_fields(config, name, argv):
    """Fails on --NAME.a.b=... overrides naming a field the config lacks.

    ml_collections rejects them too, but with an AttributeError traceback from
    inside flag parsing; this turns them into a usage error naming the field.
    """
    prefix = re.compile(rf"^--?(no)?{re.escape(name)}\.([^=]+)")
    for arg in argv:
        match = prefix.match(arg)
        if not match:
            continue
        node = config
        for part in match.group(2).split("."):
            fields = node.keys() if isinstance(node, config_dict.ConfigDict) else []
            if part not in fields:
                close = difflib.get_close_matches(part, list(fields), n=1)
                hint = f"; did you mean {close[0]!r}?" if close else ""
                raise ValueError(
                    f"{arg}: the config has no field {match.group(2)!r}{hint}")
            node = node[part]


def define_config_flag(binary_file, default=DEFAULT_CONFIG, name="config",
                       flag_values=flags.FLAGS):
    """Defines --config for the binary whose source file is `binary_file`."""
    configs_dir = os.path.join(os.path.dirname(os.path.abspath(binary_file)),
                               CONFIGS_DIRNAME)
    holder = config_flags.DEFINE_config_file(
        name, default=None,
        help_string=(f"ml_collections config file: a name in {configs_dir} "
                     f"or a path; override fields with --{name}.field=value"),
        flag_values=flag_values, lock_config=True)
    flag = flag_values[name]
    flag.parser = _ResolvingParser(flag.parser, name, configs_dir)
    # Set the default only now, so that it goes through the resolving parser.
    flag_values.set_default(name, default)
    return holder


def write_resolved_config(config, out_dir):
    """Writes `config.json` (the config after overrides) into `out_dir` (a folder
    or a gs:// URL)."""
    storage.makedirs(out_dir)
    path = storage.join(out_dir, RESOLVED_CONFIG_FILENAME)
    storage.write_json(path, json.loads(config.to_json_best_effort()))
    return path


def read_resolved_config(run_dir):
    """The config a run recorded, as a locked ConfigDict."""
    config = config_dict.ConfigDict(
        storage.read_json(storage.join(run_dir, RESOLVED_CONFIG_FILENAME)))
    config.lock()
    return config
