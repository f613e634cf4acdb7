"""`//training/tpu:k8s` prints the JobSet of each TPU machine config, valid against the
pinned schemas (Kubernetes 1.34, JobSet v0.12.0), placed and wired by the
machine table; bad input as one `error:` line."""

import os

from absl.testing import absltest

from common import kubernetes_schemas

DIGEST = "sha256:" + "0f" * 32
IMAGE = f"us-docker.pkg.dev/p/r/train@{DIGEST}"
POD = ("spec", "replicatedJobs", 0, "template", "spec", "template", "spec")


def _at(document, path):
    for key in path:
        document = document[key]
    return document


def _render(*args, env=None):
    return kubernetes_schemas.render("//training/tpu:k8s", *args, env=env)


class TpuJobSetTest(absltest.TestCase):

    def test_every_machine_config(self):
        for config, pods, chips, accelerator, topology in (
                ("v5p8.py", 1, 4, "tpu-v5p-slice", "2x2x1"),
                ("v5p16.py", 2, 4, "tpu-v5p-slice", "2x2x2"),
                ("v5e16.py", 4, 4, "tpu-v5-lite-podslice", "4x4"),
                ("v6e8.py", 1, 8, "tpu-v6e-slice", "2x4")):
            with self.subTest(config):
                done, documents = _render(f"--config={config}", "--workdir=gs://b/runs/x",
                                          f"--image={IMAGE}", "--config.max_steps=5")
                self.assertEqual(done.returncode, 0, done.stderr)
                (jobset,) = documents
                job = jobset["spec"]["replicatedJobs"][0]["template"]["spec"]
                self.assertEqual((job["parallelism"], job["completions"]), (pods, pods))
                self.assertEqual((job["completionMode"], job["backoffLimit"]), ("Indexed", 0))
                self.assertEqual(jobset["spec"]["failurePolicy"], {"maxRestarts": 3})
                pod = _at(jobset, POD)
                self.assertEqual(pod["restartPolicy"], "Never")
                # A SIGTERM (a preempted node) saves, then fails the pod: the JobSet restarts.
                self.assertEqual(pod["terminationGracePeriodSeconds"], 300)
                # A multi-host slice stays on one node pool (its interconnect).
                self.assertEqual(jobset["metadata"].get("annotations"), None if pods == 1 else {
                    "alpha.jobset.sigs.k8s.io/exclusive-topology": "cloud.google.com/gke-nodepool"})
                self.assertEqual(pod["nodeSelector"], {
                    "cloud.google.com/gke-tpu-accelerator": accelerator,
                    "cloud.google.com/gke-tpu-topology": topology})
                (container,) = pod["containers"]
                self.assertEqual(container["image"], IMAGE)
                self.assertEqual(container["resources"]["limits"], {"google.com/tpu": chips})
                self.assertEqual(container["command"], ["python3", "-m", "training.tpu.sft"])
                args = container["args"]
                self.assertEqual(args[:3], [f"--config={config}", "--config.max_steps=5",
                                            "--workdir=gs://b/runs/x"])
                self.assertEqual(args[-1], "--config.preempted_exit_code=143")
                env = {e["name"]: e for e in container["env"]}
                self.assertEqual(env["HF_TOKEN"]["valueFrom"]["secretKeyRef"],
                                 {"name": "hf-token", "key": "token", "optional": True})
                distributed = [a for a in args if a.startswith("--config.distributed.")]
                if pods == 1:
                    self.assertEqual(distributed, [])
                else:
                    self.assertEqual(distributed, [
                        "--config.distributed.auto=False",
                        f"--config.distributed.num_processes={pods}",
                        "--config.distributed.process_id=$(JOB_COMPLETION_INDEX)",
                        "--config.distributed.coordinator_address=sft-x-workers-0-0.sft-x:8476"])
                    self.assertEqual(container["env"][0]["valueFrom"]["fieldRef"]["fieldPath"],
                                     "metadata.annotations['batch.kubernetes.io/job-completion-"
                                     "index']")
                self.assertEqual(pod["serviceAccountName"], "gemma4-toolkit")
                self.assertIn("# A failed pod restarts all", done.stdout)

    def test_the_image_bazel_built_and_the_flags(self):
        root = self.create_tempdir().full_path
        layout = os.path.join(root, "bazel-bin", "training", "tpu", "image")
        os.makedirs(layout)
        with open(os.path.join(layout, "index.json"), "w") as f:
            f.write('{"schemaVersion": 2, "manifests": [{"digest": "%s"}]}' % DIGEST)
        out = os.path.join(root, "jobset.yaml")
        done, _ = _render("--config=v5p16.py", "--workdir=gs://b/r", "--repository=r.io/p/t",
                          "--name=night", "--max_restarts=7", "--service_account=trainer",
                          f"--out={out}", env={"BUILD_WORKSPACE_DIRECTORY": root})
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertIn(f"wrote {out}", done.stdout)
        with open(out) as f:
            (jobset,) = kubernetes_schemas.validate_text(f.read())
        self.assertEqual(jobset["metadata"]["name"], "night")
        self.assertEqual(jobset["spec"]["failurePolicy"]["maxRestarts"], 7)
        pod = _at(jobset, POD)
        self.assertEqual(pod["serviceAccountName"], "trainer")
        self.assertEqual(pod["containers"][0]["image"], f"r.io/p/t@{DIGEST}")
        self.assertIn("--config.distributed.coordinator_address=night-workers-0-0.night:8476",
                      pod["containers"][0]["args"])

    def test_bad_input_is_one_error_line(self):
        for args, message in (
                (("--config=v5p16.py", "--config.machine=tpu-v9-8"), "unknown machine 'tpu-v9-8'"),
                (("--config=v5p16.py", "--workdir=runs/x"), "is a local folder"),
                (("--config=training/tpu/configs/v5p16.py",), "the image holds the configs in "
                 "training/tpu/configs/ only"),
                (("--config=v5p16.py", "--config.distributed.num_processes=3"),
                 "tpu-v5p-16 has 2 host"),
                (("--config=v5p16.py", "--name=Bad_Name"), "not a usable Kubernetes name"),
                (("--config=v5p16.py", "--workdir="), "give --workdir"),
                (("--config=v5p16.py", "--config.max_steps", "5"),
                 "write --config.max_steps=5")):
            with self.subTest(args):
                if not any(a.startswith("--workdir") for a in args):
                    args += ("--workdir=gs://b/r",)
                done, _ = _render(*args, f"--image={IMAGE}")
                self.assertEqual(done.returncode, 1, done.stderr)
                errors = [l for l in done.stderr.splitlines() if l.startswith("error: ")]
                self.assertLen(errors, 1, done.stderr)
                self.assertIn(message, errors[0])
                self.assertNotIn("Traceback", done.stderr)
                self.assertEqual(done.stdout, "")

    def test_a_cpu_rehearsal_has_one_pod_per_process(self):
        done, documents = _render("--config=cpu.py", "--workdir=gs://b/r", f"--image={IMAGE}",
                                  "--config.distributed.num_processes=2")
        self.assertEqual(done.returncode, 0, done.stderr)
        pod = _at(documents[0], POD)
        self.assertNotIn("nodeSelector", pod)
        self.assertNotIn("resources", pod["containers"][0])
        self.assertEqual(_at(documents[0], POD[:-2])["parallelism"], 2)
        self.assertNotIn("annotations", documents[0]["metadata"])  # no node pool to hold


if __name__ == "__main__":
    absltest.main()
