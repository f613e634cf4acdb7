"""Prints the Deployment and Service that serve a model with vLLM on GKE.

    bazel run //serving:push_tpu_image -- --repository=us-docker.pkg.dev/P/R/serve-tpu
    kubectl create secret generic vllm-api-key --from-literal=api-key=$(openssl rand -hex 24)
    bazel run //serving:k8s -- --config=v6e8.py --model=gs://B/export/merged \\
        --repository=us-docker.pkg.dev/P/R/serve-tpu > serve.yaml
    kubectl apply -f serve.yaml

The pods run //serving:serve in the serving image of the config's platform
(TPU: //serving:tpu_image, GPU: //serving:gpu_image), by digest, on the
machine's node pool, listening on all addresses with the API key from a
Secret. The model is the export's folder in a bucket (copied to the pod's disk
at start; vLLM reads local folders) or a Hub id. vLLM's /health answers the
probes: the start-up probe waits for the download and the compile
(config.startup_timeout_s), then readiness and liveness take over. The
Service gives the replicas one address in the cluster (--service_type for one
outside it).
"""

import math
import re
import sys

from absl import app
from absl import flags

from common import cli
from common import config_cli
from common import kubernetes
from common import storage

_CONFIG = config_cli.define_config_flag(__file__)
_MODEL = flags.DEFINE_string("model", None, "What to serve: the export's folder in a bucket "
                             "(gs://BUCKET/.../merged) or a Hub id.")
_REPLICAS = flags.DEFINE_integer("replicas", 1, "Serving pods, one per machine.",
                                 lower_bound=1)
_API_KEY_SECRET = flags.DEFINE_string(
    "api_key_secret", "vllm-api-key", "The Secret whose key `api-key` holds the server's API "
    "key (kubectl create secret generic NAME --from-literal=api-key=...).")
_SERVICE_TYPE = flags.DEFINE_enum("service_type", "ClusterIP",
                                  ["ClusterIP", "LoadBalancer", "NodePort"],
                                  "How the Service is reached.")
_DOWNLOAD_S = flags.DEFINE_integer(
    "download_timeout_s", 1800, "Start-up time allowed for copying the model to the pod "
    "before vLLM starts (62 GB at 0.2 GB/s: ~5 min).", lower_bound=0)
_FLAGS = kubernetes.Flags("serve", job=False)

IMAGES = {"tpu": "//serving:tpu_image", "gpu": "//serving:gpu_image"}
COMMAND = ("python3", "-m", "serving.serve")
PORT = 8000  # vLLM's default
HEALTH = "/health"  # vLLM's health endpoint; it needs no API key
# The pod's scratch disk: the model copied from the bucket, the Hub cache, server.json.
SCRATCH = "/scratch"
PROBE_PERIOD_S = 10
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


def check_model(model):
    if not model:
        raise kubernetes.ManifestError("give --model=gs://BUCKET/PATH (the export's folder) "
                                       "or a Hub id")
    if storage.is_url(model):
        return storage.check_url(model)
    if not _HUB_ID.match(model) or model.startswith(".") or storage.exists(
            config_cli.user_path(model)):
        raise kubernetes.ManifestError(
            f"--model={model}: a pod cannot read this machine's files. Copy the export to a "
            f"bucket (gsutil -m cp -r {model} gs://BUCKET/...) and give its gs:// URL, or "
            "give a Hub id")
    return model


def _probe(failures, period=PROBE_PERIOD_S):
    return {"httpGet": {"path": HEALTH, "port": "http"}, "periodSeconds": period,
            "failureThreshold": failures, "timeoutSeconds": 5}


def serving_machine(config):
    """The config's machine, if a pod of one of our serving images can serve on it."""
    machine = kubernetes.machine_of(config)
    if machine.platform not in IMAGES:
        raise kubernetes.ManifestError(
            f"{machine.name}: the serving images are for TPU and GPU machines; a CPU server "
            "runs where it is started (bazel run //serving:serve)")
    if machine.hosts > 1:
        raise kubernetes.ManifestError(
            f"{machine.name} has {machine.hosts} hosts; a server runs on one (vLLM's "
            "multi-host serving is not set up here)")
    return machine


def manifests(config, argv, model, image, name, replicas, service_account, api_key_secret,
              hf_token_secret, service_type, download_s):
    machine = serving_machine(config)
    model = check_model(model)
    if not config.api_key_env:
        raise kubernetes.ManifestError(
            "config.api_key_env is empty: a server in a cluster listens beyond loopback and "
            "needs an API key")
    args = [*kubernetes.config_args(argv, "serving/configs"), "--config.runtime=image",
            f"--model={model}", "--host=0.0.0.0", f"--port={PORT}",
            f"--run_dir={SCRATCH}/run"]
    env = [kubernetes.env_from_secret(config.api_key_env, api_key_secret, "api-key"),
           kubernetes.env_value(storage.CACHE_ENV, f"{SCRATCH}/cache"),
           kubernetes.env_value("HF_HOME", f"{SCRATCH}/huggingface")]
    if not storage.is_url(model):
        env.append(kubernetes.hf_token(hf_token_secret))
    shm_volume, shm_mount = kubernetes.shared_memory()
    scratch = {"name": "scratch", "emptyDir": {}}
    startup = math.ceil((config.startup_timeout_s + download_s) / PROBE_PERIOD_S)
    server = kubernetes.container(
        "vllm", image, COMMAND, args, machine, env=env,
        ports=[{"name": "http", "containerPort": PORT}],
        mounts=[shm_mount, {"name": "scratch", "mountPath": SCRATCH}],
        startupProbe=_probe(startup), readinessProbe=_probe(3),
        livenessProbe=_probe(3, period=30))
    labels = kubernetes.labels("serve", name)
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            # No spare accelerator node to surge onto: replace one pod at a time.
            "strategy": {"type": "RollingUpdate",
                         "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}},
            "template": {
                "metadata": {"labels": labels},
                "spec": kubernetes.pod_spec(machine, [server], service_account,
                                            volumes=[shm_volume, scratch]),
            },
        },
    }
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "labels": labels},
        "spec": {"type": service_type, "selector": labels,
                 "ports": [{"name": "http", "port": PORT, "targetPort": "http"}]},
    }
    return [deployment, service]


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    config = _CONFIG.value
    model = check_model(_MODEL.value)
    name = kubernetes.check_name(_FLAGS.name.value or kubernetes.name_from(model, "serve"))
    image, source = kubernetes.image_reference(
        _FLAGS.image.value, _FLAGS.repository.value, IMAGES[serving_machine(config).platform])
    documents = manifests(config, sys.argv[1:], model, image, name, _REPLICAS.value,
                          _FLAGS.service_account.value, _API_KEY_SECRET.value,
                          _FLAGS.hf_token_secret.value, _SERVICE_TYPE.value, _DOWNLOAD_S.value)
    kubernetes.write(kubernetes.dump(documents, [
        f"Deployment and Service {name}: //serving:serve on {config.machine}, "
        f"{_REPLICAS.value} replica(s), {model}, image from {source}.",
        f"API key: Secret {_API_KEY_SECRET.value}, key api-key; clients send it as a Bearer "
        f"token to http://{name}:{PORT}/v1.",
    ]), _FLAGS.out.value)


if __name__ == "__main__":
    cli.run(main)
