"""Checks of a run directory's totals and billed segments, for both stacks' trainer tests."""

import json

from common import run_dir as run_dir_lib
from common import storage
from training.common import billing


def step_records(run_dir):
    text = storage.read_text(storage.join(run_dir, run_dir_lib.METRICS))
    return [r for r in map(json.loads, text.splitlines()) if "eval_loss" not in r]


def segments(run_dir):
    return storage.read_json(storage.join(run_dir, run_dir_lib.RUN_INFO))["segments"]


def assert_one_finished_run(test, run_dir, steps, checkpoints):
    """A run made by one process: every record's totals are the sums of the steps
    so far (every step logged), and its segment ends `finished` at `steps`, with
    `checkpoints` saved and nothing lost."""
    records = step_records(run_dir)
    for i, record in enumerate(records):
        for name in ("tokens", "trained_tokens"):
            test.assertEqual(record[f"total_{name}"], sum(r[name] for r in records[:i + 1]))
        test.assertAlmostEqual(record["total_step_time_s"],
                               sum(r["step_time_s"] for r in records[:i + 1]))
    segment = segments(run_dir)[0]  # later tests may run refused processes there
    test.assertEqual(segment["end"][1:], [steps, billing.FINISHED])
    test.assertEqual([c[1] for c in segment["checkpoints"]], checkpoints)
    test.assertEqual(segment["first_step"][1], 1)
    test.assertLess(segment["start"], segment["first_step"][0])
    bill = billing.summarize([segment])
    # The step time is inside the billed time, with start-up and the rest.
    test.assertLess(records[-1]["total_step_time_s"], bill["billed_s"])
    test.assertEqual((bill["lost_steps"], bill["lost_s"]), (0, 0.0))


def assert_killed_then_resumed(test, run_dir, checkpoint, steps, wall_s):
    """A run killed after `checkpoint` and resumed to the end: both processes'
    lives billed, the killed one to its last heartbeat, the steps it made after
    the checkpoint lost. `wall_s`: how long the test waited for the two."""
    killed, resumed = segments(run_dir)
    test.assertNotIn("end", killed)
    test.assertEqual(killed["checkpoints"][-1][1], checkpoint)
    test.assertEqual((resumed["resumed_from"], resumed["end"][1:]),
                     (checkpoint, [steps, billing.FINISHED]))
    bill = billing.summarize([killed, resumed])
    test.assertEqual(bill["lost_steps"], killed["heartbeat"][1] - checkpoint)
    print(f"billed {bill['billed_s']:.1f} s of {wall_s:.1f} s wall "
          f"({bill['billed_s'] / wall_s:.3f}); lost {bill['lost_steps']} steps")
    # Each process's life lies inside what the test waited for; the killed one
    # ends at most a heartbeat and the wait for its checkpoint before its kill,
    # the other with the interpreter's exit.
    test.assertLessEqual(bill["billed_s"], wall_s + 0.1)
    test.assertGreater(bill["billed_s"], wall_s - 15)


def assert_preempted_logging_every(test, run_dir, reference_dir, stop, every):
    """A run logging every `every` steps, stopped by SIGTERM after step `stop`:
    the steps logged are those and the checkpoint's, whose totals count every
    step (the reference logged every step); its segment ends `preempted`."""
    logged = step_records(run_dir)
    test.assertEqual([r["step"] for r in logged],
                     sorted(set(range(every, stop + 1, every)) | {stop}))
    reference = step_records(reference_dir)[:stop]
    for name in ("tokens", "trained_tokens"):
        test.assertEqual(logged[-1][f"total_{name}"], sum(r[name] for r in reference))
    [segment] = segments(run_dir)
    test.assertEqual(segment["end"][1:], [stop, billing.PREEMPTED])
