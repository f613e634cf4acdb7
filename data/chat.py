"""Chat rendering with the tokenizer's own template, and loss masks derived from it.

An assistant turn is trained on what the model writes in it: its tool calls,
its content, and the template's end of the turn (up to and including the first
special token after them, `<turn|>`, `<end_of_turn>`, `<|im_end|>`, ...), which
teaches the model to stop. The turn header the template writes before it, the
other roles' turns and what follows the end-of-turn token are never trained.

The last assistant turn is trained in exactly the context a server gives the
model when it asks for that turn: the template's rendering of the messages
before it with `add_generation_prompt` and the encoder's template arguments
(thinking on or off). Google's Gemma 4 template needs this: its generation
prompt with thinking off ends in an empty thought block
(`<|channel>thought\n<channel|>`) that a rendered past model turn does not have.
That prompt is tokenized whole, as a server tokenizes it, and the trained part
is tokenized as the model generates it after that prompt.

Earlier assistant turns (`turns="all"`, the default) are trained where the
prompt renders them as history, i.e. as the model reads them when the
conversation goes on (the template may rewrite them there: Gemma 4 strips the
thinking of past turns); `turns="last"` keeps them as context only.

Nothing here knows a template's markers: every span is found by rendering the
conversation with private-use sentinels in place of assistant contents, and
with a turn's tool calls left out, and comparing the texts.
"""

import dataclasses
import numpy as np

from common import cli

TURNS = ("all", "last")


class TemplateError(cli.UserError):
    """The chat template cannot be used to derive assistant masks."""


@dataclasses.dataclass(frozen=True)
class Conversation:
    messages: list  # [{"role": ..., "content": ..., "tool_calls": [...]?}, ...]
    tools: list = None  # tool (function) definitions, passed to the template
    first_trained: int = 0  # messages before this index are context (a prompt's turns)
    # Assistant turns trained on nothing (OpenAI's `weight: 0`); the last one is trained.
    untrained: frozenset = frozenset()


@dataclasses.dataclass(frozen=True)
class Text:
    """Text already formatted (TRL's `text` column), trained as language modelling,
    as TRL trains it: every token is a target. The tokenizer's BOS goes first
    unless the text starts with it (text rendered by a chat template does), and
    its EOS last unless the text ends with it."""
    text: str


@dataclasses.dataclass(frozen=True)
class Encoded:
    input_ids: np.ndarray  # int32 [length]
    loss_mask: np.ndarray  # int32 [length], 1 where the token is a training target

    def __len__(self):
        return len(self.input_ids)


# The media placeholders of Gemma 4's tokenizer, by the names it gives them.
_MEDIA_TOKENS = ("image_token", "audio_token", "video_token")


def media_token_ids(tokenizer):
    """Ids of the tokenizer's image/audio/video placeholder tokens (none for text-only
    tokenizers). A multimodal model replaces their embeddings by media features, so a
    training row must not hold them (the pipeline skips such rows)."""
    tokens = {getattr(tokenizer, name, None) for name in _MEDIA_TOKENS} | {"<|video|>"}
    vocab = tokenizer.get_vocab()
    return np.asarray(sorted(vocab[t] for t in tokens if t in vocab and
                             t in tokenizer.all_special_tokens), np.int32)


def _sentinel(index):
    # Private-use code points: no template changes them, no data set contains them.
    return f"\ue000{index}\ue001"


def text(content):
    """An assistant content as the text the model writes (None for tool calls alone)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list) and all(
            isinstance(p, dict) and p.get("type") == "text" for p in content):
        return "".join(p.get("text", "") for p in content)
    raise TemplateError("an assistant content must be text (a string or text parts)")


@dataclasses.dataclass(frozen=True)
class _Rendered:
    prompt: str  # what a server renders before the last assistant turn
    history: tuple  # (start, end) character spans of earlier trained turns in `prompt`
    generated: tuple  # the last turn's (tool calls before, content, tool calls after)
    ending: str  # the template's text after the last turn's content


def _between(real, marked, start, end):
    """What `real` has where `marked` has the sentinel at [start, end)."""
    suffix = marked[end:]
    if not (real.startswith(marked[:start]) and real.endswith(suffix)
            and len(real) >= start + len(suffix)):
        raise TemplateError("the chat template renders one assistant turn differently "
                            "depending on another turn's content")
    return real[start:len(real) - len(suffix)]


class ChatEncoder:
    """Turns conversations into token ids and assistant-only loss masks."""

    def __init__(self, tokenizer, turns="all", **template_kwargs):
        if not getattr(tokenizer, "chat_template", None):
            raise TemplateError("the tokenizer has no chat template")
        if turns not in TURNS:
            raise TemplateError(f"turns must be one of {TURNS}, got {turns!r}")
        self._tokenizer = tokenizer
        self._turns = turns
        self._template_kwargs = template_kwargs
        self._special_ids = frozenset(tokenizer.all_special_ids)
        self.media_ids = media_token_ids(tokenizer)

    def _render(self, messages, tools, **kwargs):
        return self._tokenizer.apply_chat_template(
            messages, tools=tools, tokenize=False, **self._template_kwargs, **kwargs)

    @staticmethod
    def _find(text, index):
        sentinel = _sentinel(index)
        if text.count(sentinel) != 1:
            raise TemplateError("the chat template drops or rewrites assistant content")
        start = text.index(sentinel)
        return start, start + len(sentinel)

    def _tool_calls(self, messages, tools, index, text, **kwargs):
        """The text `text` holds for message `index`'s tool calls: (before, after) its content."""
        if not messages[index].get("tool_calls"):
            return "", ""
        start, end = self._find(text, index)
        bare = {k: v for k, v in messages[index].items() if k != "tool_calls"}
        other = self._render([*messages[:index], bare, *messages[index + 1:]], tools, **kwargs)
        other_start, other_end = self._find(other, index)
        if (other_start < start and text.startswith(other[:other_start])
                and text[start:] == other[other_start:]):
            return text[other_start:start], ""
        rest = other[other_end:]
        if (other_start == start and text[:end] == other[:other_end] and text.endswith(rest)
                and len(text) - len(rest) >= end):
            return "", text[end:len(text) - len(rest)]
        raise TemplateError("the chat template renders tool calls apart from their turn's content")

    def render(self, conversation):
        """The texts of a conversation: the served prompt, with the spans of the earlier
        turns it trains, then the last turn and the template's text after it."""
        messages, tools = list(conversation.messages), conversation.tools
        if not messages or messages[-1].get("role") != "assistant":
            raise TemplateError("a conversation without an assistant turn at the end trains "
                                "nothing")
        last = len(messages) - 1
        trained = [last]
        if self._turns == "all":
            trained = [i for i, m in enumerate(messages) if m.get("role") == "assistant"
                       and i >= conversation.first_trained and i not in conversation.untrained]
        marked = [{**m, "content": _sentinel(i)} if i in trained else m
                  for i, m in enumerate(messages)]
        whole = self._render(marked, tools)
        _, end = self._find(whole, last)
        before, after = self._tool_calls(marked, tools, last, whole)
        prompt, history = self._history(messages, marked, tools, trained[:-1])
        return _Rendered(prompt, history, (before, text(messages[last].get("content")), after),
                         whole[end + len(after):])

    def _history(self, messages, marked, tools, earlier):
        """The served prompt for the last turn, and the spans of the `earlier` turns in it."""
        context = marked[:-1]
        served = self._render(context, tools, add_generation_prompt=True)
        if not earlier:
            return served, ()
        pieces, spans, cursor, length = [], [], 0, 0
        for index in earlier:
            start, end = self._find(served, index)
            before, after = self._tool_calls(context, tools, index, served,
                                             add_generation_prompt=True)
            restored = [*context[:index], messages[index], *context[index + 1:]]
            content = _between(self._render(restored, tools, add_generation_prompt=True),
                               served, start, end)
            head, span = served[cursor:start - len(before)], before + content + after
            pieces += [head, span]
            spans.append((length + len(head), length + len(head) + len(span)))
            length += len(head) + len(span)
            cursor = end + len(after)
        pieces.append(served[cursor:])
        prompt = "".join(pieces)
        if prompt != self._render(messages[:-1], tools, add_generation_prompt=True):
            raise TemplateError("the chat template renders one assistant turn differently "
                                "depending on another turn's content")
        return prompt, tuple(spans)

    def encode_many(self, conversations):
        """Encodes several conversations (and `Text`s) with two batched tokenizer calls."""
        if any(isinstance(c, Text) for c in conversations):
            texts = iter(self._encode_texts([c for c in conversations if isinstance(c, Text)]))
            chats = iter(self.encode_many([c for c in conversations
                                           if not isinstance(c, Text)]))
            return [next(texts if isinstance(c, Text) else chats) for c in conversations]
        rendered = [self.render(c) for c in conversations]
        if not rendered:
            return []
        prompts = self._tokenizer([r.prompt for r in rendered], add_special_tokens=False,
                                  return_offsets_mapping=True)
        pieces = self._tokenizer([p for r in rendered for p in (*r.generated, r.ending)],
                                 add_special_tokens=False)["input_ids"]
        out = []
        for i, r in enumerate(rendered):
            prompt_ids = prompts["input_ids"][i]
            *generated, ending = pieces[4 * i:4 * i + 4]
            generated = [t for piece in generated for t in piece]
            mask = (self._history_mask(prompt_ids, prompts["offset_mapping"][i], r.history)
                    + [1] * len(generated) + self._end_of_turn_mask(ending))
            out.append(Encoded(np.asarray(prompt_ids + generated + ending, np.int32),
                               np.asarray(mask, np.int32)))
        return out

    def _encode_texts(self, texts):
        tokenizer = self._tokenizer
        bos, eos = tokenizer.bos_token, tokenizer.eos_token
        ids = tokenizer([t.text if not eos or t.text.endswith(eos) else t.text + eos
                         for t in texts], add_special_tokens=False)["input_ids"]
        out = []
        for text, row in zip(texts, ids):
            if bos and not text.text.startswith(bos):
                row = [tokenizer.bos_token_id] + row
            mask = np.ones(len(row), np.int32)
            mask[0] = 0  # nothing before it to predict it from
            out.append(Encoded(np.asarray(row, np.int32), mask))
        return out

    def encode(self, messages, tools=None, first_trained=0):
        return self.encode_many([Conversation(messages, tools, first_trained)])[0]

    def _history_mask(self, ids, offsets, spans):
        """1 on the prompt's tokens that start inside a trained span, and on each span's
        end-of-turn token."""
        mask = np.zeros(len(ids), np.int32)
        starts = np.asarray([start for start, _ in offsets], np.int64)
        for start, end in spans:
            mask[(starts >= start) & (starts < end)] = 1
            after = int(np.searchsorted(starts, end))
            mask[after:] |= np.asarray(self._end_of_turn_mask(ids[after:]), np.int32)
        return mask.tolist()

    def _end_of_turn_mask(self, ids):
        """1 up to and including the first special token of `ids` (the end of the turn)."""
        for i, token in enumerate(ids):
            if token in self._special_ids:
                return [1] * (i + 1) + [0] * (len(ids) - i - 1)
        raise TemplateError(
            "the chat template ends an assistant turn without a special token, so "
            "there is no end-of-turn token to train")
