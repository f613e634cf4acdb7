"""The chat template the server renders prompts with: the model's own, after a
prelude that gives it text-only message contents as strings.

vLLM reads Gemma 4's template as one that takes OpenAI content parts (the
template loops over a message's parts to place images), so it hands the
template every message's content as a list of parts, plain strings included.
The template renders parts in every turn but the first system (or developer)
turn, whose content it prints as text: the system prompt "Be brief." reached
the model as "[{'type': 'text', 'text': 'Be brief.'}]". Training renders the
string, and evaluation sends VerilogEval's system prompt with every request.
vLLM's other content format ("string") fixes the system turn but fails image
prompts, so the template is what changes:

PRELUDE joins the parts of a message whose parts are all text into one string
(with newlines, as vLLM's string format joins them); a message with an image,
audio or video part keeps its parts. Then the model's template follows,
unchanged. A conversation whose contents are strings renders exactly as the
model's template renders it (chat_template_test checks both against
transformers).

The model's template comes from the model's directory (chat_template.jinja,
else tokenizer_config.json), or for a Hub id from the Hub, as vLLM would
load it.
"""

import json
import os

from common import cli
from gemma4 import base_model

FILE_NAME = "chat_template.jinja"

PRELUDE = """\
{#- serving/chat_template.py: text-only contents as strings -#}
{%- set text_only_ns = namespace(messages=[]) -%}
{%- for message in messages -%}
    {%- set content = message['content'] -%}
    {%- if content is iterable and content is not string and content is not mapping
          and content | length > 0
          and content | rejectattr('type', 'equalto', 'text') | list | length == 0 -%}
        {%- set text_only_ns.messages = text_only_ns.messages
              + [dict(message, content=content | map(attribute='text') | join('\\n'))] -%}
    {%- else -%}
        {%- set text_only_ns.messages = text_only_ns.messages + [message] -%}
    {%- endif -%}
{%- endfor -%}
{%- set messages = text_only_ns.messages -%}
"""


class TemplateError(cli.UserError):
    """A model directory whose chat template cannot be read."""


def with_prelude(template):
    """The template the server gets: PRELUDE, then the model's `template`."""
    return PRELUDE + template


def _read_local(directory):
    """(template, where it came from) of a model directory; (None, why) without one."""
    path = os.path.join(directory, FILE_NAME)
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            return f.read(), path
    path = os.path.join(directory, "tokenizer_config.json")
    if not os.path.exists(path):
        return None, f"{directory} has neither {FILE_NAME} nor tokenizer_config.json"
    try:
        with open(path, encoding="utf-8") as f:
            template = json.load(f).get("chat_template")
    except ValueError as e:
        raise TemplateError(f"{path} is not valid JSON: {e}") from e
    if isinstance(template, list):  # named templates: the default one
        template = next((t.get("template") for t in template
                         if isinstance(t, dict) and t.get("name") == "default"), None)
    if not isinstance(template, str) or not template:
        return None, f"neither {directory}/{FILE_NAME} nor its tokenizer_config.json holds one"
    return template, f"{path}:chat_template"


def _download(repo_id):
    """(template, where) of a Hub model, or (None, why): its chat_template.jinja,
    else its tokenizer_config.json."""
    from huggingface_hub import hf_hub_download  # pylint: disable=import-outside-toplevel
    errors = []
    for name in (FILE_NAME, "tokenizer_config.json"):
        try:
            path = hf_hub_download(repo_id, name)
        except Exception as e:  # pylint: disable=broad-except  # missing file, network, auth
            errors.append(f"{name}: {type(e).__name__}")
            continue
        return _read_local(os.path.dirname(path))
    return None, f"could not download {repo_id}'s template ({'; '.join(errors)})"


def model_template(model):
    """(template, where it came from) of `model` (a directory or a Hub id), or
    (None, why not)."""
    if os.path.isdir(model):
        return _read_local(model)
    if base_model.is_hub_id(model):
        return _download(model)
    return None, f"{model!r} is neither a directory nor a Hub id"


def write(model, directory):
    """Writes `model`'s template after PRELUDE to directory/chat_template.jinja.

    Returns (its absolute path, where the model's template came from), or
    (None, why not): the server then renders with the template vLLM loads.
    """
    template, source = model_template(model)
    if template is None:
        return None, source
    os.makedirs(directory, exist_ok=True)
    path = os.path.abspath(os.path.join(directory, FILE_NAME))  # a container sees it there too
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        f.write(with_prelude(template))
    os.replace(path + ".tmp", path)
    return path, source
