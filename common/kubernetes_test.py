"""The shared manifest pieces: image by digest, names, buckets, config flags,
placement from the machine table; the schemas' strictness; the rehearsal's
expansion, host mapping and restart policy (with a probe binary)."""

import copy
import json
import os
from unittest import mock

from absl.testing import absltest

from common import kubernetes
from common import kubernetes_rehearsal
from common import kubernetes_schemas
from common import machines

DIGEST = "sha256:" + "ab" * 32


def _layout(root, package, name, digest=DIGEST):
    path = os.path.join(root, "bazel-bin", package, name)
    os.makedirs(path)
    with open(os.path.join(path, "index.json"), "w") as f:
        json.dump({"schemaVersion": 2, "manifests": [
            {"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": digest,
             "size": 1}]}, f)
    return path


def _probe_jobset(pods, max_restarts, args=()):
    container = kubernetes.container("probe", "r.io/x@" + DIGEST,
                                     ("python3", "-m", "common.repo_probe"), args,
                                     machines.get("cpu"))
    pod = kubernetes.pod_spec(machines.get("cpu"), [container], "sa")
    return kubernetes.jobset("probe", "test", "workers", pods, pod, max_restarts)


class ImageTest(absltest.TestCase):

    def test_the_digest_of_the_layout_bazel_built(self):
        root = self.create_tempdir().full_path
        _layout(root, "training/tpu", "image")
        with mock.patch.dict(os.environ, {"BUILD_WORKSPACE_DIRECTORY": root}):
            image, source = kubernetes.image_reference(None, "us-docker.pkg.dev/p/r/train",
                                                       "//training/tpu:image")
        self.assertEqual(image, f"us-docker.pkg.dev/p/r/train@{DIGEST}")
        self.assertIn("//training/tpu:image, built ", source)

    def test_no_layout_names_the_push_target(self):
        root = self.create_tempdir().full_path
        with mock.patch.dict(os.environ, {"BUILD_WORKSPACE_DIRECTORY": root}):
            with self.assertRaisesRegex(kubernetes.ManifestError,
                                        r"bazel run //serving:push_tpu_image -- "
                                        r"--repository=r\.io/p/serve"):
                kubernetes.image_reference(None, "r.io/p/serve", "//serving:tpu_image")
            with self.assertRaisesRegex(kubernetes.ManifestError, "give --repository"):
                kubernetes.image_reference(None, None, "//serving:tpu_image")

    def test_bad_forms(self):
        root = self.create_tempdir().full_path
        _layout(root, "training/tpu", "image", digest="sha256:short")
        with mock.patch.dict(os.environ, {"BUILD_WORKSPACE_DIRECTORY": root}):
            with self.assertRaisesRegex(kubernetes.ManifestError, "not an image digest"):
                kubernetes.image_reference(None, "r.io/p/x", "//training/tpu:image")
        for image in ("r.io/p/x:latest", "r.io/p/x@sha256:abc"):
            with self.assertRaisesRegex(kubernetes.ManifestError, "by digest"):
                kubernetes.image_reference(image, None, "//training/tpu:image")
        with self.assertRaisesRegex(kubernetes.ManifestError, "without a tag"):
            kubernetes.image_reference(None, "r.io/p/x:v1", "//training/tpu:image")
        self.assertEqual(kubernetes.image_reference(f"r.io/p/x@{DIGEST}", None, "//a:b"),
                         (f"r.io/p/x@{DIGEST}", "--image"))


class FieldsTest(absltest.TestCase):

    def test_names(self):
        self.assertEqual(kubernetes.name_from("gs://b/runs/V5p_16/", "sft"), "sft-v5p-16")
        self.assertEqual(kubernetes.name_from("gs://b/__", "sft"), "sft")
        self.assertLessEqual(len(kubernetes.name_from("gs://b/" + "x" * 80, "sft")), 40)
        for bad in ("Sft", "1sft", "sft-", "s" * 41, ""):
            with self.assertRaises(kubernetes.ManifestError):
                kubernetes.check_name(bad)

    def test_a_local_workdir_is_refused(self):
        with self.assertRaisesRegex(kubernetes.ManifestError,
                                    "runs/x is a local folder.*2 hosts share none"):
            kubernetes.require_bucket("runs/x", 2)
        self.assertEqual(kubernetes.require_bucket("gs://b/r/", 1), "gs://b/r")

    def test_config_flags_pass_on_in_order(self):
        self.assertEqual(
            kubernetes.config_args(["--config", "v5p8.py", "--workdir=x", "--config.seed=3",
                                    "--noconfig.data.packing", "--configure=1"], "t/configs"),
            ["--config=v5p8.py", "--config.seed=3", "--noconfig.data.packing"])
        self.assertEqual(kubernetes.config_args([], "t/configs"), ["--config=cpu.py"])
        with self.assertRaisesRegex(kubernetes.ManifestError, "the image holds the configs "
                                    "in t/configs/ only"):
            kubernetes.config_args(["--config=../mine.py"], "t/configs")
        # A value in its own argument would be lost: refused, naming the one-argument form.
        with self.assertRaisesRegex(kubernetes.ManifestError, "write --config.seed=3"):
            kubernetes.config_args(["--config.seed", "3"], "t/configs")
        self.assertEqual(kubernetes.config_args(["--config.data.packing", "--workdir=x"], "c"),
                         ["--config=cpu.py", "--config.data.packing"])

    def test_placement_from_the_machine_table(self):
        self.assertEqual(kubernetes.placement(machines.get("tpu-v5litepod-16")), (
            {"cloud.google.com/gke-tpu-accelerator": "tpu-v5-lite-podslice",
             "cloud.google.com/gke-tpu-topology": "4x4"}, {"google.com/tpu": 4}))
        self.assertEqual(kubernetes.placement(machines.get("gpu-h100x16")), (
            {"cloud.google.com/gke-accelerator": "nvidia-h100-80gb"}, {"nvidia.com/gpu": 8}))
        self.assertEqual(kubernetes.placement(machines.get("cpu")), ({}, {}))


class SchemaTest(absltest.TestCase):
    """The checks are strict: a misspelt field, a wrong type, a wrong kind fail."""

    def test_a_jobset_and_what_breaks_it(self):
        container = kubernetes.container("c", "r.io/x@" + DIGEST, ("python3",), (),
                                         machines.get("cpu"))
        pod = kubernetes.pod_spec(machines.get("cpu"), [container], "sa")
        kubernetes.jobset("j", "test", "workers", 1, pod, 0)
        self.assertNotIn("env", container)  # the caller's pod is left as it was
        document = _probe_jobset(2, 1)
        kubernetes_schemas.validate(document)
        pod = ("spec", "replicatedJobs", 0, "template", "spec", "template", "spec")
        for path, value, message in (
                (("spec", "failurePolicy", "maxRestart"), 3, "'maxRestart' was unexpected"),
                (("spec", "replicatedJobs", 0, "template", "spec", "parallelism"), "2",
                 "is not of type 'integer'"),
                ((*pod, "containers", 0, "resource"), {}, "'resource' was unexpected"),
                ((*pod, "nodeSelektor"), {}, "'nodeSelektor' was unexpected"),
                (("metadata", "label"), {}, "'label' was unexpected")):
            broken = copy.deepcopy(document)
            node = broken
            for key in path[:-1]:
                node = node[key]
            node[path[-1]] = value
            with self.subTest(path=path):
                with self.assertRaisesRegex(kubernetes_schemas.SchemaError, message):
                    kubernetes_schemas.validate(broken)

    def test_kubernetes_kinds(self):
        service = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "a"},
                   "spec": {"ports": [{"port": 80}]}}
        kubernetes_schemas.validate(service)
        with self.assertRaisesRegex(kubernetes_schemas.SchemaError, "'port' was unexpected"):
            kubernetes_schemas.validate(dict(service, spec={"port": 80}))
        with self.assertRaisesRegex(kubernetes_schemas.SchemaError, "Gadget"):
            kubernetes_schemas.validate({"apiVersion": "v1", "kind": "Gadget",
                                         "metadata": {"name": "a"}})
        with self.assertRaisesRegex(kubernetes_schemas.SchemaError, "no manifest"):
            kubernetes_schemas.validate_text("# nothing\n")


class RehearsalTest(absltest.TestCase):

    def _rehearse(self, jobset, **env):
        return kubernetes_rehearsal.Rehearsal(
            jobset, {"common.repo_probe": "//common:repo_probe"}, env=env,
            logdir=self.create_tempdir().full_path).run(timeout_s=120)

    def test_pods_get_their_index_and_loopback_addresses(self):
        result = self._rehearse(_probe_jobset(2, 0, args=(
            "--index=$(JOB_COMPLETION_INDEX)", "--peer=probe-workers-0-0.probe:8476",
            "--kept=$(UNSET)")))
        self.assertTrue(result.succeeded)
        self.assertEqual((result.restarts, result.exit_codes), (0, [[0, 0]]))
        argvs = [json.loads(log.splitlines()[-1])["argv"] for log in result.logs[0]]
        self.assertEqual([a[0] for a in argvs], ["--index=0", "--index=1"])
        self.assertEqual(argvs[0][1], argvs[1][1])  # one address for both pods
        self.assertRegex(argvs[0][1], r"^--peer=127\.0\.0\.1:\d+$")
        self.assertNotEqual(argvs[0][1], "--peer=127.0.0.1:8476")
        self.assertEqual(argvs[0][2], "--kept=$(UNSET)")

    def test_a_failing_pod_restarts_the_jobset_until_max_restarts(self):
        result = self._rehearse(_probe_jobset(2, 2), REPO_PROBE_EXIT="3")
        self.assertFalse(result.succeeded)
        self.assertEqual(result.restarts, 2)
        self.assertLen(result.exit_codes, 3)
        for codes in result.exit_codes:
            self.assertIn(3, codes)


if __name__ == "__main__":
    absltest.main()
