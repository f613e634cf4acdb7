"""Billed time: the segments' arithmetic by hand, and run.json as a process keeps it."""

import json
import os
import time

from absl.testing import absltest

from training.common import billing

IMPORTED = time.time()


def _killed_then_finished(resumed_from=8):
    killed = {"start": 100.0, "resumed_from": 0, "first_step": [130.0, 1],
              "checkpoints": [[150.0, 4, 2.0], [170.0, 8, 3.0]],
              "evaluations": [[160.0, 4, 5.0]], "heartbeat": [181.0, 10]}
    finished = {"start": 200.0, "resumed_from": resumed_from, "first_step": [220.0, 9],
                "checkpoints": [[240.0, 12, 1.0]], "evaluations": [],
                "heartbeat": [244.0, 12], "end": [245.0, 12, billing.FINISHED]}
    return [killed, finished]


class SummarizeTest(absltest.TestCase):

    def test_a_killed_segment_and_its_resume(self):
        got = billing.summarize(_killed_then_finished())
        self.assertEqual(got, {
            "billed_s": 81.0 + 45.0,  # heartbeat - start, end - start
            "startup_s": 30.0 + 20.0,  # to the end of each first step
            "checkpoint_s": 6.0, "evaluation_s": 5.0,
            "lost_steps": 2,  # steps 9 and 10, after checkpoint 8
            "lost_s": 11.0,  # from checkpoint 8's end to the last heartbeat
            "segments": 2, "ended": [None, billing.FINISHED]})

    def test_the_next_segment_says_which_checkpoint_held(self):
        # Killed while checkpoint 8 was being committed: the rerun began at 4.
        got = billing.summarize(_killed_then_finished(resumed_from=4))
        self.assertEqual((got["lost_steps"], got["lost_s"]), (6, 31.0))

    def test_a_segment_without_a_checkpoint_is_lost_whole(self):
        segment = {"start": 10.0, "resumed_from": 4, "first_step": [40.0, 5],
                   "checkpoints": [], "heartbeat": [70.0, 7]}
        got = billing.summarize([segment])
        self.assertEqual((got["billed_s"], got["lost_s"], got["lost_steps"]), (60.0, 60.0, 3))

    def test_preempted_and_failed(self):
        preempted = {"start": 0.0, "first_step": [5.0, 1], "checkpoints": [[9.0, 3, 1.0]],
                     "end": [10.0, 3, billing.PREEMPTED]}
        failed = {"start": 20.0, "resumed_from": 3, "checkpoints": [],
                  "end": [25.0, 3, billing.FAILED]}  # failed while loading: no first step
        got = billing.summarize([preempted, failed])
        self.assertEqual(got["billed_s"], 15.0)
        self.assertEqual(got["startup_s"], 5.0 + 5.0)  # no first step: all start-up
        self.assertEqual((got["lost_steps"], got["lost_s"]), (0, 5.0))
        self.assertEqual(got["ended"], [billing.PREEMPTED, billing.FAILED])


class RunRecordTest(absltest.TestCase):

    def _read(self, path):
        with open(path) as f:
            return json.load(f)

    def test_process_start_is_the_kernels(self):
        started = billing.process_start()
        # Before this module was imported (the kernel's clock ticks 1/100 s), and
        # not long before.
        self.assertLessEqual(started, IMPORTED + 0.02)
        self.assertGreater(started, IMPORTED - 600)

    def test_a_process_segment_from_start_to_end(self):
        path = os.path.join(self.create_tempdir().full_path, "run.json")
        with open(path, "w") as f:
            json.dump({"stack": "tpu", "total_steps": 3,
                       "segments": [{"start": 1.0, "heartbeat": [2.0, 1]}]}, f)
        with billing.RunRecord(path, heartbeat_s=0.05, describe={"machine": "cpu"}) as record:
            on_disk = self._read(path)
            self.assertEqual(on_disk["stack"], "tpu")  # what the run used is kept
            self.assertEqual(on_disk["machine"], "cpu")
            self.assertLen(on_disk["segments"], 2)  # the killed one, then this one
            record.resumed(1)
            record.stepped(2)
            record.stepped(3)  # only the first step is an event
            first_beat = self._read(path)["segments"][-1]["heartbeat"]
            time.sleep(0.3)
            beat = self._read(path)["segments"][-1]["heartbeat"]
            self.assertGreater(beat[0], first_beat[0])  # the thread beats on its own
            self.assertEqual(beat[1], 3)
            record.checkpoint(3, 0.5)
            record.evaluation(3, 0.25)
            record.describe({"total_steps": 3, "devices": 1})
            record.outcome = billing.PREEMPTED
        segment = self._read(path)["segments"][-1]
        self.assertEqual(segment["pid"], os.getpid())
        self.assertEqual(segment["resumed_from"], 1)
        self.assertEqual(segment["first_step"][1], 2)
        self.assertEqual([c[1:] for c in segment["checkpoints"]], [[3, 0.5]])
        self.assertEqual([e[1:] for e in segment["evaluations"]], [[3, 0.25]])
        self.assertEqual(segment["end"][1:], [3, billing.PREEMPTED])
        self.assertLessEqual(segment["start"], segment["first_step"][0])
        self.assertLessEqual(segment["first_step"][0], segment["end"][0])
        self.assertEqual(self._read(path)["devices"], 1)
        # Ended: the heartbeat thread is gone, nothing more is written.
        written = os.path.getmtime(path)
        time.sleep(0.2)
        self.assertEqual(os.path.getmtime(path), written)

    def test_an_exception_ends_the_segment_as_failed(self):
        path = os.path.join(self.create_tempdir().full_path, "run.json")
        with self.assertRaises(ValueError):
            with billing.RunRecord(path, heartbeat_s=10):
                raise ValueError("boom")
        self.assertEqual(self._read(path)["segments"][0]["end"][2], billing.FAILED)

    def test_the_other_processes_record_nothing(self):
        path = os.path.join(self.create_tempdir().full_path, "run.json")
        with billing.RunRecord(path, enabled=False) as record:
            record.stepped(1)
            record.checkpoint(1, 0.1)
        self.assertFalse(os.path.exists(path))


if __name__ == "__main__":
    absltest.main()
