"""The tokenizer and data a planning tool counts tokens with, with or without the Hub.

`//report:plan` and `//training/tpu:compile` count the recipe's data with the
base's tokenizer (steps, token fractions). Both come from the Hub by default.
Without it (no network, or a Hub that does not answer), a tokenizer is read
from the local Hugging Face cache only, at once rather than after the Hub
client's retries, and when neither the tokenizer nor the data was named by the
user, the default recipe's data is stood in for by `synthetic:N` rows with
CodeV-R1's token-length profile under the embedded tokenizer (data/synthetic.py),
said in one line: 10,000 for a plan (as many as the reference reads: its step
count needs them), 1,000 for the compile's token fractions. A user's own data is
never stood in for.
"""

import os
import socket
import urllib.parse

from common import cli
from common import config_cli
from data import pipeline
from data import tokenizer as tokenizer_lib

OFFLINE_ROWS = 10_000  # as many as the reference reads: a plan's step count needs them


class CountingError(cli.UserError):
    """A tokenizer that cannot be loaded to count the data."""


def hub_endpoint():
    """(host, port) of the Hugging Face Hub this process uses (HF_ENDPOINT: a mirror)."""
    url = urllib.parse.urlsplit(os.environ.get("HF_ENDPOINT") or "https://huggingface.co")
    return url.hostname, url.port or (443 if url.scheme == "https" else 80)


def hub_reachable(timeout=3.0):
    try:
        socket.create_connection(hub_endpoint(), timeout=timeout).close()
        return True
    except OSError:
        return False


def load_tokenizer(name, local_files_only=False):
    """The tokenizer `name` (embedded, a directory or a Hub id), or one CountingError."""
    if name != tokenizer_lib.EMBEDDED:
        name = config_cli.path_or_id(name)
    try:
        return tokenizer_lib.load(name, local_files_only=local_files_only)
    except Exception as e:  # network, auth, a directory without a tokenizer alike
        why = (f"{hub_endpoint()[0]} is unreachable and it is not in the local cache"
               if local_files_only else str(e))
        raise CountingError(f"cannot load the tokenizer of {name} to count the data ({why}); "
                            "pass --tokenizer=embedded to count offline") from e


def read(data_config, read_fn, *, tokenizer="", base="", stand_in_rows=OFFLINE_ROWS):
    """(tokenizer name, data source, read_fn(data config, tokenizer)): the data
    counted with `tokenizer` (named by the user) or else `base`'s; offline, the
    default recipe's data stood in for by `stand_in_rows` rows of its profile
    (see the module docstring; fewer where only token fractions are wanted)."""
    name = tokenizer or base
    stand_in = f"synthetic:{stand_in_rows}"
    defaults = not tokenizer and data_config.source == pipeline.REFERENCE_SOURCE
    offline = (name != tokenizer_lib.EMBEDDED and not os.path.exists(
        config_cli.path_or_id(name)) and not hub_reachable())
    try:
        counted_with = load_tokenizer(name, local_files_only=offline)
        print(f"reading {data_config.source}...", flush=True)
        return name, data_config.source, read_fn(data_config, counted_with)
    except cli.UserError as e:
        if not defaults:
            raise
        why = f"{hub_endpoint()[0]} unreachable" if offline else str(e).splitlines()[0][:160]
        print(f"offline ({why}): counting {stand_in} instead of {data_config.source}, "
              "rows with CodeV-R1's token-length profile under the embedded tokenizer; name "
              "the tokenizer and the data source to count real data", flush=True)
    stood_in = data_config.copy_and_resolve_references()
    stood_in.update(source=stand_in, max_rows=0)
    return (tokenizer_lib.EMBEDDED, stand_in,
            read_fn(stood_in, tokenizer_lib.load(tokenizer_lib.EMBEDDED)))
