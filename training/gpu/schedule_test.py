"""The GPU stack's learning rate is the shared schedule's at every step,
with and without an end rate above zero."""

import torch
import transformers
from absl.testing import absltest

from training.common import hparams
from training.common import schedule
from training.gpu import trainer


class ScheduleTest(absltest.TestCase):

    def test_hf_scheduler_follows_the_shared_schedule(self):
        for end in (0.0, 2e-3, 1e-2):
            with self.subTest(end=end):
                config = hparams.reference().optimizer
                config.learning_rate, config.warmup_steps, config.end_learning_rate = 1e-2, 3, end
                chosen = trainer._schedule(config)  # pylint: disable=protected-access
                optimizer = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(1))],
                                              lr=config.learning_rate)
                scheduler = transformers.get_scheduler(
                    chosen["lr_scheduler_type"], optimizer, num_warmup_steps=3,
                    num_training_steps=20,
                    scheduler_specific_kwargs=chosen.get("lr_scheduler_kwargs"))
                for step in range(20):
                    self.assertAlmostEqual(
                        scheduler.get_last_lr()[0],
                        schedule.learning_rate(step, 1e-2, 3, 20, end), delta=1e-9)
                    optimizer.step()
                    scheduler.step()


if __name__ == "__main__":
    absltest.main()
