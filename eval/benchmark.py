"""Judging throughput: the sandboxed parallel judge against a bare serial loop.

    bazel run //eval:benchmark -- --repeat=5

Judges every reference solution of the data set `--repeat` times (156 x 5 =
780 samples by default) in two ways, measured in the same run:
- bare: a serial loop of upstream's commands (`iverilog -Wall -Winfloop
  -Wno-timescale -g2012 -s tb -o ... sample.sv test.sv ref.sv`, then `vvp`
  with a 30 s limit), one temporary directory per sample, no sandbox;
- harness: the judge as `verilog_eval` runs it (bubblewrap sandbox, limits,
  one worker per core, slowest problems first), deduplication off so that
  every sample is judged.
By default all bare runs come first, then the harness on all samples;
`--rounds=N` alternates the two N times on shares of the repeats, so that
other work on a shared machine weighs on both alike (at the price of N
barriers in the harness). Each round reports how many cores other
processes (and the hypervisor) kept busy during each part: a busy neighbour
takes a core from the parallel judge, and the ratio then means little. Prints both wall times,
their ratio (the goal on 2 cores: >= 1.7x), the one-off reference check that
the harness runs before judging, and checks that both reach the same
verdicts. Settings come from the eval config (`--config`, default
configs/cpu.py; e.g. `--config.workers=4`).
"""

import json
import os
import shutil
import subprocess
import tempfile
import time

from absl import app
from absl import flags

from common import cli
from common import config_cli
from eval import completions
from eval import judge as judge_lib
from eval import problems as problems_lib
from eval import scoring

_CONFIG = config_cli.define_config_flag(__file__)
_REPEAT = flags.DEFINE_integer("repeat", 5, "Times each reference is judged.")
_ROUNDS = flags.DEFINE_integer(
    "rounds", 1, "Alternate bare and harness this many times, each on an equal share of "
    "the repeats (1: all bare, then all harness); more rounds even out a busy neighbour.")
_LIMIT = flags.DEFINE_integer("limit", 0, "Use the first N problems only (0: all).")
_OUTPUT_JSON = flags.DEFINE_string("output_json", None, "Also write the figures here.")
GOAL = 1.7


def _processes():
    """{pid: (parent pid, CPU seconds)} of every process now."""
    ticks = os.sysconf("SC_CLK_TCK")
    found = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        found[int(name)] = (int(fields[1]), (int(fields[11]) + int(fields[12])) / ticks)
    return found


def _steal_s():
    """CPU seconds the hypervisor has taken from this machine (all cores)."""
    with open("/proc/stat") as f:
        fields = f.readline().split()
    return int(fields[8]) / os.sysconf("SC_CLK_TCK") if len(fields) > 8 else 0.0


class OtherLoad:
    """CPU seconds used, over a stretch of time, by others than us.

    Counts processes alive at both ends that do not descend from this one
    (short-lived ones are missed) and the time the hypervisor stole; a busy
    neighbour on a shared machine shows.
    """

    def __init__(self):
        self._start, self._steal, self._t0 = _processes(), _steal_s(), time.monotonic()

    def cores(self):
        """Average number of cores others kept busy since construction."""
        end = _processes()
        me = os.getpid()

        def ours(pid):
            for _ in range(64):
                if pid == me:
                    return True
                if pid not in end or pid <= 1:
                    return False
                pid = end[pid][0]
            return False

        used = sum(end[pid][1] - self._start[pid][1] for pid in end
                   if pid in self._start and not ours(pid))
        used += _steal_s() - self._steal
        return used / max(time.monotonic() - self._t0, 1e-9)


def bare_serial(problems, iverilog, vvp, sim_timeout_s):
    """[upstream pass] of a plain serial loop of upstream's commands."""
    verdicts = []
    for problem in problems:
        work = tempfile.mkdtemp(prefix="bare_")
        try:
            sample = os.path.join(work, "sample.sv")
            with open(sample, "w") as f:
                f.write(problem.reference_as_sample())
            sim = os.path.join(work, "test.vvp")
            compiled = subprocess.run(
                [iverilog, *judge_lib.COMPILE_FLAGS, "-o", sim, sample, problem.test_path,
                 problem.ref_path], cwd=work, capture_output=True, text=True, check=False)
            log = compiled.stdout + compiled.stderr
            try:
                ran = subprocess.run([vvp, "-n", sim], cwd=work, capture_output=True,
                                     text=True, timeout=sim_timeout_s, check=False)
                log += ran.stdout + ran.stderr
            except subprocess.TimeoutExpired:
                log += "TIMEOUT\n"
            verdicts.append(judge_lib.analyze_log(log).upstream_class == ".")
        finally:
            shutil.rmtree(work, ignore_errors=True)
    return verdicts


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    config = _CONFIG.value
    dataset_dir = config_cli.user_path(config.dataset_dir) or problems_lib.default_dataset_dir()
    problems = problems_lib.load(dataset_dir, limit=_LIMIT.value)
    by_id = {p.id: p for p in problems}
    judge = judge_lib.from_config(config)
    workers = config.workers or scoring.default_workers()
    repeat = _REPEAT.value
    print(f"{len(problems)} problems x {repeat} = {len(problems) * repeat} samples; "
          f"{workers} workers on {os.cpu_count()} cores, sandbox {config.sandbox}; "
          f"{judge_lib.iverilog_version(judge.iverilog)}")

    start = time.monotonic()
    references = scoring.check_references(judge, problems, workers)
    reference_s = time.monotonic() - start
    expected = scoring.expected_tb_samples(references)
    costs = scoring.reference_seconds(references)

    rounds = max(1, min(_ROUNDS.value, repeat))
    shares = [repeat // rounds + (i < repeat % rounds) for i in range(rounds)]
    bare, harness, upstream, timings, done = [], [], [], [], 0
    for round_index, share in enumerate(shares):
        load, start = OtherLoad(), time.monotonic()
        for _ in range(share):
            bare += bare_serial(problems, judge.iverilog, judge.vvp, config.sim_timeout_s)
        round_bare_s = time.monotonic() - start
        bare_load = load.cores()

        rows = [completions.Completion(p.id, done + r, "[BEGIN]\n" + p.reference_as_sample() +
                                       "[DONE]\n") for r in range(share) for p in problems]
        done += share
        load, start = OtherLoad(), time.monotonic()
        results = scoring.judge_completions(judge, by_id, rows, workers, expected,
                                            dedup=False, costs=costs)
        round_harness_s = time.monotonic() - start
        harness_load = load.cores()
        harness += [r.verdict.passed for r in results]
        upstream += [r.verdict.upstream_pass for r in results]
        timings.append({"samples": len(rows), "bare_s": round_bare_s,
                        "harness_s": round_harness_s, "ratio": round_bare_s / round_harness_s,
                        "other_load_bare": bare_load, "other_load_harness": harness_load})
        print(f"round {round_index + 1}/{rounds} ({len(rows)} samples): "
              f"bare {round_bare_s:5.1f} s, harness {round_harness_s:5.1f} s, "
              f"{timings[-1]['ratio']:.2f}x; cores busy with other work: {bare_load:.2f} "
              f"during bare, {harness_load:.2f} during harness", flush=True)

    bare_s = sum(r["bare_s"] for r in timings)
    harness_s = sum(r["harness_s"] for r in timings)
    ratio = bare_s / harness_s
    quiet = [r["ratio"] for r in timings
             if max(r["other_load_bare"], r["other_load_harness"]) < 0.1]
    print(f"bare serial loop     {bare_s:8.1f} s")
    print(f"harness, sandboxed   {harness_s:8.1f} s")
    print(f"ratio                {ratio:8.2f}x  (goal >= {GOAL}x: "
          f"{'met' if ratio >= GOAL else 'NOT met'}); rounds without other work: "
          f"{', '.join(f'{q:.2f}x' for q in quiet) or 'none'}")
    print(f"reference check      {reference_s:8.1f} s  (once per run, before judging; "
          f"counting it: {bare_s / (harness_s + reference_s):.2f}x)")
    agree = upstream == bare
    print(f"passed: bare {sum(bare)}, harness {sum(harness)} (upstream rule {sum(upstream)}); "
          f"verdicts {'agree' if agree else 'DIFFER'}")
    figures = {"samples": len(bare), "workers": workers, "bare_serial_s": bare_s,
               "harness_s": harness_s, "ratio": ratio, "reference_check_s": reference_s,
               "rounds": timings, "bare_passed": sum(bare), "harness_passed": sum(harness),
               "agree": agree}
    if _OUTPUT_JSON.value:
        with open(config_cli.user_path(_OUTPUT_JSON.value), "w") as f:
            json.dump(figures, f, indent=2)
    if not agree:
        raise SystemExit("the harness and the bare loop disagree")


if __name__ == "__main__":
    cli.run(main)
