"""Chat rendering with the tokenizer's own template, and loss masks derived from it.

The template is rendered once with every assistant message replaced by a unique
sentinel. What lies between the sentinels is the template's own text (turn
markers, system and user turns); where a sentinel was is the assistant content.
So the masks follow whatever template the tokenizer carries (Gemma 4, Gemma 3,
ChatML, ...), with no turn markers written here:

  * trained: the assistant content, and the template text after it up to and
    including the first special token, the end of the turn (`<turn|>`,
    `<end_of_turn>`, `<|im_end|>`, ...), which teaches the model to stop;
  * never trained: everything else (BOS, system and user turns, the generation
    prompt, the newline after the end-of-turn token).

Each piece is tokenized on its own: the prompt exactly as a server tokenizes the
rendered prompt, the content as the model generates it after that prompt.
"""

import dataclasses
import re

import numpy as np

from tools.common import cli

# Private-use code points: no template changes them, no data set contains them.
_SENTINEL = "\ue000{}\ue001"
_SENTINEL_RE = re.compile("\ue000(\\d+)\ue001")


class TemplateError(cli.UserError):
    """The chat template cannot be used to derive assistant masks."""


@dataclasses.dataclass(frozen=True)
class Encoded:
    input_ids: np.ndarray  # int32 [length]
    loss_mask: np.ndarray  # int32 [length], 1 where the token is a training target

    def __len__(self):
        return len(self.input_ids)


class ChatEncoder:
    """Turns chat messages into token ids and an assistant-only loss mask."""

    def __init__(self, tokenizer, **template_kwargs):
        if not getattr(tokenizer, "chat_template", None):
            raise TemplateError("the tokenizer has no chat template")
        self._tokenizer = tokenizer
        self._template_kwargs = template_kwargs
        self._special_ids = frozenset(tokenizer.all_special_ids)

    def render_pieces(self, messages):
        """[(text, is_assistant_content)] in order; template text and contents alternate."""
        contents = []
        masked = []
        for message in messages:
            if message["role"] == "assistant":
                masked.append({**message, "content": _SENTINEL.format(len(contents))})
                contents.append(message["content"])
            else:
                masked.append(message)
        if not contents:
            raise TemplateError("a conversation without an assistant turn trains nothing")
        text = self._tokenizer.apply_chat_template(
            masked, tokenize=False, **self._template_kwargs)
        pieces = []
        position = 0
        for expected, match in enumerate(_SENTINEL_RE.finditer(text)):
            if int(match.group(1)) != expected:
                raise TemplateError("the chat template reorders or repeats assistant turns")
            pieces.append((text[position:match.start()], False))
            pieces.append((contents[expected], True))
            position = match.end()
        if len(pieces) != 2 * len(contents):
            raise TemplateError("the chat template drops or rewrites assistant content")
        pieces.append((text[position:], False))
        return pieces

    def encode_many(self, conversations):
        """Encodes several conversations with one batched tokenizer call."""
        rendered = [self.render_pieces(messages) for messages in conversations]
        flat = [text for pieces in rendered for text, _ in pieces]
        ids = self._tokenizer(flat, add_special_tokens=False)["input_ids"] if flat else []
        out = []
        cursor = 0
        for pieces in rendered:
            out.append(self._assemble(pieces, ids[cursor:cursor + len(pieces)]))
            cursor += len(pieces)
        return out

    def encode(self, messages):
        return self.encode_many([messages])[0]

    def _assemble(self, pieces, piece_ids):
        input_ids = []
        loss_mask = []
        after_content = False
        for (_, is_content), ids in zip(pieces, piece_ids):
            if is_content:
                mask = [1] * len(ids)
            elif after_content:
                mask = self._end_of_turn_mask(ids)
            else:
                mask = [0] * len(ids)
            input_ids += ids
            loss_mask += mask
            after_content = is_content
        return Encoded(np.asarray(input_ids, np.int32), np.asarray(loss_mask, np.int32))

    def _end_of_turn_mask(self, ids):
        for i, token in enumerate(ids):
            if token in self._special_ids:
                return [1] * (i + 1) + [0] * (len(ids) - i - 1)
        raise TemplateError(
            "the chat template ends an assistant turn without a special token, so "
            "there is no end-of-turn token to train")
