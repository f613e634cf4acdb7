"""`//training/gpu:k8s` prints the JobSet of one GPU node and of several (torchrun's
rendezvous on pod 0, the bucket mounted and shared), valid against the pinned
schemas; bad input as one `error:` line."""

from absl.testing import absltest

from common import kubernetes_schemas
from training.gpu import launching

IMAGE = "us-docker.pkg.dev/p/r/train-gpu@sha256:" + "1e" * 32
POD = ("spec", "replicatedJobs", 0, "template", "spec", "template")


def _render(*args):
    return kubernetes_schemas.render("//training/gpu:k8s", *args, f"--image={IMAGE}")


def _pod_template(jobset):
    for key in POD:
        jobset = jobset[key]
    return jobset


class GpuJobSetTest(absltest.TestCase):

    def test_two_nodes_share_the_bucket_and_meet_at_pod_0(self):
        done, documents = _render("--config=h100x16.py", "--workdir=gs://b/runs/h16")
        self.assertEqual(done.returncode, 0, done.stderr)
        (jobset,) = documents
        self.assertEqual(jobset["spec"]["replicatedJobs"][0]["template"]["spec"]["parallelism"],
                         2)
        template = _pod_template(jobset)
        self.assertEqual(template["metadata"]["annotations"], {"gke-gcsfuse/volumes": "true"})
        pod = template["spec"]
        self.assertEqual(pod["nodeSelector"], {"cloud.google.com/gke-accelerator":
                                               "nvidia-h100-80gb"})
        self.assertEqual(pod["tolerations"][0]["key"], "nvidia.com/gpu")
        (container,) = pod["containers"]
        self.assertEqual(container["resources"]["limits"], {"nvidia.com/gpu": 8})
        self.assertEqual(container["args"], [
            "--config=h100x16.py", "--workdir=/gcs/b/runs/h16", "--shared_fs",
            "--config.heartbeat_s=60", "--nnodes=2", "--node_rank=$(JOB_COMPLETION_INDEX)",
            "--master_addr=sft-h16-nodes-0-0.sft-h16", "--master_port=29500",
            "--config.preempted_exit_code=143"])
        self.assertEqual(pod["terminationGracePeriodSeconds"], 300)
        # torchrun gives its workers that long to save after a SIGTERM.
        self.assertEqual(launching.SHUTDOWN_S, pod["terminationGracePeriodSeconds"])
        self.assertNotIn("annotations", jobset["metadata"])  # GPU nodes: no slice to keep whole
        mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
        self.assertEqual(mounts, {"dshm": "/dev/shm", "run-bucket": "/gcs/b"})
        volumes = {v["name"]: v for v in pod["volumes"]}
        self.assertEqual(volumes["run-bucket"]["csi"]["driver"], "gcsfuse.csi.storage.gke.io")
        self.assertEqual(volumes["run-bucket"]["csi"]["volumeAttributes"]["bucketName"], "b")
        self.assertEqual(volumes["dshm"]["emptyDir"], {"medium": "Memory"})

    def test_one_node_writes_the_bucket_itself(self):
        done, documents = _render("--config=h100x2.py", "--workdir=gs://b/runs/h2",
                                  "--config.max_steps=10")
        self.assertEqual(done.returncode, 0, done.stderr)
        pod = _pod_template(documents[0])["spec"]
        (container,) = pod["containers"]
        self.assertEqual(container["args"], ["--config=h100x2.py", "--config.max_steps=10",
                                             "--workdir=gs://b/runs/h2",
                                             "--config.preempted_exit_code=143"])
        self.assertEqual(container["resources"]["limits"], {"nvidia.com/gpu": 2})
        self.assertEqual([v["name"] for v in pod["volumes"]], ["dshm"])

    def test_bad_input_is_one_error_line(self):
        for args, message in (
                (("--config=h100x16.py", "--workdir=/mnt/runs"), "is a local folder"),
                (("--config=h100x16.py", "--workdir=gs://b/r", "--config.num_processes=15"),
                 "config.num_processes=15 does not split over --nnodes=2"),
                (("--config=h100x2.py", "--workdir=gs://b/r", "--config.machine=gpu-a100x8"),
                 "unknown machine 'gpu-a100x8'")):
            with self.subTest(args):
                done, _ = _render(*args)
                self.assertEqual(done.returncode, 1, done.stderr)
                errors = [l for l in done.stderr.splitlines() if l.startswith("error: ")]
                self.assertLen(errors, 1, done.stderr)
                self.assertIn(message, errors[0])
                self.assertNotIn("Traceback", done.stderr)


if __name__ == "__main__":
    absltest.main()
