"""Chat rendering with the tokenizer's own template, and loss masks derived from it.

A conversation trains its last assistant message, in exactly the context a
server gives the model when it asks for that message:

  * the prompt is the template's rendering of the messages before it with
    `add_generation_prompt` and the encoder's template arguments (thinking on
    or off), tokenized as a server tokenizes a rendered prompt. Earlier
    assistant turns are part of it, as the template renders history. Google's
    Gemma 4 template needs this: its generation prompt with thinking off ends
    in an empty thought block (`<|channel>thought\n<channel|>`) that a rendered
    past model turn does not have, so rendering the whole conversation would
    train the model after a prompt no server ever sends;
  * trained: the assistant content, and the template text after it up to and
    including the first special token, the end of the turn (`<turn|>`,
    `<end_of_turn>`, `<|im_end|>`, ...), which teaches the model to stop. That
    text is found by rendering the whole conversation with the content
    replaced by a sentinel, so no turn marker is written here;
  * never trained: the prompt, and what follows the end-of-turn token.

Each piece is tokenized on its own: the prompt exactly as a server tokenizes the
rendered prompt, the content as the model generates it after that prompt.
"""

import dataclasses
import numpy as np

from common import cli

# Private-use code points: no template changes them, no data set contains them.
_SENTINEL = "\ue000\ue001"


class TemplateError(cli.UserError):
    """The chat template cannot be used to derive assistant masks."""


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


class ChatEncoder:
    """Turns chat messages into token ids and an assistant-only loss mask."""

    def __init__(self, tokenizer, **template_kwargs):
        if not getattr(tokenizer, "chat_template", None):
            raise TemplateError("the tokenizer has no chat template")
        self._tokenizer = tokenizer
        self._template_kwargs = template_kwargs
        self._special_ids = frozenset(tokenizer.all_special_ids)
        self.media_ids = media_token_ids(tokenizer)

    def render_pieces(self, messages):
        """[(text, is_assistant_content)]: the prompt, the content, the end of the turn."""
        if not messages or messages[-1]["role"] != "assistant":
            raise TemplateError("a conversation without an assistant turn at the end trains "
                                "nothing")
        *context, last = messages
        prompt = self._render(context, add_generation_prompt=True)
        whole = self._render([*context, {**last, "content": _SENTINEL}])
        if whole.count(_SENTINEL) != 1:
            raise TemplateError("the chat template drops or rewrites assistant content")
        ending = whole[whole.index(_SENTINEL) + len(_SENTINEL):]
        return [(prompt, False), (last["content"], True), (ending, False)]

    def _render(self, messages, **kwargs):
        return self._tokenizer.apply_chat_template(
            messages, tokenize=False, **self._template_kwargs, **kwargs)

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
