"""The embedded default tokenizer, for every stage's CPU config and for tests.

A small byte-level BPE trained on the fly on the project's sample data, with
Gemma 4's control tokens as special tokens (Gemma's fixed ids: <pad> 0, <eos>
1, <bos> 2, <unk> 3) and a chat template in the Gemma 4 format:

    <bos><|turn>system\n{system}<turn|>\n<|turn>user\n{prompt}<turn|>\n<|turn>model\n{answer}<turn|>\n

Thinking mode (`enable_thinking=True`) opens the system turn with `<|think|>`,
and the model writes its reasoning as `<|channel>thought\n...<channel|>` before
the answer. Real runs use the model's own tokenizer and template instead; the
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

SAMPLE_DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "sample",
                           "codev_r1_sample.jsonl")
DEFAULT_VOCAB_SIZE = 1024

# Gemma's fixed special ids first, then the Gemma 4 chat control tokens.
PAD, EOS, BOS, UNK, MASK = "<pad>", "<eos>", "<bos>", "<unk>", "<mask>"
TURN_START, TURN_END = "<|turn>", "<turn|>"
THINK = "<|think|>"
CHANNEL_START, CHANNEL_END = "<|channel>", "<channel|>"
SPECIAL_TOKENS = (PAD, EOS, BOS, UNK, MASK, TURN_START, TURN_END, THINK,
                  CHANNEL_START, CHANNEL_END)

# Written for this project in the Gemma 4 chat format (see module docstring).
CHAT_TEMPLATE = (
    "{{- bos_token -}}"
    "{%- set thinking = enable_thinking is defined and enable_thinking -%}"
    "{%- set first = 0 -%}"
    "{%- if messages and messages[0]['role'] == 'system' -%}"
    "{{- '<|turn>system\\n' -}}{%- if thinking -%}{{- '<|think|>\\n' -}}{%- endif -%}"
    "{{- messages[0]['content'] -}}{{- '<turn|>\\n' -}}"
    "{%- set first = 1 -%}"
    "{%- elif thinking -%}"
    "{{- '<|turn>system\\n<|think|>\\n<turn|>\\n' -}}"
    "{%- endif -%}"
    "{%- for message in messages[first:] -%}"
    "{%- if message['role'] not in ['user', 'assistant'] -%}"
    "{{- raise_exception('unsupported role: ' + message['role']) -}}"
    "{%- endif -%}"
    "{%- set role = 'model' if message['role'] == 'assistant' else 'user' -%}"
    "{{- '<|turn>' + role + '\\n' + message['content'] + '<turn|>\\n' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|turn>model\\n' -}}{%- endif -%}"
)


def _corpus(path):
    with open(path) as f:
        for line in f:
            row = json.loads(line)
            yield from (row["system"], row["prompt"], row["response"])


def build_tokenizer(corpus_path=SAMPLE_DATA, vocab_size=DEFAULT_VOCAB_SIZE,
                    chat_tokens=SPECIAL_TOKENS[5:], chat_template=CHAT_TEMPLATE):
    """Trains the tokenizer (about a second); the same corpus gives the same vocab.

    `chat_tokens` and `chat_template` default to Gemma 4's; tests pass others
    (e.g. Gemma 3's `<start_of_turn>`) to check that nothing depends on them.
    """
    special = [PAD, EOS, BOS, UNK, MASK, *chat_tokens]
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=special,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    bpe.train_from_iterator(_corpus(corpus_path), trainer)
    return transformers.PreTrainedTokenizerFast(
        tokenizer_object=bpe, bos_token=BOS, eos_token=EOS, pad_token=PAD,
        unk_token=UNK, mask_token=MASK, additional_special_tokens=list(chat_tokens),
        chat_template=chat_template, model_max_length=1 << 20)


def end_of_turn_ids(tokenizer):
    """Token ids that end a model turn: what generation stops on."""
    return sorted({tokenizer.eos_token_id, tokenizer.convert_tokens_to_ids(TURN_END)})


EMBEDDED = "embedded"


def load(spec=EMBEDDED):
    """`embedded` (the tokenizer above), or a Hugging Face tokenizer directory or id."""
    if spec == EMBEDDED:
        return build_tokenizer()
    return transformers.AutoTokenizer.from_pretrained(spec)
