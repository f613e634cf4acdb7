"""The embedded default tokenizer, for every stage's CPU config and for tests.

A small byte-level BPE trained on the fly on the project's sample data, with
Gemma 4's special tokens (Gemma's fixed ids: <pad> 0, <eos> 1, <bos> 2, <unk> 3,
<mask> 4; then the chat, tool and media control tokens, named in
`tokenizer_config.json` as the real tokenizer names them) and Google's own
Gemma 4 chat template, kept verbatim in `data/templates/` (see PROVENANCE.md
there). Its Gemma 4 format:

    <bos><|turn>system\n{system}<turn|>\n<|turn>user\n{prompt}<turn|>\n<|turn>model\n{answer}<turn|>\n

The generation prompt with thinking off is `<|turn>model\n<|channel>thought\n<channel|>`
(an empty thought block); thinking on (`enable_thinking=True`) opens the system
turn with `<|think|>` and the model writes `<|channel>thought\n...<channel|>`
before the answer. Real runs use the model's own tokenizer and template; the
data package derives loss masks from whichever template it is given.
"""

import json
import os

import transformers
from tokenizers import Tokenizer
from tokenizers import decoders
from tokenizers import models
from tokenizers import pre_tokenizers
from tokenizers import trainers

_HERE = os.path.dirname(os.path.abspath(__file__))
SAMPLE_DATA = os.path.join(_HERE, "sample", "codev_r1_sample.jsonl")
TEMPLATE_PATH = os.path.join(_HERE, "templates", "google-gemma-4-31B-it.jinja")
DEFAULT_VOCAB_SIZE = 1024

# Gemma's fixed special ids first, then every other special token of the real
# tokenizer, named as its tokenizer_config.json names them (`<|video|>` is unnamed).
PAD, EOS, BOS, UNK, MASK = "<pad>", "<eos>", "<bos>", "<unk>", "<mask>"
TURN_START, TURN_END = "<|turn>", "<turn|>"
THINK = "<|think|>"
CHANNEL_START, CHANNEL_END = "<|channel>", "<channel|>"
NAMED_TOKENS = {
    "sot_token": TURN_START, "eot_token": TURN_END, "think_token": THINK,
    "soc_token": CHANNEL_START, "eoc_token": CHANNEL_END,
    "std_token": "<|tool>", "etd_token": "<tool|>",
    "stc_token": "<|tool_call>", "etc_token": "<tool_call|>",
    "str_token": "<|tool_response>", "etr_token": "<tool_response|>",
    "escape_token": '<|"|>',
    "boi_token": "<|image>", "eoi_token": "<image|>", "image_token": "<|image|>",
    "boa_token": "<|audio>", "eoa_token": "<audio|>", "audio_token": "<|audio|>",
}
VIDEO = "<|video|>"
SPECIAL_TOKENS = (PAD, EOS, BOS, UNK, MASK, *NAMED_TOKENS.values(), VIDEO)


with open(TEMPLATE_PATH, encoding="utf-8") as _f:
    CHAT_TEMPLATE = _f.read()


def _corpus(path):
    with open(path) as f:
        for line in f:
            row = json.loads(line)
            yield from (row["system"], row["prompt"], row["response"])


def build_tokenizer(corpus_path=SAMPLE_DATA, vocab_size=DEFAULT_VOCAB_SIZE,
                    chat_tokens=None, chat_template=CHAT_TEMPLATE):
    """Trains the tokenizer (about a second); the same corpus gives the same vocab.

    `chat_tokens` and `chat_template` default to Gemma 4's (every special token
    of the real tokenizer, named as it names them); tests pass others (e.g.
    Gemma 3's `<start_of_turn>`) to check that nothing depends on them.
    """
    if chat_tokens is None:  # Gemma 4's, as the real tokenizer_config.json holds them
        named, extra = dict(NAMED_TOKENS), [VIDEO]
    else:
        named, extra = {}, list(chat_tokens)
    special = [PAD, EOS, BOS, UNK, MASK, *named.values(), *extra]
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=special,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    bpe.train_from_iterator(_corpus(corpus_path), trainer)
    return transformers.PreTrainedTokenizerFast(
        tokenizer_object=bpe, bos_token=BOS, eos_token=EOS, pad_token=PAD,
        unk_token=UNK, mask_token=MASK, model_specific_special_tokens=named,
        extra_special_tokens=extra, chat_template=chat_template, model_max_length=1 << 20)


def end_of_turn_ids(tokenizer):
    """Token ids that end a model turn: what generation stops on."""
    return sorted({tokenizer.eos_token_id, tokenizer.convert_tokens_to_ids(TURN_END)})


EMBEDDED = "embedded"


def load(spec=EMBEDDED, local_files_only=False):
    """`embedded` (the tokenizer above), or a Hugging Face tokenizer directory or id
    (with `local_files_only`, from the Hugging Face cache only)."""
    if spec == EMBEDDED:
        return build_tokenizer()
    return transformers.AutoTokenizer.from_pretrained(spec, local_files_only=local_files_only)
