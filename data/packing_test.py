import collections

import numpy as np
from absl.testing import absltest

from data import chat
from data import packing

PAD = 0


def _example(length, first_token):
    ids = np.arange(first_token, first_token + length, dtype=np.int32)
    mask = np.ones(length, np.int32)
    mask[: length // 2] = 0
    return chat.Encoded(ids, mask)


def _segments(sequences):
    """{first token id: (ids, mask, positions)} of every segment in `sequences`."""
    found = {}
    for row in range(len(sequences["input_ids"])):
        segment_ids = sequences["segment_ids"][row]
        for segment in sorted(set(segment_ids.tolist()) - {0}):
            where = segment_ids == segment
            ids = sequences["input_ids"][row][where]
            found[int(ids[0])] = (ids, sequences["loss_mask"][row][where],
                                  sequences["positions"][row][where])
    return found


class PackingTest(absltest.TestCase):

    def setUp(self):
        super().setUp()
        rng = np.random.default_rng(0)
        lengths = rng.integers(3, 40, size=60)
        starts = np.cumsum([1000, *lengths[:-1]])
        self.examples = [_example(int(n), int(s)) for n, s in zip(lengths, starts)]

    def _check_every_example_once(self, sequences):
        segments = _segments(sequences)
        self.assertLen(segments, len(self.examples))
        for example in self.examples:
            ids, mask, positions = segments[int(example.input_ids[0])]
            np.testing.assert_array_equal(ids, example.input_ids)
            np.testing.assert_array_equal(positions, np.arange(len(example)))
            expected_mask = example.loss_mask.copy()
            expected_mask[0] = 0  # a segment's first token is never a target
            np.testing.assert_array_equal(mask, expected_mask)

    def test_pad(self):
        sequences = packing.pad(self.examples, 48, PAD)
        self.assertEqual(sequences["input_ids"].shape, (60, 48))
        self._check_every_example_once(sequences)
        padding = sequences["segment_ids"] == 0
        self.assertTrue((sequences["input_ids"][padding] == PAD).all())
        self.assertFalse(sequences["loss_mask"][padding].any())

    def test_pack(self):
        sequences = packing.pack(self.examples, 64, PAD)
        self._check_every_example_once(sequences)
        self.assertLess(len(sequences["input_ids"]), len(self.examples))
        self.assertFalse(sequences["loss_mask"][sequences["segment_ids"] == 0].any())
        # Segments are numbered 1, 2, ... from the start of each sequence.
        for row in sequences["segment_ids"]:
            used = [s for s in dict.fromkeys(row.tolist()) if s]
            self.assertEqual(used, list(range(1, len(used) + 1)))
        self.assertGreater(packing.non_padding_fraction(sequences),
                           packing.non_padding_fraction(packing.pad(self.examples, 64, PAD)))

    def test_pack_is_deterministic(self):
        a = packing.pack(self.examples, 64, PAD)
        b = packing.pack(self.examples, 64, PAD)
        for name in packing.FIELDS:
            np.testing.assert_array_equal(a[name], b[name])

    def test_first_fit_reuses_room_in_earlier_sequences(self):
        assignment, count = packing.pack_assignment([6, 6, 3, 4], 10)
        self.assertEqual(count, 2)
        self.assertEqual(collections.Counter(row for row, _, _ in assignment), {0: 2, 1: 2})
        self.assertEqual(assignment[2], (0, 6, 2))

    def test_too_long_example_is_an_error(self):
        with self.assertRaisesRegex(ValueError, "example 0 has 9 tokens"):
            packing.pack([_example(9, 1)], 8, PAD)


    def test_pad_rows_appends_empty_rows_to_a_multiple(self):
        examples = [chat.Encoded(np.arange(1, 5, dtype=np.int32), np.array([0, 1, 1, 1], np.int32))]
        padded = packing.pad_rows(packing.pad(examples * 3, 8, pad_id=0), 4, pad_id=0)
        self.assertEqual(padded["input_ids"].shape, (4, 8))
        self.assertFalse(padded["loss_mask"][3].any() or padded["segment_ids"][3].any())
        self.assertEqual(packing.pad_rows(padded, 4, pad_id=0)["input_ids"].shape, (4, 8))

if __name__ == "__main__":
    absltest.main()
