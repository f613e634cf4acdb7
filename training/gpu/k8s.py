"""Prints the JobSet that runs `//training/gpu:sft` on GPU nodes on GKE.

    bazel run //training/gpu:push_image -- --repository=us-docker.pkg.dev/P/R/train-gpu
    bazel run //training/gpu:k8s -- --config=h100x16.py --workdir=gs://B/runs/h100x16 \\
        --repository=us-docker.pkg.dev/P/R/train-gpu > h100x16.yaml
    kubectl apply -f h100x16.yaml

One pod per node of the config's machine (h100x16: 2 pods of 8 GPUs on
`nvidia-h100-80gb` nodes), each starting torchrun for its GPUs with node rank =
its index and pod 0 as the rendezvous. On one node the run directory is the
gs:// URL itself; on several, the nodes must share a file system (the GPU
stack's checkpoint shards are written by every node), so the bucket is mounted
with Cloud Storage FUSE and the run uses --shared_fs. A failed pod restarts the
whole JobSet (--max_restarts times), which resumes from the last checkpoint.
"""

import posixpath


from common import cli
from common import config_cli
from common import kubernetes
from common import storage
from training.gpu import launching

_CONFIG = config_cli.define_config_flag(__file__)
_FLAGS = kubernetes.Flags("sft", job=True)

IMAGE = "//training/gpu:image"
COMMAND = ("python3", "-m", "training.gpu.sft")  # the image's entrypoint, without its config
REPLICATED_JOB = "nodes"
RENDEZVOUS_PORT = 29500  # torchrun's default --master_port
# Where a pod mounts the bucket of --workdir (Cloud Storage FUSE) on several nodes.
MOUNT_ROOT = "/gcs"


def bucket_mount(workdir):
    """(volume, mount, the run directory as the pods see it) of the bucket."""
    bucket = storage.bucket(workdir)
    volume = {"name": "run-bucket", "csi": {
        "driver": "gcsfuse.csi.storage.gke.io",
        "volumeAttributes": {"bucketName": bucket, "mountOptions": "implicit-dirs"}}}
    mount = {"name": "run-bucket", "mountPath": posixpath.join(MOUNT_ROOT, bucket)}
    path = workdir[len(storage.SCHEME):]
    return volume, mount, posixpath.join(MOUNT_ROOT, path)


def manifests(config, argv, workdir, image, name, options):
    """([the JobSet], pods) for `config`, loaded from the command line `argv`;
    `options`: the binary's flags (kubernetes.Flags)."""
    machine = kubernetes.machine_of(config)
    nodes = machine.hosts
    launching.processes_per_node(config.num_processes, nodes)  # splits evenly, or one line
    workdir = kubernetes.require_bucket(workdir, nodes)
    shm_volume, shm_mount = kubernetes.shared_memory()
    volumes, mounts, annotations = [shm_volume], [shm_mount], {}
    args = kubernetes.config_args(argv, "training/gpu/configs")
    if nodes > 1:
        volume, mount, path = bucket_mount(workdir)
        volumes.append(volume)
        mounts.append(mount)
        annotations["gke-gcsfuse/volumes"] = "true"  # GKE's sidecar that mounts the bucket
        host = kubernetes.coordinator_host(name, REPLICATED_JOB)
        # The mounted bucket looks local: a heartbeat every 60 s, as in a bucket.
        args += [f"--workdir={path}", "--shared_fs", "--config.heartbeat_s=60",
                 f"--nnodes={nodes}", f"--node_rank=$({kubernetes.INDEX_ENV})",
                 f"--master_addr={host}", f"--master_port={RENDEZVOUS_PORT}"]
    else:
        args.append(f"--workdir={workdir}")
    return [kubernetes.training_jobset(
        name, "sft-gpu", REPLICATED_JOB, machine, nodes, image, COMMAND, args,
        ("rendezvous", RENDEZVOUS_PORT), options, volumes=volumes, mounts=mounts,
        annotations=annotations)], nodes


def main(argv):
    kubernetes.job_main(argv, _CONFIG.value, _FLAGS, IMAGE, "//training/gpu:sft", manifests)


if __name__ == "__main__":
    cli.run(main)
