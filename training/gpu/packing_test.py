"""Packed rows on the GPU stack: each example attends to itself only, on every layer.

A row holds 3 examples (one longer than the tiny model's 16-token sliding window,
so that the window matters inside it) and padding. Every layer's hidden states of
each example, in the packed row, equal those of the example run alone (float32,
within 1e-4), for the eager and sdpa attention of transformers' multimodal Gemma 4 (the 31B's class;
sliding layers of head dim 64, global layers of 128 with K = V); so a change to one
example's tokens changes no other example's (bit for bit). A padding-mask-only
batch, the negative control, leaks across examples. And the same examples packed
or padded give the GPU stack's validation loss and the training gradients alike.
"""

import types

import numpy as np
import torch
import transformers
from absl.testing import absltest

from data import packing
from data import views
from gemma4 import tiny_model
from training.gpu import trainer

VOCAB = 256
LENGTHS = (40, 9, 23)  # + 8 padding: a 80-token row
SEQ_LEN = 80


class _Example:

    def __init__(self, input_ids, prompt=0):
        self.input_ids = np.asarray(input_ids, np.int32)
        self.loss_mask = (np.arange(len(self.input_ids)) >= prompt).astype(np.int32)

    def __len__(self):
        return len(self.input_ids)


def _examples(seed, prompt=0):
    rng = np.random.default_rng(seed)
    return [_Example(rng.integers(3, VOCAB, length), prompt) for length in LENGTHS]


def _batch(examples):
    sequences = packing.pack(examples, SEQ_LEN, pad_id=0)
    assert len(sequences["input_ids"]) == 1, "the examples share one row"
    rows = views.hf_dataset(sequences)
    return views.collate([rows[0]]), sequences["segment_ids"][0]


class PackedAttentionTest(absltest.TestCase):

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        text = tiny_model.tiny_config(VOCAB)
        layer_types = set(text.layer_types)
        assert layer_types == {"sliding_attention", "full_attention"}, layer_types
        cls.config = transformers.Gemma4Config(
            text_config=text.to_dict(),
            vision_config=transformers.Gemma4VisionConfig(**tiny_model.TINY_VISION),
            audio_config=None)
        cls.model = tiny_model.build_tiny_model(cls.config, seed=3)

    def _hidden(self, implementation, **inputs):
        self.model.set_attn_implementation(implementation)
        with torch.no_grad():
            out = self.model(**inputs, output_hidden_states=True)
        return [h[0].numpy() for h in out.hidden_states[1:]] + [out.logits[0].numpy()]

    def _alone(self, implementation, example):
        ids = torch.as_tensor(example.input_ids, dtype=torch.long)[None]
        return self._hidden(implementation, input_ids=ids)

    def test_each_example_sees_only_itself(self):
        examples = _examples(0)
        batch, segments = _batch(examples)
        self.assertEqual(sorted(set(segments.tolist())), [0, 1, 2, 3])
        for implementation in ("eager", "sdpa"):
            packed = self._hidden(implementation, input_ids=batch["input_ids"],
                                  position_ids=batch["position_ids"])
            for number, example in enumerate(examples, start=1):
                where = segments == number
                for layer, (got, alone) in enumerate(
                        zip(packed, self._alone(implementation, example))):
                    np.testing.assert_allclose(
                        got[where], alone, rtol=1e-5, atol=1e-4,
                        err_msg=f"{implementation}, example {number}, output {layer}")

    def test_changing_one_example_leaves_the_others(self):
        examples = _examples(1)
        changed = list(examples)
        changed[1] = _Example(examples[1].input_ids[::-1] + 1)
        (before, segments), (after, _) = _batch(examples), _batch(changed)
        for implementation in ("eager", "sdpa"):
            old, new = (self._hidden(implementation, input_ids=b["input_ids"],
                                     position_ids=b["position_ids"]) for b in (before, after))
            others = (segments == 1) | (segments == 3)
            self.assertGreater(np.abs(old[-1][segments == 2] - new[-1][segments == 2]).max(), 1e-3)
            for layer, (a, b) in enumerate(zip(old, new)):
                np.testing.assert_array_equal(a[others], b[others],
                                              err_msg=f"{implementation}, output {layer}")
            # The negative control: with a padding mask and running positions (one
            # sequence per row, as before packing), example 3 sees example 2.
            plain = {"attention_mask": torch.as_tensor(segments[None] > 0, dtype=torch.long)}
            old, new = (self._hidden(implementation, input_ids=b["input_ids"], **plain)
                        for b in (before, after))
            self.assertGreater(np.abs(old[-1][segments == 3] - new[-1][segments == 3]).max(), 1e-4)

    def test_packed_and_padded_rows_train_alike(self):
        examples = _examples(2, prompt=5)  # 5 prompt tokens per example, not trained
        self.model.set_attn_implementation("sdpa")
        results = {}
        for mode, sequences in (("packed", packing.pack(examples, SEQ_LEN, pad_id=0)),
                                ("padded", packing.pad(examples, SEQ_LEN, pad_id=0))):
            run = types.SimpleNamespace(
                config=types.SimpleNamespace(batch=types.SimpleNamespace(per_device_size=1)),
                prepared=types.SimpleNamespace(eval_sequences=sequences),
                tokenizer=types.SimpleNamespace(pad_token_id=0))
            loss, tokens = trainer.evaluate(self.model, run, "cpu")
            # One accumulated step over the rows, the loss divided by all trained tokens.
            self.model.zero_grad()
            rows = views.hf_dataset(sequences)
            for i in range(len(rows)):
                out = self.model(**views.collate([rows[i]]),
                                 num_items_in_batch=torch.tensor(tokens))
                out.loss.backward()
            grads = {name: p.grad.numpy().copy() for name, p in self.model.named_parameters()
                     if p.grad is not None}
            results[mode] = (len(rows), loss, tokens, grads)
        (packed_rows, *packed), (padded_rows, *padded) = results["packed"], results["padded"]
        self.assertEqual((packed_rows, padded_rows), (1, 3))
        self.assertEqual(packed[1], sum(len(e) - 5 for e in examples))
        self.assertEqual(packed[1], padded[1])
        print(f"\nloss per trained token: packed {packed[0]:.8f}, padded {padded[0]:.8f}")
        self.assertAlmostEqual(packed[0], padded[0], delta=1e-6 * padded[0])
        self.assertCountEqual(packed[2], padded[2])
        worst = max(np.abs(packed[2][n] - padded[2][n]).max() / (np.abs(padded[2][n]).max() + 1e-12)
                    for n in padded[2])
        print(f"largest gradient difference, relative to the tensor's largest: {worst:.2e}")
        self.assertLess(worst, 1e-4)


if __name__ == "__main__":
    absltest.main()
