"""Kubernetes manifests for GKE, shared by the stages' `k8s` binaries.

    bazel run //training/tpu:k8s -- --config=v5p16.py --workdir=gs://B/run --repository=R
    bazel run //training/gpu:k8s -- --config=h100x16.py --workdir=gs://B/run --repository=R
    bazel run //serving:k8s -- --config=v6e8.py --model=gs://B/export/merged --repository=R

Training is a JobSet (jobset.x-k8s.io, the API xpk and GKE's TPU guides run
multi-host jobs with): one replicated Job of one pod per host, Indexed, each pod
told its index by the downward API. Its restart policy: a pod that fails fails
its Job at once (backoffLimit 0), and a failed Job restarts the whole JobSet
(failurePolicy.maxRestarts), every pod recreated, because a multi-host step
cannot go on without one of its hosts; the trainers then resume from the last
checkpoint in the bucket. Serving is a Deployment and a Service.

Placement comes from the machine table (common/machines.py): the accelerator's
node label, the TPU topology, the chips each pod asks for. The image is named by
digest: the one Bazel last built (and `push_*` pushed) for the stage, read from
the image's OCI layout under bazel-bin, or one given with --image. Credentials
come from Workload Identity (a Kubernetes service account bound to a Google one)
and the serving API key from a Secret: nothing secret is in a manifest.
"""

import copy
import datetime
import json
import os
import re
import sys

import yaml
from absl import app
from absl import flags

from common import cli
from common import config_cli
from common import machines
from common import storage

# The API the manifests are written for and validated against (//common:kubernetes_test):
# Kubernetes 1.34 and JobSet v0.12.0 (third_party/jobset/jobset_schema.json).
KUBERNETES_VERSION = "1.34"
JOBSET_API_VERSION = "jobset.x-k8s.io/v1alpha2"
JOBSET_RELEASE = "v0.12.0"

# The pod's index in its Indexed Job, from the annotation the Job controller sets;
# `$(JOB_COMPLETION_INDEX)` in a container's args expands to it.
INDEX_ENV = "JOB_COMPLETION_INDEX"
INDEX_ANNOTATION = "batch.kubernetes.io/job-completion-index"
# How many times the JobSet restarts after a failure before it gives up.
DEFAULT_MAX_RESTARTS = 3
# The Kubernetes service account the pods run as; bound to a Google service account
# with access to the bucket (Workload Identity).
DEFAULT_SERVICE_ACCOUNT = "gemma4-toolkit"
# What a training pod's SIGTERM (a preempted or drained node) leaves it to finish its
# step and save a checkpoint; then it exits with PREEMPTED_EXIT_CODE, so that its Job
# fails and the JobSet restarts the run from that checkpoint.
TRAINING_GRACE_S = 300
PREEMPTED_EXIT_CODE = 143
# One slice per node pool: the pods of a multi-host TPU JobSet land on one pool's
# nodes, which share the slice's interconnect.
EXCLUSIVE_TOPOLOGY = {"alpha.jobset.sigs.k8s.io/exclusive-topology": "cloud.google.com/gke-nodepool"}
APP_LABEL = "app.kubernetes.io/name"
APP = "gemma4-toolkit"
_DIGEST = re.compile(r"^[a-z0-9][a-z0-9._/:-]*@sha256:[0-9a-f]{64}$")
_REPOSITORY = re.compile(r"^[a-z0-9][a-z0-9._-]*(:[0-9]+)?(/[a-z0-9][a-z0-9._-]*)+$")
_NAME = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
# A JobSet pod's host name is NAME-REPLICATED_JOB-JOB_INDEX-POD_INDEX, at most 63
# characters: this leaves room for the replicated job's name and both indices.
_MAX_NAME = 40


class ManifestError(cli.UserError):
    pass


class Flags:
    """The flags every `k8s` binary takes (define them once, at import)."""

    def __init__(self, component, job):
        self.repository = flags.DEFINE_string(
            "repository", None, "Where the stage's image was pushed (HOST/PATH, as given to "
            "its push_* target): the manifests name the image Bazel built there by digest.")
        self.image = flags.DEFINE_string(
            "image", None, "The image as REPOSITORY@sha256:DIGEST, instead of --repository "
            "and the digest of the image built here.")
        self.name = flags.DEFINE_string(
            "name", None, f"Name of the {'JobSet' if job else 'Deployment and Service'} "
            f"(default: {component}-, then the last part of --workdir or --model).")
        self.service_account = flags.DEFINE_string(
            "service_account", DEFAULT_SERVICE_ACCOUNT, "Kubernetes service account of the "
            "pods, bound by Workload Identity to a Google service account that can use the "
            "bucket.")
        self.out = flags.DEFINE_string("out", None, "Write the manifests to this file (or "
                                       "gs:// URL) instead of printing them.")
        self.hf_token_secret = flags.DEFINE_string(
            "hf_token_secret", "hf-token", "The Secret whose key `token` holds HF_TOKEN, for "
            "a gated Hub model (optional: the pods start without it).")
        if job:
            self.workdir = flags.DEFINE_string(
                "workdir", None, "The run directory, a gs://BUCKET/... URL (pods keep no "
                "disk; every host and every restart shares it).")
            self.max_restarts = flags.DEFINE_integer(
                "max_restarts", DEFAULT_MAX_RESTARTS, "Restarts of the whole job after a "
                "pod fails (a lost host, a preempted node) before it gives up; each resumes "
                "from the last checkpoint.", lower_bound=0)


def check_name(name, what="--name"):
    """A DNS-1035 label short enough for the pod host names built from it."""
    if not _NAME.match(name or "") or len(name) > _MAX_NAME:
        raise ManifestError(
            f"{what}={name!r} is not a usable Kubernetes name: lower-case letters, digits "
            f"and '-', starting with a letter, at most {_MAX_NAME} characters")
    return name


def name_from(path, prefix):
    """A default name: `prefix` and the last part of `path`, made a DNS label."""
    tail = re.sub(r"[^a-z0-9-]+", "-", os.path.basename(path.rstrip("/")).lower()).strip("-")
    return f"{prefix}-{tail}"[:_MAX_NAME].rstrip("-") if tail else prefix


def require_bucket(workdir, hosts):
    """Pods keep no disk between restarts and hosts share none: a run directory on
    Kubernetes is a gs:// URL (mounted with Cloud Storage FUSE where a stack needs a
    file system)."""
    if not storage.is_url(workdir):
        raise ManifestError(
            f"--workdir={workdir} is a local folder: a pod's disk is gone when it restarts"
            + (f" and the run's {hosts} hosts share none" if hosts > 1 else "")
            + ", so the job could never resume. Use a gs://BUCKET/... URL")
    return storage.check_url(workdir)


def config_args(argv, stack_configs):
    """The pod's `--config=FILE` and `--config.FIELD=VALUE` flags: those of this command
    line (`argv`), in order. The image holds the configs of `stack_configs` only: a
    config file elsewhere is refused, naming where to put it."""
    value = config_cli.DEFAULT_CONFIG
    overrides = []
    for i, arg in enumerate(argv):
        if arg == "--config" and i + 1 < len(argv):
            value = argv[i + 1]
        elif arg.startswith("--config="):
            value = arg.partition("=")[2]
        elif re.match(r"^--(no)?config\.", arg):
            if "=" not in arg and i + 1 < len(argv) and not argv[i + 1].startswith("-"):
                raise ManifestError(f"write {arg}={argv[i + 1]}: the pods get each override "
                                    "as one argument")
            overrides.append(arg)
    if "/" in value.partition(":")[0]:
        raise ManifestError(
            f"--config={value}: the image holds the configs in {stack_configs}/ only. "
            f"Add yours there, build and push the image again, and name it by file name")
    return [f"--config={value}", *overrides]


def image_reference(image, repository, target):
    """`REPOSITORY@sha256:DIGEST` of the image the pods run.

    `image`: given whole (--image), checked for its form. Else the digest of the
    OCI layout Bazel last built for the label `target` (under bazel-bin in the
    workspace `bazel run` started in) at `repository` (where push_* put it).
    Returns (reference, where the digest came from)."""
    if image:
        if not _DIGEST.match(image):
            raise ManifestError(f"--image={image}: expected REPOSITORY@sha256:DIGEST "
                                "(a tag can move; the manifests name images by digest)")
        return image, "--image"
    package, _, name = target.lstrip("/").partition(":")
    push = f"//{package}:push_{name}"
    if not repository:
        raise ManifestError(
            f"give --repository=HOST/PATH, where `bazel run {push} -- --repository=HOST/PATH` "
            "pushed the image, or --image=HOST/PATH@sha256:DIGEST")
    if not _REPOSITORY.match(repository):
        raise ManifestError(f"--repository={repository}: expected HOST/PATH, without a tag "
                            "or digest (e.g. us-docker.pkg.dev/PROJECT/REPO/train)")
    workspace = os.environ.get("BUILD_WORKSPACE_DIRECTORY") or os.getcwd()
    layout = os.path.join(workspace, "bazel-bin", package, name)
    index = os.path.join(layout, "index.json")
    try:
        with open(index) as f:
            manifests = json.load(f)["manifests"]
        (entry,) = manifests
        digest = entry["digest"]
    except FileNotFoundError:
        raise ManifestError(
            f"no image built at {layout}: run `bazel run {push} -- --repository="
            f"{repository}` first (it builds and pushes the image), or give "
            f"--image={repository}@sha256:DIGEST") from None
    except (ValueError, KeyError, TypeError) as e:
        raise ManifestError(f"{index}: not an OCI layout of one image ({e})") from None
    if not re.match(r"^sha256:[0-9a-f]{64}$", str(digest)):
        raise ManifestError(f"{index}: not an image digest: {digest!r}")
    built = datetime.datetime.fromtimestamp(os.path.getmtime(index), datetime.timezone.utc)
    return f"{repository}@{digest}", f"{target}, built {built:%Y-%m-%d %H:%M} UTC"


def placement(machine):
    """(node selector, resource limits) of one pod on one host of `machine`."""
    if machine.platform == "tpu":
        return ({"cloud.google.com/gke-tpu-accelerator": machine.gke_accelerator,
                 "cloud.google.com/gke-tpu-topology": machine.gke_topology},
                {"google.com/tpu": machine.chips_per_host})
    if machine.platform == "gpu":
        return ({"cloud.google.com/gke-accelerator": machine.gke_accelerator},
                {"nvidia.com/gpu": machine.chips_per_host})
    return {}, {}


def env_value(name, value):
    return {"name": name, "value": str(value)}


def hf_token(secret):
    """HF_TOKEN from `secret`'s key `token`, if the Secret exists (a gated Hub model)."""
    return env_from_secret("HF_TOKEN", secret, "token", optional=True)


def env_from_secret(name, secret, key, optional=False):
    ref = {"name": secret, "key": key}
    if optional:
        ref["optional"] = True
    return {"name": name, "valueFrom": {"secretKeyRef": ref}}


def shared_memory():
    """(volume, mount): /dev/shm in memory; a container's default 64 MB stops NCCL
    and vLLM's tensor-parallel workers."""
    return ({"name": "dshm", "emptyDir": {"medium": "Memory"}},
            {"name": "dshm", "mountPath": "/dev/shm"})


def container(name, image, command, args, machine, env=(), ports=(), mounts=(), **extra):
    _, limits = placement(machine)
    spec = {"name": name, "image": image, "imagePullPolicy": "IfNotPresent",
            "command": list(command), "args": list(args)}
    if env:
        spec["env"] = list(env)
    if ports:
        spec["ports"] = list(ports)
    if limits:
        spec["resources"] = {"limits": dict(limits), "requests": dict(limits)}
    if mounts:
        spec["volumeMounts"] = list(mounts)
    spec.update(extra)
    return spec


def pod_spec(machine, containers, service_account, volumes=(), restart_policy=None, **extra):
    selector, _ = placement(machine)
    spec = {"serviceAccountName": service_account, "containers": list(containers)}
    if restart_policy:
        spec["restartPolicy"] = restart_policy
    if selector:
        spec["nodeSelector"] = selector
    if machine.platform == "gpu":  # GKE taints GPU nodes; only pods that tolerate it land there
        spec["tolerations"] = [{"key": "nvidia.com/gpu", "operator": "Exists",
                                "effect": "NoSchedule"}]
    if volumes:
        spec["volumes"] = list(volumes)
    spec.update(extra)
    return spec


def labels(component, instance):
    return {APP_LABEL: APP, "app.kubernetes.io/component": component,
            "app.kubernetes.io/instance": instance}


def coordinator_host(name, replicated_job):
    """Pod 0's DNS name: JobSet names pods NAME-JOB-JOBINDEX-PODINDEX under a headless
    service named after the JobSet."""
    return f"{name}-{replicated_job}-0-0.{name}"


def jobset(name, component, replicated_job, pods, pod, max_restarts, annotations=None,
           jobset_annotations=None):
    """A JobSet of `pods` pods running `pod` (a pod spec), each told its index in
    INDEX_ENV, restarted together up to `max_restarts` times. `annotations` go on
    the pods, `jobset_annotations` on the JobSet."""
    template_metadata = {"labels": labels(component, name)}
    if annotations:
        template_metadata["annotations"] = dict(annotations)
    pod = copy.deepcopy(pod)
    for spec in pod["containers"]:
        spec.setdefault("env", []).insert(0, {
            "name": INDEX_ENV,
            "valueFrom": {"fieldRef": {"fieldPath": f"metadata.annotations['{INDEX_ANNOTATION}']"}}})
    metadata = {"name": name, "labels": labels(component, name)}
    if jobset_annotations:
        metadata["annotations"] = dict(jobset_annotations)
    return {
        "apiVersion": JOBSET_API_VERSION,
        "kind": "JobSet",
        "metadata": metadata,
        "spec": {
            # Pods reach each other by NAME-JOB-0-0.NAME (coordinator_host), also
            # before they are ready.
            "network": {"enableDNSHostnames": True, "publishNotReadyAddresses": True},
            "failurePolicy": {"maxRestarts": max_restarts},
            "successPolicy": {"operator": "All"},
            "replicatedJobs": [{
                "name": replicated_job,
                "replicas": 1,
                "template": {"spec": {
                    "parallelism": pods,
                    "completions": pods,
                    "completionMode": "Indexed",
                    "backoffLimit": 0,
                    "template": {"metadata": template_metadata,
                                 "spec": dict(pod, restartPolicy="Never")},
                }},
            }],
        },
    }


def job_header(name, binary, machine, pods, source, max_restarts, workdir):
    """The comment on top of a JobSet: what it runs, how it restarts, what it needs."""
    return [f"JobSet {name}: {binary} on {machine}, {pods} pod(s), image from {source}.",
            f"A failed pod restarts all {pods} (at most {max_restarts} times); the run "
            f"resumes from its last checkpoint in {workdir}.",
            "Needs JobSet in the cluster: kubectl apply --server-side -f https://github.com/"
            f"kubernetes-sigs/jobset/releases/download/{JOBSET_RELEASE}/manifests.yaml"]


def job_main(argv, config, options, image_target, binary, manifests):
    """The main of a training stack's `k8s` binary: `manifests(config, argv, workdir,
    image, name, options)` -> ([documents], pods), written."""
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    workdir = options.workdir.value
    if not workdir:
        raise ManifestError("give --workdir=gs://BUCKET/PATH: the run directory")
    name = check_name(options.name.value or name_from(workdir, "sft"))
    image, source = image_reference(options.image.value, options.repository.value,
                                    image_target)
    documents, pods = manifests(config, sys.argv[1:], workdir, image, name, options)
    write(dump(documents, job_header(name, binary, config.machine, pods, source,
                                     options.max_restarts.value, workdir)), options.out.value)


class _Dumper(yaml.SafeDumper):
    """Writes a value used twice (the labels) out twice, not as a YAML alias."""

    def ignore_aliases(self, data):
        return True


def training_jobset(name, component, replicated_job, machine, pods, image, command, args,
                    port, options, volumes=(), mounts=(), annotations=None,
                    jobset_annotations=None):
    """The JobSet of a training stack: `pods` pods of `machine` running `command`
    `args` in `image`, given a SIGTERM's time to save and the status that makes the
    JobSet restart them after it, HF_TOKEN for a gated base, and `port` (name, number).
    `options`: the binary's Flags."""
    trainer = container(
        "sft", image, command, [*args, f"--config.preempted_exit_code={PREEMPTED_EXIT_CODE}"],
        machine, env=[hf_token(options.hf_token_secret.value)], mounts=mounts,
        ports=[{"name": port[0], "containerPort": port[1]}])
    pod = pod_spec(machine, [trainer], options.service_account.value, volumes=volumes,
                   terminationGracePeriodSeconds=TRAINING_GRACE_S)
    return jobset(name, component, replicated_job, pods, pod, options.max_restarts.value,
                  annotations, jobset_annotations)


def dump(documents, header):
    """YAML documents, after a comment block saying what produced them."""
    comment = "".join(f"# {line}\n" if line else "#\n" for line in header)
    return comment + yaml.dump_all(list(documents), Dumper=_Dumper, sort_keys=False,
                                   width=100)


def write(text, out):
    """Prints `text`, or writes it whole to `out` (a file or a gs:// URL) and says so."""
    if not out:
        print(text, end="")
        return
    path = config_cli.user_path(out)
    storage.write_bytes(path, text.encode())
    print(f"wrote {path}")


def machine_of(config):
    return machines.get(config.machine)
