"""A rendered JobSet's pods as processes on this machine: a GKE run rehearsed locally.

    rehearsal = kubernetes_rehearsal.Rehearsal(
        jobset, {"training.tpu.sft": "//training/tpu:sft"}, env=extra_env)
    result = rehearsal.run(timeout_s=900, watch=kill_a_pod_when_ready)

It plays the Job and JobSet controllers and the kubelet for the fields our
manifests use, so that what runs is what the manifest says:
  * each pod of each replicated Job starts as one process: the container's
    `python3 -m MODULE` as that module's Bazel binary (this checkout's, not
    the image's), with the container's args after Kubernetes' `$(VAR)`
    expansion and the container's env (values; the downward API's job
    completion index and JobSet restart attempt; Secrets from `secrets`),
    on top of `env` (what the cluster would give instead: credentials, a
    storage emulator);
  * pods share this machine's network, where on Kubernetes each has its own:
    every pod host name (NAME-JOB-JOBINDEX-PODINDEX.SUBDOMAIN) maps to
    127.0.0.1, and each HOST:PORT in the args to a free port of its own;
  * restart policy: a pod that exits non-zero fails its Job (backoffLimit 0);
    the JobSet then stops every pod (SIGTERM, SIGKILL after the grace period)
    and starts them all again, counting a restart, up to
    failurePolicy.maxRestarts; it succeeds when every pod exits 0
    (successPolicy All).
"""

import dataclasses
import os
import re
import signal
import socket
import subprocess
import time

from common import binaries
from common import kubernetes

RESTART_ATTEMPT_ANNOTATION = "jobset.sigs.k8s.io/restart-attempt"
GRACE_S = 10  # what Kubernetes waits after SIGTERM before SIGKILL (30 s by default)
_VAR = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)")


class RehearsalError(Exception):
    pass


@dataclasses.dataclass
class Pod:
    host: str  # NAME-JOB-JOBINDEX-PODINDEX
    index: int  # the job completion index
    process: subprocess.Popen
    log: str

    def output(self):
        with open(self.log, errors="replace") as f:
            return f.read()


@dataclasses.dataclass
class Result:
    succeeded: bool
    restarts: int
    # Per attempt, each pod's exit code (negative: the signal that ended it) and log.
    exit_codes: list = dataclasses.field(default_factory=list)
    logs: list = dataclasses.field(default_factory=list)


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _expand(text, env):
    """Kubernetes' $(VAR) expansion: a variable the container defines is replaced,
    any other reference is left as written."""
    return _VAR.sub(lambda m: env.get(m.group(1), m.group(0)), text)


class Rehearsal:

    def __init__(self, jobset, binaries_by_module, env=None, secrets=None, logdir="."):
        if jobset.get("kind") != "JobSet":
            raise RehearsalError(f"not a JobSet: {jobset.get('kind')}")
        self.jobset = jobset
        self.name = jobset["metadata"]["name"]
        spec = jobset["spec"]
        self.subdomain = spec.get("network", {}).get("subdomain") or self.name
        self.max_restarts = spec.get("failurePolicy", {}).get("maxRestarts", 0)
        self.binaries = binaries_by_module
        self.env = dict(env or {})
        self.secrets = dict(secrets or {})
        self.logdir = logdir

    def _pods(self):
        """(host name, job completion index, pod template) of every pod."""
        for job in self.jobset["spec"]["replicatedJobs"]:
            spec = job["template"]["spec"]
            if spec.get("backoffLimit", 6) != 0 or spec.get("completionMode") != "Indexed":
                raise RehearsalError("rehearsed: Indexed Jobs with backoffLimit 0 only")
            for job_index in range(job.get("replicas", 1)):
                for index in range(spec["parallelism"]):
                    yield f"{self.name}-{job['name']}-{job_index}-{index}", index, spec["template"]

    def _value(self, entry, index, attempt):
        if "value" in entry:
            return entry["value"]
        source = entry.get("valueFrom", {})
        field = source.get("fieldRef", {}).get("fieldPath", "")
        if field == f"metadata.annotations['{kubernetes.INDEX_ANNOTATION}']":
            return str(index)
        if field == f"metadata.annotations['{RESTART_ATTEMPT_ANNOTATION}']":
            return str(attempt)
        secret = source.get("secretKeyRef")
        if secret:
            value = self.secrets.get((secret["name"], secret["key"]))
            if value is None and not secret.get("optional"):
                raise RehearsalError(f"no Secret {secret['name']}/{secret['key']} given")
            return value
        raise RehearsalError(f"env {entry['name']}: source not rehearsed: {source}")

    def _command(self, container, env, addresses):
        command = container.get("command", [])
        if len(command) != 3 or command[:2] != ["python3", "-m"]:
            raise RehearsalError(f"rehearsed: `python3 -m MODULE` commands only, not {command}")
        module = command[2]
        if module not in self.binaries:
            raise RehearsalError(f"no binary given for module {module}")
        args = []
        for arg in container.get("args", []):
            arg = _expand(arg, env)
            for address, local in addresses.items():
                arg = arg.replace(address, local)
            args.append(arg)
        return binaries.command(self.binaries[module], *args)

    def _start(self, attempt):
        pods = list(self._pods())
        hosts = [f"{host}.{self.subdomain}" for host, _, _ in pods]
        addresses = {}
        for _, _, template in pods:
            for container in template["spec"]["containers"]:
                for arg in container.get("args", []):
                    for host in hosts:
                        for port in re.findall(rf"{re.escape(host)}:(\d+)", arg):
                            addresses.setdefault(f"{host}:{port}", f"127.0.0.1:{_free_port()}")
        started = []
        for host, index, template in pods:
            (container,) = template["spec"]["containers"]
            env = {}
            for entry in container.get("env", []):
                value = self._value(entry, index, attempt)
                if value is not None:
                    env[entry["name"]] = _expand(value, env)
            log = os.path.join(self.logdir, f"{host}.attempt{attempt}.log")
            with open(log, "w") as out:
                process = subprocess.Popen(
                    self._command(container, env, addresses),
                    env=binaries.child_env({**binaries.child_env(), **self.env, **env}),
                    stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
            started.append(Pod(host, index, process, log))
        return started

    @staticmethod
    def _stop(pods):
        for pod in pods:
            if pod.process.poll() is None:
                os.killpg(pod.process.pid, signal.SIGTERM)
        deadline = time.monotonic() + GRACE_S
        for pod in pods:
            try:
                pod.process.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(pod.process.pid, signal.SIGKILL)
                pod.process.wait()

    def run(self, timeout_s, watch=None, poll_s=0.1):
        """Runs the JobSet to success or failure. `watch(attempt, pods)` is called
        every `poll_s` while pods run (a test kills one there)."""
        result = Result(succeeded=False, restarts=0)
        deadline = time.monotonic() + timeout_s
        attempt = 0
        while True:
            pods = self._start(attempt)
            try:
                while True:
                    codes = [pod.process.poll() for pod in pods]
                    if any(code not in (None, 0) for code in codes) or None not in codes:
                        break
                    if time.monotonic() > deadline:
                        raise RehearsalError(f"the JobSet ran past {timeout_s} s")
                    if watch:
                        watch(attempt, pods)
                    time.sleep(poll_s)
            finally:
                self._stop(pods)  # a failed pod's Job failed: JobSet deletes every pod
            result.exit_codes.append([pod.process.returncode for pod in pods])
            result.logs.append([pod.output() for pod in pods])
            if all(code == 0 for code in result.exit_codes[-1]):
                result.succeeded = True
                return result
            if result.restarts >= self.max_restarts:
                return result
            result.restarts += 1
            attempt += 1
