"""A serving sweep: input lengths x request rates, each point one run of vLLM's
benchmark, then a summary with saturation points and cost.

Every point writes `points/in{L}_rate{R}.json`: vLLM's result (output tok/s,
request throughput, TTFT / TPOT / ITL / E2EL medians and P99, failures) plus
the run's record (model, adapter, machine, vLLM version, server settings).
A point that fails is written too, with its reason; when the server stops
answering, the remaining points are marked unrun and the summary `partial`.
"""

import json
import math
import os
import subprocess
import time
import urllib.error

from common import cli
from serving import launcher
from serving import server_config

PERCENTILES = "50,99"
METRICS = "ttft,tpot,itl,e2el"
# The rate beyond which throughput gains < 5% or median TTFT explodes (> 3x).
THROUGHPUT_GAIN, TTFT_BLOWUP = 1.05, 3.0


class SweepError(cli.UserError):
    """The sweep cannot start (unreachable server, bad request)."""


def rate_name(rate):
    return "inf" if math.isinf(rate) else f"{rate:g}"


def parse_sweep(text):
    """'512,1024x1,4,inf' -> ((512, 1024), (1.0, 4.0, inf))."""
    try:
        lengths, rates = text.split("x")
        return (tuple(int(v) for v in lengths.split(",")),
                tuple(float(v) for v in rates.split(",")))
    except ValueError:
        raise SweepError(f"--sweep must look like 512,1024x1,4,inf, got {text!r}") from None


def server_info(base_url, timeout=10, api_key=None):
    """(served model ids, vLLM version) of the server, or SweepError if unreachable
    or if it refuses `api_key`."""
    def get(path):
        return json.loads(launcher.http_get(f"{base_url}{path}", timeout, api_key)[1])
    try:
        models = [m["id"] for m in get("/v1/models")["data"]]
        try:
            version = get("/version").get("version")
        except (urllib.error.URLError, OSError, ValueError):
            version = None
        return models, version
    except (urllib.error.URLError, OSError, ValueError, KeyError) as e:
        if getattr(e, "code", None) == 401:  # an HTTPError: up, refusing our key
            raise SweepError(f"the server at {base_url} answers 401 Unauthorized: set its API "
                             "key in the variable the serving config's api_key_env names "
                             f"(default {server_config.API_KEY_ENV})") from None
        raise SweepError(f"no vLLM server answers at {base_url}: {e}") from None


def bench_args(*, base_url, model, tokenizer, input_len, output_len, rate, num_prompts,
               num_warmups, seed, result_dir, result_name):
    return ["--backend", "vllm", "--base-url", base_url, "--endpoint", "/v1/completions",
            "--model", model, "--tokenizer", tokenizer, "--dataset-name", "random",
            "--random-input-len", str(input_len), "--random-output-len", str(output_len),
            "--num-prompts", str(num_prompts), "--request-rate", rate_name(rate),
            "--num-warmups", str(num_warmups), "--ignore-eos", "--seed", str(seed),
            "--percentile-metrics", METRICS, "--metric-percentiles", PERCENTILES,
            "--save-result", "--result-dir", result_dir, "--result-filename", result_name,
            "--disable-tqdm"]


def run_point(bench, args, timeout_s, env=None):
    """Runs one benchmark point; returns (vLLM's result dict or None, error or None).
    `bench`: the command of vLLM's benchmark (//serving:vllm_bench's launcher); `env`:
    more environment (vLLM's benchmark sends OPENAI_API_KEY as a Bearer token)."""
    result_path = os.path.join(args[args.index("--result-dir") + 1],
                               args[args.index("--result-filename") + 1])
    try:
        done = subprocess.run([*bench, *args], capture_output=True, text=True,
                              timeout=timeout_s, env=launcher.vllm_env(env))
    except subprocess.TimeoutExpired:
        return None, f"timed out after {timeout_s}s"
    if done.returncode or not os.path.exists(result_path):
        return None, f"benchmark exited {done.returncode}: {done.stderr.strip()[-1500:]}"
    with open(result_path) as f:
        return json.load(f), None


def point_record(result):
    """The figures the summary uses, from vLLM's result."""
    keys = ["completed", "failed", "request_throughput", "output_throughput",
            "total_token_throughput"]
    out = {k: result.get(k) for k in keys}
    for metric in METRICS.split(","):
        for stat in ("median", "p99", "mean"):
            out[f"{stat}_{metric}_ms"] = result.get(f"{stat}_{metric}_ms")
    out["failed"] = out["failed"] if out["failed"] is not None else (
        result.get("num_prompts", 0) - (result.get("completed") or 0))
    return out


def saturation(points):
    """(saturation rate, peak output tok/s) of one input length's points, by rate."""
    done = sorted((p for p in points if p["status"] == "ok"), key=lambda p: p["rate"])
    if not done:
        return None, None
    peak = max(p["output_throughput"] for p in done)
    base_ttft = done[0]["median_ttft_ms"] or 0.0
    for current, following in zip(done, done[1:]):
        gain = following["output_throughput"] / max(current["output_throughput"], 1e-9)
        exploded = base_ttft and following["median_ttft_ms"] > TTFT_BLOWUP * base_ttft
        if gain < THROUGHPUT_GAIN or exploded:
            return current["rate"], peak
    return None, peak  # still rising at the highest rate


def cost_per_million_output_tokens(dollars_per_hour, output_tokens_per_s):
    if not dollars_per_hour or not output_tokens_per_s:
        return None
    return dollars_per_hour / (output_tokens_per_s * 3600 / 1e6)


def summarize(points, record, dollars_per_hour):
    by_length = {}
    for point in points:
        by_length.setdefault(point["input_len"], []).append(point)
    lengths = {}
    for length, group in sorted(by_length.items()):
        rate, peak = saturation(group)
        lengths[str(length)] = {
            "saturation_rate": rate, "peak_output_tok_s": peak,
            "dollars_per_million_output_tokens":
                cost_per_million_output_tokens(dollars_per_hour, peak),
            "points": sorted(group, key=lambda p: p["rate"])}
    statuses = {p["status"] for p in points}
    return {"record": record, "complete": statuses == {"ok"},
            "failed_requests": sum(p.get("failed") or 0 for p in points if p["status"] == "ok"),
            "input_lengths": lengths}


def sweep(*, bench, base_url, model, tokenizer, input_lens, rates, output_len,
          num_prompts, num_warmups, seed, max_model_len, out_dir, record, dollars_per_hour,
          timeout_s, api_key=None, progress=print):
    """Runs every point (each request sends `api_key`, if any); returns the summary
    (also written as summary.json)."""
    server_info(base_url, api_key=api_key)  # fail at once if nothing answers
    key_env = {"OPENAI_API_KEY": api_key} if api_key else None
    points_dir = os.path.join(out_dir, "points")
    os.makedirs(points_dir, exist_ok=True)
    points, server_gone = [], None
    for input_len in input_lens:
        for rate in rates:
            name = f"in{input_len}_rate{rate_name(rate)}.json"
            point = {"input_len": input_len, "output_len": output_len, "rate": rate,
                     "num_prompts": num_prompts}
            if input_len + output_len > max_model_len:
                point.update(status="skipped", reason=f"input {input_len} + output "
                             f"{output_len} > max_model_len {max_model_len}")
            elif server_gone:
                point.update(status="unrun", reason=server_gone)
            else:
                try:
                    server_info(base_url, api_key=api_key)
                except SweepError as e:
                    server_gone = f"server stopped answering: {e}"
                    point.update(status="unrun", reason=server_gone)
                else:
                    started = time.time()
                    result, error = run_point(bench, bench_args(
                        base_url=base_url, model=model, tokenizer=tokenizer,
                        input_len=input_len, output_len=output_len, rate=rate,
                        num_prompts=num_prompts, num_warmups=num_warmups, seed=seed,
                        result_dir=points_dir, result_name=name + ".vllm"), timeout_s, key_env)
                    if error:
                        point.update(status="failed", reason=error)
                    else:
                        point.update(status="ok", **point_record(result),
                                     seconds=time.time() - started)
            point["record"] = record
            _write_json(os.path.join(points_dir, name), point)
            progress(f"input {input_len} rate {rate_name(rate)}: {point['status']}"
                     + (f" {point['output_throughput']:.1f} out tok/s, median TTFT "
                        f"{point['median_ttft_ms']:.0f} ms, {point['failed']} failed"
                        if point["status"] == "ok" else f" ({point.get('reason', '')[:200]})"))
            points.append(point)
    summary = summarize(points, record, dollars_per_hour)
    _write_json(os.path.join(out_dir, "summary.json"), summary)
    return summary


def _write_json(path, value):
    """Writes `path` whole or not at all (a killed sweep leaves no half a file)."""
    with open(path + ".tmp", "w") as f:
        json.dump(value, f, indent=2)
    os.replace(path + ".tmp", path)
