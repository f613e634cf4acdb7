"""The time a run is billed for: one segment per process, kept in run.json.

A VM is billed from boot to deletion. What a run sees of that is the life of
each of its processes: a first one, and one more for each resume after a
preemption or a crash. Its main process keeps a segment of its own in
run.json's `segments` (both stacks alike):

    {"host": ..., "pid": ...,
     "start": T,                    the process's start (the kernel's clock:
                                    imports, download, loading all count)
     "resumed_from": STEP,          the checkpoint it began from (0: none)
     "first_step": [T, STEP],       the end of its first step (start-up and
                                    the compile end here)
     "checkpoints": [[T, STEP, S], ...]   each save: when it ended, seconds
     "evaluations": [[T, STEP, S], ...]   each validation pass, the same
     "heartbeat": [T, STEP],        refreshed every `heartbeat_s` by a thread,
                                    whatever the process is doing
     "end": [T, STEP, HOW]}         finished | preempted | failed

A process killed outright (SIGKILL, a lost VM) writes no `end`: its last
heartbeat is its end, and the steps it made after its last checkpoint are
lost work, done again by the next segment. `summarize` turns the segments into
the figures the report prints and the plan is checked against: billed seconds
(the sum of the segments), start-up (start to the end of the first step, per
segment), checkpoint and evaluation seconds, and lost work.
"""

import os
import socket
import threading
import time

from common import storage

FINISHED, PREEMPTED, FAILED = "finished", "preempted", "failed"
# Heartbeats: a local run directory is cheap to write; a bucket costs a request.
LOCAL_HEARTBEAT_S = 2.0
BUCKET_HEARTBEAT_S = 60.0


def process_start():
    """When this process started, in time.time()'s clock: the kernel's record
    (/proc), so that the interpreter's start and the imports count too; now
    where there is no /proc."""
    try:
        with open("/proc/self/stat") as f:
            ticks = int(f.read().rsplit(")", 1)[1].split()[19])  # field 22: starttime
        with open("/proc/stat") as f:
            boot = next(int(line.split()[1]) for line in f if line.startswith("btime "))
        return boot + ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration):
        return time.time()


class RunRecord:
    """run.json, written whole by the run's main process: what the run used
    (`describe`) and every segment, this process's last.

    `enabled=False` (the other processes of a run) records nothing. The
    heartbeat thread starts with the record and stops at `end`.
    """

    def __init__(self, path, *, enabled=True, heartbeat_s=None, describe=None):
        self._path, self._enabled = path, enabled
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self.step = 0
        if not enabled:
            return
        previous = storage.read_json(path) if storage.exists(path) else {}
        self._segments = list(previous.get("segments", []))
        self._info = {k: v for k, v in previous.items() if k != "segments"}
        self._info.update(describe or {})
        self.segment = {"host": socket.gethostname(), "pid": os.getpid(),
                        "start": process_start(), "resumed_from": 0,
                        "checkpoints": [], "evaluations": []}
        self._segments.append(self.segment)
        self._update()  # this process's segment, from its start
        interval = heartbeat_s or (BUCKET_HEARTBEAT_S if storage.is_url(path)
                                   else LOCAL_HEARTBEAT_S)
        self._thread = threading.Thread(target=self._beat_every, args=(interval,),
                                        name="run-heartbeat", daemon=True)
        self._thread.start()

    def _write(self):
        storage.write_json(self._path, {**self._info, "segments": self._segments})

    def _beat_every(self, interval):
        while not self._stop.wait(interval):
            try:
                self._update()  # the heartbeat alone
            except Exception:  # pylint: disable=broad-except
                pass  # a failed heartbeat is retried; the run must not stop for it

    def _update(self, change=None):
        """Applies `change` to this segment, refreshes its heartbeat, writes run.json."""
        if not self._enabled:
            return
        with self._lock:
            if change:
                change(self.segment)
            self.segment["heartbeat"] = [time.time(), self.step]
            self._write()

    def describe(self, info):
        """What the run used (lifecycle.write_run_info's keys)."""
        if self._enabled:
            with self._lock:
                self._info.update(info)
                self._write()

    def resumed(self, step):
        self.step = step
        self._update(lambda s: s.update(resumed_from=step))

    def stepped(self, step):
        """After every step (cheap: the heartbeat writes it); the first is recorded."""
        self.step = step
        if self._enabled and "first_step" not in self.segment:
            self._update(lambda s: s.update(first_step=[time.time(), step]))

    def checkpoint(self, step, seconds):
        self._update(lambda s: s["checkpoints"].append([time.time(), step, seconds]))

    def evaluation(self, step, seconds):
        self._update(lambda s: s["evaluations"].append([time.time(), step, seconds]))

    # As a context: the segment ends when the block does, `outcome` (set by the
    # trainer: FINISHED or PREEMPTED) or FAILED on an exception.
    outcome = FINISHED

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, traceback):
        self.end(FAILED if exc_type else self.outcome)
        return False

    def end(self, how):
        """The end of this process's segment (FINISHED, PREEMPTED or FAILED)."""
        if not self._enabled or self._stop.is_set():
            return
        self._stop.set()
        self._thread.join()
        self._update(lambda s: s.update(end=[time.time(), self.step, how]))


def _segment(segment, next_segment):
    """The figures of one segment (seconds), and its lost steps."""
    start = segment["start"]
    end = segment.get("end") or segment.get("heartbeat") or [start, 0]
    out = {"billed_s": max(end[0] - start, 0.0),
           "startup_s": (segment["first_step"][0] - start if "first_step" in segment
                         else max(end[0] - start, 0.0)),
           "checkpoint_s": sum(c[2] for c in segment.get("checkpoints", [])),
           "evaluation_s": sum(e[2] for e in segment.get("evaluations", [])),
           "lost_s": 0.0, "lost_steps": 0, "ended": (segment.get("end") or [0, 0, None])[2]}
    if out["ended"] in (FINISHED, PREEMPTED):
        return out
    # Killed or failed: what it did after its last checkpoint is done again.
    saved = segment.get("checkpoints") or []
    kept = saved[-1] if saved else None
    if next_segment is not None:  # the next process says where it really resumed
        resumed = next_segment.get("resumed_from", 0)
        kept = next((c for c in reversed(saved) if c[1] <= resumed), None)
    kept_step = kept[1] if kept else segment.get("resumed_from", 0)
    out["lost_steps"] = max(end[1] - kept_step, 0)
    # Without a checkpoint of its own, the whole segment was for nothing.
    out["lost_s"] = max(end[0] - kept[0], 0.0) if kept else out["billed_s"]
    return out


def summarize(segments):
    """Billed time of a run from its segments: seconds summed over segments,
    lost work, and how each segment ended (None: killed, or still running)."""
    parts = [_segment(s, segments[i + 1] if i + 1 < len(segments) else None)
             for i, s in enumerate(segments)]
    total = {key: sum(p[key] for p in parts)
             for key in ("billed_s", "startup_s", "checkpoint_s", "evaluation_s", "lost_s",
                         "lost_steps")}
    total["segments"] = len(parts)
    total["ended"] = [p["ended"] for p in parts]
    return total
