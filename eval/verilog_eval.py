"""VerilogEval v2 spec-to-rtl: sample through an OpenAI-compatible server, judge
with iverilog in a sandbox, report unbiased pass@k.

    bazel run //eval:verilog_eval -- --base_url=http://127.0.0.1:8000/v1 \\
        --n=5 --temperature=0.8 --top_p=0.95 --max_tokens=1024 --out_dir=out/eval
    bazel run //eval:verilog_eval -- --samples=completions.jsonl --out_dir=out/scored

Settings: every field of the config file (`--config`, default configs/cpu.py)
can be set as `--config.FIELD=value`. The run's everyday fields also have a
flag of their own, which sets that config field (its default is the
config's): --dataset_dir --problems --shots --base_url --model --n
--temperature --top_p --max_tokens --samples --out_dir --workers. Giving
both forms for one field is an error. The resolved config is written to
`<out_dir>/config.json`.

Without --samples the binary samples into `<out_dir>/samples.jsonl`, and a
rerun with the same --out_dir resumes: only missing samples are requested
(the sampling settings must match the saved config.json; n may grow). With
--samples=FILE (JSONL lines with `problem` and `completion`) no server is
needed. Both then score the same way (see scoring.py): `results.jsonl` and
`summary.json` in --out_dir.
"""

import os
import sys

from absl import app
from absl import flags
from absl import logging

from common import cli
from common import config_cli
from common import storage
from eval import completions
from eval import judge as judge_lib
from eval import problems as problems_lib
from eval import prompts
from eval import protocols
from eval import sampling
from eval import scoring

_CONFIG = config_cli.define_config_flag(__file__)

_ALIASES = {
    "dataset_dir": flags.DEFINE_string(
        "dataset_dir", None, "dataset_spec-to-rtl folder (config: dataset_dir; default "
        "<repo root>/../shared/verilog-eval/dataset_spec-to-rtl)."),
    "problems": flags.DEFINE_string("problems", None, "Problem ids, comma-separated "
                                    "(config: problems; default all)."),
    "shots": flags.DEFINE_integer("shots", None, "In-context examples 0..4 (config: shots)."),
    "protocol": flags.DEFINE_enum("protocol", None, ["upstream", "reference"],
                                  "Prompt and extraction protocol (config: protocol; "
                                  "eval/protocols.py)."),
    "base_url": flags.DEFINE_string("base_url", None, "OpenAI-compatible API base URL, e.g. "
                                    "http://127.0.0.1:8000/v1 (config: base_url)."),
    "model": flags.DEFINE_string("model", None, "Served model name (config: model; default "
                                 "the server's first)."),
    "n": flags.DEFINE_integer("n", None, "Samples per problem (config: n)."),
    "temperature": flags.DEFINE_float("temperature", None, "Sampling temperature "
                                      "(config: temperature)."),
    "top_p": flags.DEFINE_float("top_p", None, "Nucleus sampling top_p (config: top_p)."),
    "max_tokens": flags.DEFINE_integer("max_tokens", None, "New tokens per sample "
                                       "(config: max_tokens)."),
    "samples": flags.DEFINE_string("samples", None, "Score this completions JSONL instead "
                                   "of sampling (config: samples)."),
    "out_dir": flags.DEFINE_string("out_dir", None, "Run directory (config: out_dir)."),
    "workers": flags.DEFINE_integer("workers", None, "Parallel judges, 0 = one per core "
                                    "(config: workers)."),
}

SAMPLES_FILE = "samples.jsonl"
# Settings that shape the samples: a resumed run must not change them.
SAMPLING_FIELDS = ("model", "protocol", "shots", "temperature", "top_p", "max_tokens", "seed",
                   "keep_special_tokens", "enable_thinking")


def apply_aliases(config, argv):
    """Copies each alias flag that was given into its config field."""
    for name, holder in _ALIASES.items():
        if not flags.FLAGS[name].present:
            continue
        if any(arg.lstrip("-").startswith(f"config.{name}=") or
               arg.lstrip("-") == f"config.{name}" for arg in argv):
            raise app.UsageError(f"--{name} and --config.{name} both given; use one")
        setattr(config, name, holder.value)


def _ks(text):
    try:
        return [int(k) for k in problems_lib.parse_id_list(text)]
    except ValueError as e:
        raise app.UsageError(f"--config.k must be integers separated by commas: {text!r}") from e


def check_resume(out_dir, config):
    """Fails when out_dir holds samples drawn with other sampling settings."""
    if not os.path.exists(os.path.join(out_dir, SAMPLES_FILE)):
        return
    try:
        saved = config_cli.read_resolved_config(out_dir)
    except FileNotFoundError:
        return
    changed = [f"{field}: saved {saved.get(field)!r}, now {config.get(field)!r}"
               for field in SAMPLING_FIELDS if saved.get(field) != config.get(field)]
    if changed:
        raise app.UsageError(
            f"{out_dir} holds samples drawn with other settings ({'; '.join(changed)}); "
            f"use another --out_dir or the same settings")


def _sample(config, selected, out_dir):
    icl_dir = config_cli.user_path(config.icl_dir) or prompts.icl_dir_for(config.dataset_dir)
    prefix = prompts.shots_prefix(config.shots, icl_dir)
    # Stripped, as the server's side strips it (serving/server_config.py).
    api_key = ((os.environ.get(config.api_key_env) if config.api_key_env else None)
               or os.environ.get("OPENAI_API_KEY", "")).strip()
    client = sampling.make_client(config.base_url, api_key, config.request_timeout_s,
                                  config.max_retries)
    config.model = sampling.resolve_model(client, config.model)
    check_resume(out_dir, config)
    config_cli.write_resolved_config(config, out_dir)
    settings = sampling.Settings(
        model=config.model, n=config.n, temperature=config.temperature, top_p=config.top_p,
        max_tokens=config.max_tokens, seed=config.seed,
        keep_special_tokens=config.keep_special_tokens, enable_thinking=config.enable_thinking)
    conversations = [(p.id, protocols.messages(config.protocol, p.prompt(), prefix))
                     for p in selected]
    path = os.path.join(out_dir, SAMPLES_FILE)
    report = sampling.sample(client, settings, conversations, path, config.concurrency)
    if report.failed:
        raise SystemExit(
            f"sampling failed for {len(report.failed)} problems "
            f"({', '.join(sorted(report.failed)[:5])}...): see the log; rerun the same "
            f"command to resume (saved samples are kept)")
    logging.info("sampled %d problems in %.1f s", len(report.requested), report.seconds)
    # The first n samples of each selected problem (a file may hold more, from a
    # run with a larger n).
    wanted = {p.id for p in selected}
    rows = sorted((r for r in completions.read(path) if r.problem in wanted),
                  key=lambda r: (r.problem, r.sample))
    kept, seen = [], {}
    for r in rows:
        seen[r.problem] = seen.get(r.problem, 0) + 1
        if seen[r.problem] <= config.n:
            kept.append(r)
    return kept


def run(config):
    """Samples (unless config.samples) and scores; returns the summary dict."""
    if not config.out_dir:
        raise app.UsageError("--out_dir is required")
    if config.n < 1:
        raise app.UsageError("--n must be at least 1")
    protocols.check(config.protocol, config.shots)
    where = config_cli.user_path(config.out_dir)
    config.out_dir = where
    storage.probe(where)
    # A gs:// --out_dir is worked on in a local mirror: pulled first (a rerun
    # resumes from the samples there), pushed at the end, also after a failure.
    mirror = storage.Mirror(where, clear=True)
    mirror.pull()
    try:
        return _run(config, mirror.local, where)
    finally:
        mirror.push()


def _run(config, out_dir, where):
    config.dataset_dir = (config_cli.user_path(config.dataset_dir) or
                          problems_lib.default_dataset_dir())
    only = problems_lib.parse_id_list(config.problems)
    # Fail on a missing iverilog or sandbox before asking a server for anything.
    judge = judge_lib.from_config(config, config_cli.user_path(config.scratch_dir) or None)
    if config.samples:
        config.samples = config_cli.user_path(config.samples)
        rows = completions.read(config.samples)
        if not only:
            only = sorted({r.problem for r in rows})
        selected = problems_lib.load(config.dataset_dir, only, config.limit)
        wanted = {p.id for p in selected}
        rows = [r for r in rows if r.problem in wanted]
        config_cli.write_resolved_config(config, out_dir)
    else:
        selected = problems_lib.load(config.dataset_dir, only, config.limit)
        rows = _sample(config, selected, out_dir)
    by_id = {p.id: p for p in selected}
    sampled = {r.problem for r in rows}
    present = [p for p in selected if p.id in sampled]
    workers = config.workers or scoring.default_workers()
    references = scoring.check_references(judge, present, workers)
    results = scoring.judge_completions(judge, by_id, rows, workers,
                                        scoring.expected_tb_samples(references), config.dedup,
                                        scoring.reference_seconds(references),
                                        protocol=config.protocol)
    summary = scoring.summarize(results, references, _ks(config.k),
                                bootstrap_seed=config.bootstrap_seed, extra={
        "iverilog": judge_lib.iverilog_version(judge.iverilog),
        "sandbox": config.sandbox,
        "stimulus_seed": judge.stimulus_seed,
        "protocol": config.protocol,
        "sampling": {field: config.get(field) for field in SAMPLING_FIELDS},
        "dataset_dir": config.dataset_dir,
        "samples_file": config.samples or storage.join(where, SAMPLES_FILE),
    })
    scoring.write(out_dir, results, summary)
    return summary


def format_summary(summary):
    scores = "  ".join(f"pass@{k} {v:.4f}" for k, v in summary["pass_at_k"].items())
    lines = [f"{scores}  ({summary['num_problems']} problems, {summary['num_samples']} samples)"]
    if summary["reference_failures"]:
        without = "  ".join(f"pass@{k} {v:.4f}" for k, v in
                            summary["pass_at_k_without_reference_failures"].items())
        lines.append(f"references failing on this iverilog: "
                     f"{', '.join(summary['reference_failures'])}")
        lines.append(f"without those problems: {without}")
    lines.append("verdicts: " + ", ".join(f"{reason} {n}"
                                          for reason, n in summary["reasons"].items()))
    if summary.get("not_rtl"):
        lines.append("not RTL: " + ", ".join(f"{what} {n}"
                                             for what, n in summary["not_rtl"].items()))
    return "\n".join(lines)


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    config = _CONFIG.value
    apply_aliases(config, sys.argv)
    summary = run(config)
    print(format_summary(summary))
    print(f"results in {config.out_dir}")


if __name__ == "__main__":
    cli.run(main)
