"""Prints the JobSet that runs `//training/tpu:sft` on a TPU slice on GKE.

    bazel run //training/tpu:push_image -- --repository=us-docker.pkg.dev/P/R/train
    bazel run //training/tpu:k8s -- --config=v5p16.py --workdir=gs://B/runs/v5p16 \\
        --repository=us-docker.pkg.dev/P/R/train > v5p16.yaml
    kubectl apply -f v5p16.yaml

One pod per host of the config's machine (v5p-16: 2 pods of 4 chips on a
`tpu-v5p-slice` node pool of topology 2x2x2), each running the image Bazel
built, by digest, with the config and its --config.* overrides; the pods find
process 0 by its JobSet host name. A failed pod restarts the whole JobSet
(--max_restarts times), which resumes from the last checkpoint in --workdir.
"""

from common import cli
from common import config_cli
from common import kubernetes

_CONFIG = config_cli.define_config_flag(__file__)
_FLAGS = kubernetes.Flags("sft", job=True)

IMAGE = "//training/tpu:image"
COMMAND = ("python3", "-m", "training.tpu.sft")  # the image's entrypoint, without its config
REPLICATED_JOB = "workers"
# The JAX coordinator's port on process 0 (what jax.distributed uses on Cloud TPU).
COORDINATOR_PORT = 8476


def pods(config, machine):
    """One per host; on CPU (a rehearsal of a slice) one per configured process."""
    processes = config.distributed.num_processes
    if machine.platform == "cpu":
        return processes
    if processes > 1 and processes != machine.hosts:
        raise kubernetes.ManifestError(
            f"config.distributed.num_processes={processes}, but {machine.name} has "
            f"{machine.hosts} host(s): one process runs on each")
    return machine.hosts


def manifests(config, argv, workdir, image, name, options):
    """([the JobSet], pods) for `config`, loaded from the command line `argv`;
    `options`: the binary's flags (kubernetes.Flags)."""
    machine = kubernetes.machine_of(config)
    count = pods(config, machine)
    workdir = kubernetes.require_bucket(workdir, count)
    args = [*kubernetes.config_args(argv, "training/tpu/configs"), f"--workdir={workdir}"]
    if count > 1:
        host = kubernetes.coordinator_host(name, REPLICATED_JOB)
        args += ["--config.distributed.auto=False",
                 f"--config.distributed.num_processes={count}",
                 f"--config.distributed.process_id=$({kubernetes.INDEX_ENV})",
                 f"--config.distributed.coordinator_address={host}:{COORDINATOR_PORT}"]
    exclusive = kubernetes.EXCLUSIVE_TOPOLOGY if count > 1 and machine.platform == "tpu" else None
    return [kubernetes.training_jobset(
        name, "sft-tpu", REPLICATED_JOB, machine, count, image, COMMAND, args,
        ("coordinator", COORDINATOR_PORT), options, jobset_annotations=exclusive)], count


def main(argv):
    kubernetes.job_main(argv, _CONFIG.value, _FLAGS, IMAGE, "//training/tpu:sft", manifests)


if __name__ == "__main__":
    cli.run(main)
