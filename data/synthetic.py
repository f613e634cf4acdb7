"""Token sequences with CodeV-R1's length profile, for benchmarks.

CodeV-R1's examples, chat-rendered and tokenized, are lognormal in length:
mean ~922 and p99 ~2553 tokens against the reference's 3072-token rows, with
the answer (the trained part) ~15% of each. `examples` scales that profile to
any sequence length, so padding wastes what it wastes on the real run and
packing fills rows as it would. `rows` writes text with that profile instead:
CodeV-R1-schema rows of the sample's words (the data source `synthetic:N`), for
runs that need data and have none (a smoke test on a fresh TPU VM, benchmarks).
"""

import numpy as np

from data import chat

REFERENCE_LENGTH = 3072
# Lognormal parameters solving mean 922 and p99 2553 (mean = e^(mu + s^2/2),
# p99 = e^(mu + 2.326 s)).
LOG_MU, LOG_SIGMA = 6.7067, 0.4895
ANSWER_START = 0.85  # the share of each example before its answer
# Tokens per word of the sample's text under the embedded tokenizer
# (data/tokenizer.py), measured: 22,305 tokens for its 11,495 words. `rows` sizes
# its rows in words by it; Gemma's own tokenizer gives other counts.
TOKENS_PER_WORD = 1.94


def lengths(count, rng, scale=1.0):
    """`count` example lengths in tokens (float), the profile times `scale`."""
    return rng.lognormal(LOG_MU, LOG_SIGMA, count) * scale


def examples(count, seq_len, vocab, seed=0):
    """`count` encoded examples of random tokens in [5, vocab), the profile scaled
    to `seq_len` and clipped to [8, seq_len], the last 15% of each trained."""
    rng = np.random.default_rng(seed)
    counts = np.clip(lengths(count, rng, seq_len / REFERENCE_LENGTH), 8, seq_len).astype(int)
    out = []
    for length in counts:
        mask = np.zeros(length, np.int32)
        mask[int(ANSWER_START * length):] = 1
        out.append(chat.Encoded(rng.integers(5, vocab, length).astype(np.int32), mask))
    return out


def rows(count, words, seed=0, max_tokens=3000):
    """`count` rows of the CodeV-R1 schema (system, prompt, response) whose
    lengths follow the profile (`TOKENS_PER_WORD`), capped at `max_tokens`:
    `words` (the sample's) drawn at random, 85% in the prompt, the rest in a
    response of the shape CodeV-R1's have (thinking, then a Verilog module)."""
    rng = np.random.default_rng(seed)
    for length in np.minimum(lengths(count, rng), max_tokens):
        picked = [words[i] for i in rng.choice(len(words), max(8, int(length / TOKENS_PER_WORD)))]
        split = int(ANSWER_START * len(picked))
        yield {"system": "You are a Verilog expert.",
               "prompt": " ".join(picked[:split]),
               "response": "<think>\nreasoning\n</think>\n<answer>\n```verilog\n"
                           "module m(input a, output y);\n// " + " ".join(picked[split:]) +
                           "\nendmodule\n```\n</answer>"}
