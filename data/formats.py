"""Rows -> conversations, in the data set formats TRL takes, and CodeV-R1's.

Formats, detected from the columns of the first row (as TRL detects them) unless
`data.format` names one:
  * `messages`: a list of chat messages (`role` system, developer, user,
    assistant or tool; `content`; an assistant's `tool_calls`), with an optional
    `tools` column of function definitions passed to the chat template;
  * `prompt_completion`: `prompt` and `completion`, each a string or a list of
    messages; only the completion is trained;
  * `codev`: CodeV-R1's `system` (optional), `prompt` and `response`, with its
    policies (data/codev.py): the reasoning stripped or kept as Gemma 4
    thinking, and an answer without a Verilog module dropped as `no_code`.

`data.columns` renames columns first (`question=prompt,answer=completion`), so
any other names can be read. System messages are kept, except in the `codev`
profile, which drops them as the reference recipe does (`data.system_policy`).
"""

import json

from data import chat
from data import codev
from data import sources

FORMATS = ("auto", "messages", "prompt_completion", "codev")
SYSTEM_POLICIES = ("auto", "keep", "drop")  # auto: drop for codev, keep otherwise
ROLES = ("system", "developer", "user", "assistant", "tool")


def column_map(spec):
    """`old=new,old2=new2` -> {old: new}; one error line for anything else."""
    mapping = {}
    for pair in filter(None, (p.strip() for p in (spec or "").split(","))):
        old, sep, new = pair.partition("=")
        if not sep or not old.strip() or not new.strip():
            raise sources.DataError(f"data.columns: {pair!r} is not old=new "
                                    "(e.g. question=prompt,answer=completion)")
        mapping[old.strip()] = new.strip()
    return mapping


def detect(columns):
    """The format of rows with these columns."""
    columns = set(columns)
    if "messages" in columns:
        return "messages"
    if {"prompt", "completion"} <= columns:
        return "prompt_completion"
    if {"prompt", "response"} <= columns:
        return "codev"
    raise sources.DataError(
        f"cannot tell the data format from the columns {', '.join(sorted(columns))}: "
        "expected `messages`, `prompt` and `completion`, or CodeV-R1's `prompt` and "
        "`response`; rename columns with data.columns=old=new,... or set data.format")


def _json_value(value):
    """A list or dict stored as JSON text (CSV cells, some exports) -> the value."""
    if isinstance(value, str) and value.lstrip()[:1] in ("[", "{"):
        try:
            return json.loads(value)
        except json.JSONDecodeError:
            return value
    return value


def _check_message(message):
    if not isinstance(message, dict) or message.get("role") not in ROLES:
        raise sources.SkipRow(sources.BAD_MESSAGES, "a message needs a role among "
                              + ", ".join(ROLES))
    content = message.get("content")
    if isinstance(content, list):
        if not all(isinstance(p, dict) and p.get("type") == "text"
                   and isinstance(p.get("text"), str) for p in content):
            raise sources.SkipRow(sources.NOT_TEXT, f"{message['role']} content")
    elif content is not None and not isinstance(content, str):
        raise sources.SkipRow(sources.NOT_A_STRING, f"{message['role']} content")
    # Drop keys whose value is None (Parquet/Arrow rows carry every key of the
    # schema), so a template sees `tool_calls` only where a message has them.
    message = {k: v for k, v in message.items() if v is not None or k == "content"}
    if "tool_calls" in message:
        message["tool_calls"] = _tool_calls(message["tool_calls"])
        if not message["tool_calls"]:
            del message["tool_calls"]
    if message["role"] == "assistant" and not (chat.text(content).strip()
                                               or message.get("tool_calls")):
        raise sources.SkipRow(sources.EMPTY, "assistant content")
    return message


def _tool_calls(calls):
    """Tool calls as a chat template takes them: arguments given as JSON text (the
    OpenAI format) become the object they encode, as vLLM's chat endpoint does
    before rendering, so training renders a call as serving does."""
    if not isinstance(calls, list) or not all(
            isinstance(c, dict) and isinstance(c.get("function"), dict)
            and isinstance(c["function"].get("name"), str) for c in calls):
        raise sources.SkipRow(sources.BAD_MESSAGES, "tool_calls need a function with a name")
    out = []
    for call in calls:
        arguments = call["function"].get("arguments")
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments)
            except json.JSONDecodeError as e:
                raise sources.SkipRow(sources.BAD_MESSAGES,
                                      f"tool call arguments are not JSON: {e}") from e
        out.append({**call, "function": {**call["function"], "arguments": arguments}})
    return out


def _messages(value, field, role=None):
    """The checked messages of a column; a string is one message of `role`, where
    the format allows one (prompt/completion)."""
    value = _json_value(value)
    if value is None:
        raise sources.SkipRow(sources.MISSING_FIELD, field)
    if isinstance(value, str) and role:
        value = [{"role": role, "content": value}]
    if not isinstance(value, list) or not value:
        raise sources.SkipRow(sources.BAD_MESSAGES, f"{field} is not a list of messages")
    return [_check_message(m) for m in value]


class Converter:
    """One row's fields -> a `chat.Conversation`, or `SkipRow` with the reason."""

    def __init__(self, config, columns):
        self.format = config.format if config.format != "auto" else detect(columns)
        if self.format not in FORMATS:
            raise sources.DataError(f"data.format must be one of {FORMATS}, got {self.format!r}")
        if config.system_policy not in SYSTEM_POLICIES:
            raise sources.DataError(
                f"data.system_policy must be one of {SYSTEM_POLICIES}, got {config.system_policy!r}")
        self._config = config
        self._keep_system = (config.system_policy == "keep" or
                             (config.system_policy == "auto" and self.format != "codev"))

    def __call__(self, fields):
        if self.format == "codev":
            return self._codev(fields)
        if self.format == "messages":
            messages, first_trained = _messages(fields.get("messages"), "messages"), 0
        else:
            prompt = _messages(fields.get("prompt"), "prompt", role="user")
            completion = _messages(fields.get("completion"), "completion", role="assistant")
            messages, first_trained = prompt + completion, len(prompt)
        if not self._keep_system:
            def kept(part):
                return [m for m in part if m["role"] not in ("system", "developer")]
            first_trained = len(kept(messages[:first_trained]))
            messages = kept(messages)
        while messages and messages[-1]["role"] != "assistant":
            messages = messages[:-1]  # trailing turns after the last answer train nothing
        if len(messages) <= first_trained:
            raise sources.SkipRow(sources.NO_ASSISTANT)
        tools = _json_value(fields.get("tools")) or None
        if tools is not None and not isinstance(tools, list):
            raise sources.SkipRow(sources.BAD_MESSAGES, "tools is not a list")
        return chat.Conversation(messages, tools, first_trained)

    def _codev(self, fields):
        return chat.Conversation(codev.to_messages(
            codev.to_row(0, fields), self._config.response_policy,
            "keep" if self._keep_system else "drop"))


class Conversations:
    """The rows of the configured source as (row number, `chat.Conversation`) or `Skip`.

    `format` is known once the first row is read; `records` has the cap's counts."""

    def __init__(self, config):
        self._config = config
        self._rename = column_map(config.columns)
        self.records = sources.read(config.source, subset=config.subset, split=config.split,
                                    max_rows=config.max_rows)
        self.format = None

    def __iter__(self):
        convert = None
        for item in self.records:
            if isinstance(item, sources.Skip):
                yield item
                continue
            fields = {self._rename.get(k, k): v for k, v in item.fields.items()}
            if convert is None:
                convert = Converter(self._config, fields)
                self.format = convert.format
            try:
                yield item.number, convert(fields)
            except sources.SkipRow as skip:
                yield sources.Skip(item.number, skip.reason, skip.detail)
