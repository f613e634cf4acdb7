"""Scores completions: extract, judge in parallel, write per-sample results and a summary.

One path for every source of completions (a fresh sampling run or a JSONL
file). First each problem's reference is judged as a sample: that gives the
problems whose reference fails on the installed iverilog (reported apart)
and the testbench's sample count, against which samples are checked. Then
every distinct (problem, extracted code) is judged once (the judge is
deterministic; identical samples share the verdict unless `dedup` is off),
on `workers` threads, each running its sandboxed processes.

Outputs in the run directory:
- `results.jsonl`: per sample `problem`, `sample`, `code_sha256`,
  `extraction`, `passed`, `reason`, `mismatches`, `tb_samples`,
  `upstream_pass`, `upstream_class`, `detail`, `seconds`, `second_tb_samples`;
- `summary.json`: `pass_at_k` ({"1": ..., "5": ...}, k = 1, n and the k asked
  up to n), `problems` ({id: {"n", "passed"}}), `reference_failures` (ids),
  their reasons, pass@k without those problems and by upstream's rule alone,
  counts of verdict reasons (`reasons`), of what made samples not RTL
  (`not_rtl`, e.g. {"$finish": 3}) and of extraction methods, the iverilog
  version.
"""

import collections
import concurrent.futures
import dataclasses
import hashlib
import json
import os
import time

from absl import logging

from eval import judge as judge_lib
from eval import pass_at_k
from eval import protocols

RESULTS_FILE = "results.jsonl"
SUMMARY_FILE = "summary.json"


@dataclasses.dataclass(frozen=True)
class Result:
    problem: str
    sample: int
    code_sha256: str
    extraction: str
    verdict: judge_lib.Verdict

    def to_json(self):
        row = {"problem": self.problem, "sample": self.sample,
               "code_sha256": self.code_sha256, "extraction": self.extraction}
        row.update(self.verdict.to_json())
        return row


def default_workers():
    return os.cpu_count() or 1


def _parallel(function, items, workers, what):
    """[function(item)] for `items`, on `workers` threads, logging progress.

    The first exception cancels the jobs not yet started and is raised.
    """
    results = [None] * len(items)
    start, done = time.monotonic(), 0
    step = max(1, len(items) // 10)
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=max(1, workers))
    try:
        futures = {pool.submit(function, item): i for i, item in enumerate(items)}
        for future in concurrent.futures.as_completed(futures):
            results[futures[future]] = future.result()
            done += 1
            if done % step == 0 or done == len(items):
                logging.info("%s: %d/%d judged (%.1f s)", what, done, len(items),
                             time.monotonic() - start)
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    return results


def check_references(judge, problems, workers):
    """{problem id: Verdict} of each problem's reference submitted as a sample."""
    verdicts = _parallel(judge.judge_reference, list(problems), workers, "references")
    return {p.id: v for p, v in zip(problems, verdicts)}


def expected_tb_samples(references):
    """{problem id: (testbench sample count, the same under the second stimulus or
    None)} for problems whose reference passes."""
    return {pid: (v.tb_samples, v.second_tb_samples) for pid, v in references.items()
            if v.passed}


def reference_seconds(references):
    """{problem id: seconds its reference took}: the cost estimate for scheduling."""
    return {pid: v.seconds for pid, v in references.items()}


def judge_completions(judge, problems_by_id, rows, workers, expected=None, dedup=True,
                      costs=None, protocol=protocols.UPSTREAM):
    """[Result] for completion `rows`, in their order; code read by `protocol`'s rule.

    `expected`: {problem id: testbench sample count} (see judge.verdict_from).
    `costs`: {problem id: estimated seconds}; the costliest problems are judged
    first, so that a slow simulation does not start last and run alone.
    """
    expected = expected or {}
    costs = costs or {}
    unknown = sorted({r.problem for r in rows} - set(problems_by_id))
    if unknown:
        raise ValueError(f"completions for problems not in the data set: {unknown[:10]}")
    read_code = protocols.extractor(protocol)
    extracted = [read_code(r.completion) for r in rows]
    keys = [(r.problem, hashlib.sha256(e.code.encode("utf-8", "surrogatepass")).hexdigest())
            for r, e in zip(rows, extracted)]  # surrogatepass: a lone surrogate is refused later
    codes = {}
    for key, e in zip(keys, extracted):
        codes.setdefault(key, e.code)
    jobs = list(dict.fromkeys(keys)) if dedup else keys
    order = sorted(range(len(jobs)), key=lambda i: -costs.get(jobs[i][0], 0.0))  # stable

    def run(i):
        problem = problems_by_id[jobs[i][0]]
        return judge.judge(problem, codes[jobs[i]], expected.get(problem.id))

    verdict_of = dict(zip(order, _parallel(run, order, workers, "samples")))
    if dedup:
        position = {key: i for i, key in enumerate(jobs)}
        verdicts = [verdict_of[position[key]] for key in keys]
    else:
        verdicts = [verdict_of[i] for i in range(len(keys))]
    return [Result(r.problem, r.sample, k[1], e.method, v)
            for r, e, k, v in zip(rows, extracted, keys, verdicts)]


def summarize(results, references, asked_ks=(), extra=None, bootstrap_seed=0):
    """The summary.json dict for `results` and reference `references`."""
    per_problem = collections.defaultdict(lambda: [0, 0, 0])  # n, passed, upstream passed
    for r in results:
        counts = per_problem[r.problem]
        counts[0] += 1
        counts[1] += r.verdict.passed
        counts[2] += r.verdict.upstream_pass
    failures = sorted(pid for pid, v in references.items() if not v.passed)
    n_min = min((c[0] for c in per_problem.values()), default=0)
    ks = pass_at_k.ks_for(n_min, asked_ks) if n_min else []
    skipped = sorted(k for k in asked_ks if k > n_min)
    if skipped:
        logging.warning("pass@k for k=%s skipped: some problem has only %d samples",
                        skipped, n_min)
    strict = {pid: (c[0], c[1]) for pid, c in per_problem.items()}
    summary = {
        "pass_at_k": pass_at_k.mean_pass_at_k(strict, ks),
        "pass_at_k_interval_95": {k: pass_at_k.bootstrap_interval(strict, int(k),
                                                                  seed=bootstrap_seed)
                                  for k in map(str, ks)},
        "bootstrap_seed": bootstrap_seed,
        "problems": {pid: {"n": c[0], "passed": c[1], "pass_at_1": c[1] / c[0]}
                     for pid, c in sorted(per_problem.items())},
        "reference_failures": failures,
        "reference_failure_reasons": {pid: references[pid].reason for pid in failures},
        "pass_at_k_without_reference_failures": pass_at_k.mean_pass_at_k(
            {pid: nc for pid, nc in strict.items() if pid not in failures}, ks),
        "pass_at_k_upstream_rule": pass_at_k.mean_pass_at_k(
            {pid: (c[0], c[2]) for pid, c in per_problem.items()}, ks),
        "num_problems": len(per_problem),
        "num_samples": len(results),
        "reasons": dict(collections.Counter(r.verdict.reason for r in results).most_common()),
        "not_rtl": dict(collections.Counter(
            r.verdict.detail.split(" (line")[0] for r in results
            if r.verdict.reason == judge_lib.NOT_RTL).most_common()),
        "extraction": dict(collections.Counter(r.extraction for r in results).most_common()),
    }
    summary.update(extra or {})
    return summary


def problem_differences(summary_a, summary_b):
    """Which problems one run solves (any sample passes) and the other does not.

    Over the problems both summaries scored: {"only_a": [...], "only_b": [...]}.
    """
    a, b = summary_a["problems"], summary_b["problems"]
    common = sorted(set(a) & set(b))
    solved_a = {pid for pid in common if a[pid]["passed"]}
    solved_b = {pid for pid in common if b[pid]["passed"]}
    return {"only_a": sorted(solved_a - solved_b), "only_b": sorted(solved_b - solved_a)}


def _write_json_atomic(path, obj):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=2)
        f.write("\n")
    os.replace(tmp, path)


def write(out_dir, results, summary):
    """Writes results.jsonl and summary.json into `out_dir`."""
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, RESULTS_FILE)
    with open(path + ".tmp", "w") as f:
        for r in results:
            f.write(json.dumps(r.to_json()) + "\n")
    os.replace(path + ".tmp", path)
    _write_json_atomic(os.path.join(out_dir, SUMMARY_FILE), summary)
