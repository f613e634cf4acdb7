"""Trackers beside metrics.jsonl: names, a missing wandb, and a W&B offline run
that holds what metrics.jsonl holds (resumed as one run)."""

import json
import os
import sys
from unittest import mock

from absl.testing import absltest

from training.common import hparams
from training.common import metrics
from training.common import tracking
from training.common import wandb_offline


def offline_config(tags=("cpu",)):
    config = hparams.reference()
    config.tracking.report_to = "tensorboard,wandb"
    config.tracking.wandb_mode = "offline"
    config.tracking.tags = tags
    return config


class TrackingTest(absltest.TestCase):

    def test_requested_trackers(self):
        config = hparams.reference()
        self.assertEqual(tracking.requested(config.tracking), ["tensorboard"])
        config.tracking.report_to = "wandb"
        self.assertEqual(tracking.requested(config.tracking), ["tensorboard", "wandb"])
        config.tracking.report_to = "tensorboard,mlflow"
        with self.assertRaisesRegex(tracking.TrackingError, "names mlflow: the trackers are "
                                    "tensorboard, wandb"):
            tracking.requested(config.tracking)

    def test_missing_wandb_is_one_clear_error(self):
        config = offline_config()
        with mock.patch.dict(sys.modules, {"wandb": None}):
            with self.assertRaisesRegex(tracking.TrackingError,
                                        "names wandb but the wandb package is not installed"):
                tracking.check(config)
        tracking.check(config)  # installed here
        # Online without credentials: refused at start, before the run loads anything.
        config.tracking.wandb_mode = "online"
        tmp = self.create_tempdir().full_path
        netrc_path = os.path.join(tmp, "netrc")
        bare = {k: v for k, v in os.environ.items()
                if k not in ("WANDB_API_KEY", "WANDB_IDENTITY_TOKEN_FILE", "WANDB_BASE_URL")}
        with mock.patch.dict(os.environ, {**bare, "NETRC": netrc_path}, clear=True):
            with self.assertRaisesRegex(tracking.TrackingError, "has no W&B credentials"):
                tracking.check(config)
            with open(netrc_path, "w") as f:
                f.write("machine api.wandb.ai\n  login user\n  password k\n")
            tracking.check(config)
            os.remove(netrc_path)
            with mock.patch.dict(os.environ, {"WANDB_API_KEY": "k"}):
                tracking.check(config)
        config.tracking.wandb_mode = "disabled"
        with self.assertRaisesRegex(tracking.TrackingError, "wandb_mode must be online"):
            tracking.check(config)

    def test_a_run_wandb_cannot_start_is_one_clear_error(self):
        tmp = self.create_tempdir().full_path
        config = offline_config()
        config.tracking.wandb_mode = "online"
        with mock.patch.dict(os.environ, wandb_offline.env(tmp)), \
                mock.patch("wandb.init", side_effect=RuntimeError("api_key not configured\n"
                                                                  "more detail")):
            with self.assertRaisesRegex(tracking.TrackingError,
                                        r"W&B could not start a run \(api_key not configured\): "
                                        r"log in on this host"):
                tracking.open_trackers(config, tmp, "run")

    def test_offline_run_holds_the_metrics_and_resumes_as_one_run(self):
        tmp = self.create_tempdir().full_path
        run_dir = os.path.join(tmp, "my-run")
        config = offline_config()
        with mock.patch.dict(os.environ, wandb_offline.env(tmp)):
            writer = metrics.MetricsWriter(run_dir, config=config)
            for step, loss in ((1, 2.5), (2, 2.0), (3, 1.25)):
                writer.write({"step": step, "loss": loss, "learning_rate": 1e-4 * step,
                              "grad_norm": None})
            writer.write_eval(3, 1.5, 40)
            writer.close()
            # A resume from step 2 drops step 3 from metrics.jsonl and logs it again.
            writer = metrics.MetricsWriter(run_dir, resume_step=2, config=config)
            writer.write({"step": 3, "loss": 1.0, "learning_rate": 3e-4})
            writer.close()
        with open(os.path.join(run_dir, "metrics.jsonl")) as f:
            records = [json.loads(line) for line in f]
        self.assertEqual([r["loss"] for r in records], [2.5, 2.0, 1.0])
        files = wandb_offline.run_files(run_dir)
        self.assertLen(files, 2)  # one per process start, one W&B run id
        (first, history), (second, resumed) = map(wandb_offline.read, files)
        self.assertEqual(first["id"], second["id"])
        with open(os.path.join(run_dir, tracking.STATE)) as f:
            self.assertEqual(json.load(f)["wandb_run_id"], first["id"])
        self.assertEqual((first["name"], first["project"], first["tags"]),
                         ("my-run", "gemma4-sft", ["cpu"]))
        self.assertEqual(first["config"]["lora"], json.loads(json.dumps(config.lora.to_dict())))
        self.assertEqual(wandb_offline.series(history, "train/loss"), {1: 2.5, 2: 2.0, 3: 1.25})
        self.assertEqual(wandb_offline.series(history, "eval/loss"), {3: 1.5})
        self.assertEqual(wandb_offline.series(history, "eval/tokens"), {3: 40})
        self.assertNotIn("train/grad_norm", {k for row in history for k in row})  # None
        self.assertEqual(wandb_offline.series(resumed, "train/loss"), {3: 1.0})
        self.assertTrue(os.listdir(os.path.join(run_dir, "tensorboard")))

    def test_totals_count_every_step_and_continue_after_a_resume(self):
        run_dir = self.create_tempdir().full_path
        writer = metrics.MetricsWriter(run_dir)
        for step in range(1, 7):  # logged every 3 steps
            writer.count(0.5 * step, 100 * step, 10 * step)
            if step % 3 == 0:
                writer.write({"step": step})
        writer.close()
        # Resumed from step 3: the totals continue from step 3's record.
        writer = metrics.MetricsWriter(run_dir, resume_step=3)
        self.assertEqual(writer.totals, {"total_step_time_s": 3.0, "total_tokens": 600,
                                         "total_trained_tokens": 60})
        writer.count(2.0, 400, 40)
        writer.write({"step": 4})
        writer.close()
        with open(os.path.join(run_dir, "metrics.jsonl")) as f:
            records = [json.loads(line) for line in f]
        self.assertEqual([(r["step"], r["total_tokens"], r["total_step_time_s"])
                          for r in records], [(3, 600, 3.0), (4, 1000, 5.0)])
        # A run directory from before the totals: the sums of its records.
        with open(os.path.join(run_dir, "metrics.jsonl"), "w") as f:
            for step in (1, 2):
                f.write(json.dumps({"step": step, "step_time_s": 1.5, "tokens": 7,
                                    "trained_tokens": 3}) + "\n")
        writer = metrics.MetricsWriter(run_dir, resume_step=2)
        self.assertEqual(writer.totals, {"total_step_time_s": 3.0, "total_tokens": 14,
                                         "total_trained_tokens": 6})
        writer.close()


if __name__ == "__main__":
    absltest.main()
