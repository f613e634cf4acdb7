"""`//serving:k8s` prints the Deployment and Service of the TPU and GPU serving configs,
valid against Kubernetes 1.34's schemas: the platform's serving image by
digest, the machine's node pool, the API key from a Secret, vLLM's /health as
the probes; bad input as one `error:` line."""

import os

from absl.testing import absltest

from common import kubernetes_schemas

DIGEST = "sha256:" + "5e" * 32


def _render(*args, env=None):
    return kubernetes_schemas.render("//serving:k8s", *args, env=env)


def _container(documents):
    deployment, _ = documents
    return deployment["spec"]["template"]["spec"]["containers"][0]


class ServingManifestsTest(absltest.TestCase):

    def test_the_tpu_and_gpu_configs(self):
        root = self.create_tempdir().full_path
        for package_image in ("tpu_image", "gpu_image"):  # each platform's own image
            layout = os.path.join(root, "bazel-bin", "serving", package_image)
            os.makedirs(layout)
            digest = DIGEST if package_image == "tpu_image" else "sha256:" + "6f" * 32
            with open(os.path.join(layout, "index.json"), "w") as f:
                f.write('{"manifests": [{"digest": "%s"}]}' % digest)
        for config, model, selector, limits, digest in (
                ("v6e8.py", "gs://b/export/merged", {
                    "cloud.google.com/gke-tpu-accelerator": "tpu-v6e-slice",
                    "cloud.google.com/gke-tpu-topology": "2x4"}, {"google.com/tpu": 8}, DIGEST),
                ("h100x2.py", "google/gemma-4-31B-it", {
                    "cloud.google.com/gke-accelerator": "nvidia-h100-80gb"},
                 {"nvidia.com/gpu": 2}, "sha256:" + "6f" * 32)):
            with self.subTest(config):
                done, documents = _render(f"--config={config}", f"--model={model}",
                                          "--repository=r.io/p/serve", "--replicas=2",
                                          env={"BUILD_WORKSPACE_DIRECTORY": root})
                self.assertEqual(done.returncode, 0, done.stderr)
                deployment, service = documents
                self.assertEqual((deployment["kind"], service["kind"]), ("Deployment", "Service"))
                self.assertEqual(deployment["spec"]["replicas"], 2)
                pod = deployment["spec"]["template"]["spec"]
                self.assertEqual(pod["nodeSelector"], selector)
                container = _container(documents)
                self.assertEqual(container["image"], f"r.io/p/serve@{digest}")
                self.assertEqual(container["resources"]["limits"], limits)
                self.assertEqual(container["args"][:3], [f"--config={config}",
                                                         "--config.runtime=image",
                                                         f"--model={model}"])
                self.assertIn("--host=0.0.0.0", container["args"])
                env = {e["name"]: e for e in container["env"]}
                self.assertEqual(env["VLLM_API_KEY"]["valueFrom"]["secretKeyRef"],
                                 {"name": "vllm-api-key", "key": "api-key"})
                self.assertEqual("HF_TOKEN" in env, not model.startswith("gs://"))
                for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
                    self.assertEqual(container[probe]["httpGet"], {"path": "/health",
                                                                  "port": "http"})
                # Start-up: the download allowance (1800 s) and the config's own timeout.
                timeout = {"v6e8.py": 1800, "h100x2.py": 1200}[config]
                self.assertEqual(container["startupProbe"]["failureThreshold"] * 10,
                                 timeout + 1800)
                self.assertEqual(service["spec"]["selector"],
                                 deployment["spec"]["selector"]["matchLabels"])
                self.assertEqual(service["spec"]["ports"][0]["port"], 8000)

    def test_bad_input_is_one_error_line(self):
        image = f"--image=r.io/p/serve@{DIGEST}"
        local = self.create_tempdir().full_path
        for args, message in (
                (("--config=cpu.py", "--model=gs://b/m"), "the serving images are for TPU"),
                (("--config=v6e8.py", f"--model={local}"), "a pod cannot read this machine"),
                (("--config=v6e8.py", "--model=./merged"), "a pod cannot read this machine"),
                (("--config=v6e8.py",), "give --model"),
                (("--config=v6e8.py", "--model=gs://b/m", "--config.machine=tpu-v9-8"),
                 "unknown machine 'tpu-v9-8'"),
                (("--config=v6e8.py", "--model=gs://b/m", "--config.api_key_env="),
                 "needs an API key")):
            with self.subTest(args):
                done, _ = _render(*args, image)
                self.assertEqual(done.returncode, 1, done.stderr)
                errors = [l for l in done.stderr.splitlines() if l.startswith("error: ")]
                self.assertLen(errors, 1, done.stderr)
                self.assertIn(message, errors[0])
                self.assertNotIn("Traceback", done.stderr)


if __name__ == "__main__":
    absltest.main()
