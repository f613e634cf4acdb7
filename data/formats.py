"""Rows -> conversations, in the data set formats people hold, and CodeV-R1's.

Formats, detected from the columns of the first row unless `data.format` names
one (a rename with `data.columns` comes first):
  * `messages` (TRL's conversational format, OpenAI's fine-tuning chat JSONL):
        {"messages": [{"role": "user", "content": "Add 2 and 3."},
                      {"role": "assistant", "content": "5", "weight": 1}]}
    roles system, developer, user, assistant or tool; an assistant's
    `tool_calls`; an optional `tools` column of function definitions passed to
    the chat template. An assistant message with OpenAI's `weight: 0` is
    context, not trained; every other assistant turn is (`data.turns`).
  * `prompt_completion` (TRL's): `prompt` and `completion`, each a string (the
    user turn, the answer) or a list of messages; only the completion is trained:
        {"prompt": "Add 2 and 3.", "completion": "5"}
  * `alpaca` (Stanford Alpaca, as LLaMA-Factory and Axolotl read it):
        {"instruction": "Add the numbers.", "input": "2 and 3", "output": "5",
         "system": "Be brief.", "history": [["Hi.", "Hello."]]}
    `input`, `system` and `history` are optional. The user turn is the
    instruction, then a newline and the input when there is one, and `history`
    holds earlier [instruction, response] pairs whose responses are trained
    too: LLaMA-Factory's convention (the dataset guide in the `data` folder of
    hiyouga/LLaMA-Factory on GitHub: the human instruction is
    `instruction\ninput`; in supervised fine-tuning the history's answers are
    learned as well).
  * `sharegpt` (ShareGPT, as LLaMA-Factory and Axolotl read it):
        {"conversations": [{"from": "human", "value": "Add 2 and 3."},
                           {"from": "gpt", "value": "5"}], "system": "Be brief."}
    roles `human`/`user`, `gpt`/`assistant`/`model`/`chatgpt`/`bard`/`bing`,
    `system`; tool use as LLaMA-Factory writes it: `function_call` (the value
    is the call as JSON, `{"name": ..., "arguments": ...}`, or a list of calls)
    becomes an assistant tool call, `observation`/`tool`/`function` a tool
    result. Other role names with `data.roles` (`bot=assistant,person=user`);
    optional `system` and `tools` columns. Every assistant turn is trained.
  * `codev`: CodeV-R1's `system` (optional), `prompt` and `response`, with its
    policies (data/codev.py): the reasoning stripped or kept as Gemma 4
    thinking, and an answer without a Verilog module dropped as `no_code`.
  * `text` (TRL's language-modelling format): text already formatted, perhaps
    by a chat template; every token of it is trained, as TRL trains it
    (data/chat.py, `Text`), chat markup and user turns included. To train the
    answers only, give the conversations as `messages`.
        {"text": "<|turn>user\nAdd 2 and 3.<turn|>\n<|turn>model\n5<turn|>\n"}

Text is text: a string in `prompt`, `completion`, `output`, `value` or a
message's `content` trains as the characters it holds, even when they look like
JSON (`[2, 3, 5]`, `{"a": 1}`). Only the columns that hold structures by their
format's definition (`messages`, `conversations`, `tools`, `history`) are read
from JSON text, as CSV cells and some exports store them.

System messages are kept, except in the `codev` profile, which drops them as the
reference recipe does (`data.system_policy`). A row that cannot be used is
skipped with its reason and what was expected and found.
"""

import json

from data import chat
from data import codev
from data import sources

FORMATS = ("auto", "messages", "prompt_completion", "alpaca", "sharegpt", "codev", "text")
SYSTEM_POLICIES = ("auto", "keep", "drop")  # auto: drop for codev, keep otherwise
ROLES = ("system", "developer", "user", "assistant", "tool")
# ShareGPT's role names (`from`) -> ours; FUNCTION_CALL turns become tool calls.
FUNCTION_CALL = "function_call"
SHAREGPT_ROLES = {"human": "user", "user": "user", "gpt": "assistant", "assistant": "assistant",
                  "model": "assistant", "chatgpt": "assistant", "bard": "assistant",
                  "bing": "assistant", "system": "system", FUNCTION_CALL: FUNCTION_CALL,
                  "observation": "tool", "tool": "tool", "function": "tool"}
# The columns whose values are structures by definition: JSON text there is decoded.
STRUCTURED = ("messages", "conversations", "tools", "history")


def _pairs(spec, what, example):
    """`old=new,old2=new2` -> {old: new}; one error line for anything else."""
    mapping = {}
    for pair in filter(None, (p.strip() for p in (spec or "").split(","))):
        old, sep, new = pair.partition("=")
        if not sep or not old.strip() or not new.strip():
            raise sources.DataError(f"{what}: {pair!r} is not old=new (e.g. {example})")
        mapping[old.strip()] = new.strip()
    return mapping


def column_map(spec):
    """data.columns: `old=new,old2=new2` -> {old: new}."""
    return _pairs(spec, "data.columns", "question=prompt,answer=completion")


def role_map(spec):
    """ShareGPT's role names with data.roles's additions (`bot=assistant`)."""
    extra = _pairs(spec, "data.roles", "bot=assistant,person=user")
    for name, role in extra.items():
        if role not in (*ROLES, FUNCTION_CALL):
            raise sources.DataError(f"data.roles: {name}={role}: a role is one of "
                                    f"{', '.join((*ROLES, FUNCTION_CALL))}")
    return {**SHAREGPT_ROLES, **extra}  # looked up as written, then in lower case


_UNKNOWN_FORMAT = "cannot tell the data format from the columns"


def _is_unknown_format(error):
    return str(error).startswith(_UNKNOWN_FORMAT)


def detect(columns):
    """The format of rows with these columns."""
    columns = set(columns)
    if "messages" in columns:
        return "messages"
    if "conversations" in columns:
        return "sharegpt"
    if {"prompt", "completion"} <= columns:
        return "prompt_completion"
    if {"instruction", "output"} <= columns:
        return "alpaca"
    if {"prompt", "response"} <= columns:
        return "codev"
    if "text" in columns:
        return "text"
    raise sources.DataError(
        f"{_UNKNOWN_FORMAT} {', '.join(sorted(map(str, columns)))}: "
        "expected `messages` (chat, OpenAI), `conversations` (ShareGPT), `prompt` and "
        "`completion`, `instruction` and `output` (Alpaca), CodeV-R1's `prompt` and "
        "`response`, or `text` (already formatted); rename columns with "
        "data.columns=old=new,... or set data.format")


def _found(value):
    """What a value is, for a skip reason: `a dict`, `the number 5`, `an empty list`."""
    if value is None:
        return "nothing"
    if isinstance(value, str):
        return f"the text {value[:40]!r}" if value.strip() else "an empty text"
    if isinstance(value, bool):
        return f"the boolean {value}"
    if isinstance(value, (int, float)):
        return f"the number {value}"
    if isinstance(value, (list, tuple)):
        return f"a list of {len(value)}" if value else "an empty list"
    if isinstance(value, dict):
        return f"an object with keys {', '.join(map(str, list(value)[:6]))}"
    return f"a {type(value).__name__}"


def _from_json(text, where, expected):
    """The value JSON `text` encodes; a `bad_messages` skip if it is not JSON."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise sources.SkipRow(sources.BAD_MESSAGES, f"{where}: expected {expected}, found "
                              f"text that is not JSON ({e})") from e


def _structure(value, field):
    """A list or dict of a STRUCTURED column, stored as JSON text in CSV cells and
    some exports -> the value."""
    if isinstance(value, str) and value.strip():
        return _from_json(value, field, "a list as JSON text")
    return value


def _text_field(fields, field, required=True):
    """A string column's text, as it is ("" for an optional one that is missing)."""
    value = fields.get(field)
    if value is None:
        if required:
            raise sources.SkipRow(sources.MISSING_FIELD,
                                  f"expected a value for `{field}`, found none")
        return ""
    if not isinstance(value, str):
        raise sources.SkipRow(sources.NOT_A_STRING,
                              f"{field}: expected text, found {_found(value)}")
    return value


def _check_message(message, where):
    """A message as a template takes it; `where` names it in a skip reason."""
    if not isinstance(message, dict):
        raise sources.SkipRow(sources.BAD_MESSAGES,
                              f"{where}: expected a message object, found {_found(message)}")
    if message.get("role") not in ROLES:
        raise sources.SkipRow(sources.BAD_MESSAGES,
                              f"{where}: expected a role among {', '.join(ROLES)}, found "
                              f"{_found(message.get('role'))}")
    role, content = message["role"], message.get("content")
    if isinstance(content, list):
        if not all(isinstance(p, dict) and p.get("type") == "text"
                   and isinstance(p.get("text"), str) for p in content):
            raise sources.SkipRow(sources.NOT_TEXT,
                                  f"{where} ({role}) content: expected text parts, found "
                                  "other parts (images, audio)")
    elif content is not None and not isinstance(content, str):
        raise sources.SkipRow(sources.NOT_A_STRING,
                              f"{where} ({role}) content: expected text, found {_found(content)}")
    # Drop keys whose value is None (Parquet/Arrow rows carry every key of the
    # schema), so a template sees `tool_calls` only where a message has them.
    message = {k: v for k, v in message.items() if v is not None or k == "content"}
    if "weight" in message:  # OpenAI's: 0 = context, 1 = trained (assistant turns)
        if message["weight"] not in (0, 1) or isinstance(message["weight"], bool):
            raise sources.SkipRow(sources.BAD_MESSAGES,
                                  f"{where} weight: expected 0 or 1, found "
                                  f"{_found(message['weight'])}")
    if "tool_calls" in message:
        message["tool_calls"] = _tool_calls(message["tool_calls"], where)
        if not message["tool_calls"]:
            del message["tool_calls"]
    if role == "assistant" and not (chat.text(content).strip() or message.get("tool_calls")):
        raise sources.SkipRow(sources.EMPTY, f"{where} (assistant): expected an answer or a "
                              f"tool call, found {_found(content)}")
    return message


def _tool_calls(calls, where):
    """Tool calls as a chat template takes them: arguments given as JSON text (the
    OpenAI format) become the object they encode, as vLLM's chat endpoint does
    before rendering, so training renders a call as serving does."""
    if not isinstance(calls, list) or not all(
            isinstance(c, dict) and isinstance(c.get("function"), dict)
            and isinstance(c["function"].get("name"), str) for c in calls):
        raise sources.SkipRow(sources.BAD_MESSAGES,
                              f"{where} tool_calls: expected a list of calls, each with a "
                              f"function and its name, found {_found(calls)}")
    out = []
    for call in calls:
        arguments = call["function"].get("arguments")
        if isinstance(arguments, str):
            arguments = _from_json(arguments, f"{where} tool call arguments", "JSON")
        out.append({**call, "function": {**call["function"], "arguments": arguments}})
    return out


def _message_list(value, field):
    """The checked messages of a column that holds a list of them."""
    if value is None:
        raise sources.SkipRow(sources.MISSING_FIELD, f"expected a value for `{field}`, found none")
    if not isinstance(value, list) or not value:
        raise sources.SkipRow(sources.BAD_MESSAGES,
                              f"{field}: expected a list of messages, found {_found(value)}")
    return [_check_message(m, f"{field}[{i}]") for i, m in enumerate(value)]


def _turn(fields, field, role):
    """prompt/completion: a string is one message of `role`, as it is; a list is
    messages."""
    value = fields.get(field)
    if isinstance(value, list):
        return _message_list(value, field)
    return [_check_message({"role": role, "content": _text_field(fields, field)}, field)]


def _sharegpt_message(turn, where, roles):
    """One ShareGPT turn ({"from", "value"}) as a message of ours."""
    if not isinstance(turn, dict):
        raise sources.SkipRow(sources.BAD_MESSAGES,
                              f"{where}: expected a turn object, found {_found(turn)}")
    if "from" not in turn and "role" in turn:  # a role/content message among them
        return turn
    name, value = turn.get("from"), turn.get("value")
    if isinstance(name, str) and name not in roles:
        name = name.lower()  # `Human`, `GPT`
    if name not in roles:
        raise sources.SkipRow(sources.BAD_MESSAGES,
                              f"{where}: expected `from` among {', '.join(sorted(roles))} "
                              f"(more with data.roles), found {_found(name)}")
    if roles[name] != FUNCTION_CALL:
        return {"role": roles[name], "content": value}
    calls = _from_json(value, f"{where} ({name})", "the call as JSON") \
        if isinstance(value, str) else value
    calls = calls if isinstance(calls, list) else [calls]
    if not all(isinstance(c, dict) and isinstance(c.get("name"), str) for c in calls):
        raise sources.SkipRow(sources.BAD_MESSAGES,
                              f"{where} ({name}): expected a call with a name, found "
                              f"{_found(calls[0] if calls else calls)}")
    return {"role": "assistant", "content": None, "tool_calls": [
        {"type": "function", "function": {"name": c["name"],
                                          "arguments": c.get("arguments", {})}}
        for c in calls]}


def _system(fields):
    """An optional `system` column as the first message."""
    system = _text_field(fields, "system", required=False)
    return [{"role": "system", "content": system}] if system.strip() else []


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
        self._roles = role_map(config.roles)
        self._keep_system = (config.system_policy == "keep" or
                             (config.system_policy == "auto" and self.format != "codev"))

    def __call__(self, fields):
        if self.format == "codev":
            return self._codev(fields)
        if self.format == "text":
            text = _text_field(fields, "text")
            if not text.strip():
                raise sources.SkipRow(sources.EMPTY, "text: expected text to train on, found "
                                      "an empty string")
            return chat.Text(text)
        fields = {k: _structure(v, k) if k in STRUCTURED else v for k, v in fields.items()}
        messages, first_trained = getattr(self, "_" + self.format)(fields)
        if not self._keep_system:
            def kept(part):
                return [m for m in part if m["role"] not in ("system", "developer")]
            first_trained = len(kept(messages[:first_trained]))
            messages = kept(messages)
        # The trained answers: assistant turns from `first_trained` on, but for
        # those weighted 0; the turns after the last of them train nothing.
        weights = [m.pop("weight", 1) for m in messages]
        trained = [i for i, m in enumerate(messages)
                   if m["role"] == "assistant" and i >= first_trained and weights[i]]
        if not trained:
            roles = [m["role"] for m in messages[first_trained:]]
            raise sources.SkipRow(sources.NO_ASSISTANT, (
                "expected an assistant turn to train" + (" after the prompt" if first_trained
                                                         else "") +
                f", found {'roles ' + ', '.join(roles) if roles else 'none'}" +
                (" (every assistant turn has weight 0)" if any(r == "assistant" for r in roles)
                 else "")))
        messages = messages[:trained[-1] + 1]
        untrained = frozenset(i for i, m in enumerate(messages)
                              if m["role"] == "assistant" and i not in trained)
        tools = fields.get("tools") or None
        if tools is not None and not isinstance(tools, list):
            raise sources.SkipRow(sources.BAD_MESSAGES,
                                  f"tools: expected a list of function definitions, found "
                                  f"{_found(tools)}")
        return chat.Conversation(messages, tools, first_trained, untrained)

    def _messages(self, fields):
        turns = fields.get("messages")
        if isinstance(turns, list):  # ShareGPT turns under a `messages` column
            turns = [_sharegpt_message(t, f"messages[{i}]", self._roles)
                     if isinstance(t, dict) and "from" in t else t
                     for i, t in enumerate(turns)]
        return _message_list(turns, "messages"), 0

    def _prompt_completion(self, fields):
        prompt = _turn(fields, "prompt", "user")
        return prompt + _turn(fields, "completion", "assistant"), len(prompt)

    def _alpaca(self, fields):
        instruction = _text_field(fields, "instruction")
        extra = _text_field(fields, "input", required=False)
        messages = [_check_message(m, "system") for m in _system(fields)]
        history = fields.get("history") or []
        if not isinstance(history, list) or not all(
                isinstance(p, (list, tuple)) and len(p) == 2 for p in history):
            raise sources.SkipRow(sources.BAD_MESSAGES,
                                  "history: expected a list of [instruction, response] pairs, "
                                  f"found {_found(history)}")
        for i, (asked, answered) in enumerate(history):
            messages += [_check_message({"role": "user", "content": asked}, f"history[{i}][0]"),
                         _check_message({"role": "assistant", "content": answered},
                                        f"history[{i}][1]")]
        user = f"{instruction}\n{extra}" if extra.strip() else instruction
        messages += [_check_message({"role": "user", "content": user}, "instruction"),
                     _check_message({"role": "assistant",
                                     "content": _text_field(fields, "output")}, "output")]
        return messages, 0

    def _sharegpt(self, fields):
        turns = fields.get("conversations")
        if not isinstance(turns, list) or not turns:
            raise sources.SkipRow(sources.BAD_MESSAGES if turns is not None
                                  else sources.MISSING_FIELD,
                                  f"conversations: expected a list of turns, found {_found(turns)}")
        where = [f"conversations[{i}]" for i in range(len(turns))]
        return [_check_message(m, "system") for m in _system(fields)] + [
            _check_message(_sharegpt_message(t, w, self._roles), w)
            for t, w in zip(turns, where)], 0

    def _codev(self, fields):
        return chat.Conversation(codev.to_messages(
            codev.to_row(0, fields), self._config.response_policy,
            "keep" if self._keep_system else "drop"))


class Conversations:
    """The rows of the configured source as (row number, `chat.Conversation`) or `Skip`.

    `format` is known once the first row is read; `records` has the cap's counts.
    `max_rows`: the first rows read (0: all), data/pipeline.py's `row_cap`."""

    def __init__(self, config, max_rows=0):
        self._config = config
        self._rename = column_map(config.columns)
        self.records = sources.read(config.source, subset=config.subset, split=config.split,
                                    max_rows=max_rows,
                                    encoding=config.encoding)
        self.format = None

    def __iter__(self):
        convert, unknown = None, None
        for item in self.records:
            if isinstance(item, sources.Skip):
                yield item
                continue
            fields = {self._rename.get(k, k): v for k, v in item.fields.items()}
            if convert is None:
                try:
                    convert = Converter(self._config, fields)
                except sources.DataError as e:  # a row whose columns say no format
                    if self._config.format != "auto" or not _is_unknown_format(e):
                        raise
                    unknown = unknown or e
                    yield self._skip(item.number, sources.MISSING_FIELD, str(e))
                    continue
                self.format = convert.format
            try:
                yield item.number, convert(fields)
            except sources.SkipRow as skip:
                yield self._skip(item.number, skip.reason, skip.detail)
        if convert is None and unknown is not None:
            raise unknown  # no row told the format

    def _skip(self, number, reason, detail):
        return sources.Skip(number, reason, self.records.named(number, detail))
