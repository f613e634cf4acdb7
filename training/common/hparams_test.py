from absl.testing import absltest

from data import pipeline
from training.common import hparams


class HparamsTest(absltest.TestCase):

    def test_reference_values(self):
        c = hparams.reference()
        self.assertEqual((c.lora.rank, c.lora.alpha, c.lora.dropout), (64, 64.0, 0.05))
        self.assertEqual(c.optimizer.learning_rate, 1e-4)
        self.assertEqual(c.optimizer.weight_decay, 0.001)
        self.assertEqual(c.optimizer.warmup_steps, 100)
        self.assertEqual(c.batch.effective_size, 8)
        self.assertEqual((pipeline.row_cap(c.data), c.data.shuffle_seed, c.data.max_seq_len),
                         (10_000, 42, 3072))  # the first 10,000 rows of CodeV-R1
        c.data.source = "/home/me/chats.jsonl"
        self.assertEqual(pipeline.row_cap(c.data), 0)  # a user's own data is read whole
        self.assertEqual(len(c.lora.target_modules), 7)

    def test_warmup_is_steps_or_a_fraction_of_the_run(self):
        c = hparams.reference()
        self.assertEqual(hparams.warmup_steps(c.optimizer, 1244), 100)
        c.optimizer.warmup_steps, c.optimizer.warmup_ratio = 0, 0.03
        self.assertEqual(hparams.warmup_steps(c.optimizer, 1244), 38)  # ceil(37.32)
        self.assertEqual(hparams.warmup_steps(c.optimizer, 10), 1)
        c.optimizer.warmup_ratio = 1.5
        with self.assertRaisesRegex(hparams.RecipeError, "a ratio in \\[0, 1\\]"):
            hparams.warmup_steps(c.optimizer, 10)

    def test_accumulation_matches_reference_meshes(self):
        c = hparams.reference()
        # v5p-8 (fsdp=1: one data-parallel replica): 1 x 8 x 1.
        self.assertEqual(hparams.gradient_accumulation_steps(c.batch, 1), 8)
        # 2 x H100 FSDP (two replicas): 1 x 4 x 2.
        self.assertEqual(hparams.gradient_accumulation_steps(c.batch, 2), 4)

    def test_indivisible_batch_is_rejected(self):
        c = hparams.reference()
        with self.assertRaisesRegex(hparams.RecipeError, "not a multiple"):
            hparams.gradient_accumulation_steps(c.batch, 3)
        # 0 divides evenly, into zero micro-steps: refused by name.
        c.batch.effective_size = 0
        with self.assertRaisesRegex(hparams.RecipeError, "effective batch 0: it must be positive"):
            hparams.gradient_accumulation_steps(c.batch, 1)


if __name__ == "__main__":
    absltest.main()
