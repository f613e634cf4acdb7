"""Rendered manifests checked against pinned schemas, as strictly as `kubectl apply
--validate=strict` would check them (for tests).

Kubernetes' own kinds: the API's JSON schemas of kubernetes.KUBERNETES_VERSION
as kubernetes-validate packages them (strict: an unknown field is an error).
A JobSet: the schema of JobSet's CRD at kubernetes.JOBSET_RELEASE
(third_party/jobset/jobset_schema.json, tools/jobset_schema.py), made strict
the same way (the API server would drop an unknown field silently), and its
metadata and each replicated Job's template checked as Kubernetes' own.
"""

import copy
import functools
import json
import os
import subprocess

import jsonschema
import kubernetes_validate
import yaml

from common import binaries
from common import kubernetes

JOBSET_SCHEMA = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir,
                             "third_party", "jobset", "jobset_schema.json")


class SchemaError(Exception):
    pass


def _strict(node):
    """The schema with `additionalProperties: false` on every object that lists its
    properties and does not keep unknown fields."""
    if isinstance(node, dict):
        node = {k: _strict(v) for k, v in node.items()}
        if ("properties" in node and "additionalProperties" not in node
                and not node.get("x-kubernetes-preserve-unknown-fields")):
            node["additionalProperties"] = False
        return node
    if isinstance(node, list):
        return [_strict(v) for v in node]
    return node


@functools.lru_cache(maxsize=1)
def jobset_schema():
    with open(JOBSET_SCHEMA) as f:
        pinned = json.load(f)
    if pinned["release"] != kubernetes.JOBSET_RELEASE:
        raise SchemaError(f"{JOBSET_SCHEMA} is JobSet {pinned['release']}; the manifests are "
                          f"written for {kubernetes.JOBSET_RELEASE}")
    return pinned


def _kubernetes(document, where):
    try:
        kubernetes_validate.validate(document, kubernetes.KUBERNETES_VERSION, strict=True)
    except jsonschema.ValidationError as e:
        path = ".".join(str(p) for p in e.absolute_path)
        raise SchemaError(f"{where}: {path}: {e.message}") from None
    except kubernetes_validate.SchemaNotFoundError as e:
        raise SchemaError(f"{where}: {e}") from None


def validate(document):
    """Raises SchemaError naming the kind, the field path and what is wrong."""
    kind = document.get("kind")
    where = f"{kind} {document.get('metadata', {}).get('name')}"
    if kind != "JobSet":
        _kubernetes(document, where)
        return
    pinned = jobset_schema()
    if document.get("apiVersion") != pinned["apiVersion"]:
        raise SchemaError(f"{where}: apiVersion {document.get('apiVersion')}, not "
                          f"{pinned['apiVersion']}")
    errors = sorted(jsonschema.Draft7Validator(_strict(pinned["openAPIV3Schema"]))
                    .iter_errors(document), key=lambda e: list(e.absolute_path))
    if errors:
        path = ".".join(str(p) for p in errors[0].absolute_path)
        raise SchemaError(f"{where}: {path}: {errors[0].message}")
    _kubernetes({"apiVersion": "v1", "kind": "ConfigMap",
                 "metadata": copy.deepcopy(document["metadata"])}, f"{where} metadata")
    for job in document["spec"]["replicatedJobs"]:
        _kubernetes({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": job["name"]},
                     "spec": copy.deepcopy(job["template"]["spec"])},
                    f"{where} replicated job {job['name']}")


def validate_text(text):
    """Every YAML document of `text`, validated; returns them."""
    documents = [d for d in yaml.safe_load_all(text) if d is not None]
    if not documents:
        raise SchemaError("no manifest in the text")
    for document in documents:
        if not isinstance(document, dict):
            raise SchemaError(f"not a manifest: {str(document)[:80]!r}")
        validate(document)
    return documents


def render(label, *args, env=None):
    """Runs the `k8s` binary `label` (in the caller's runfiles) with `args`; returns
    (the finished process, the manifests it printed, validated; None when it failed
    or wrote them to --out)."""
    done = subprocess.run(binaries.command(label, *args), env=binaries.child_env(env),
                          capture_output=True, text=True, timeout=300)
    printed = done.returncode == 0 and not any(a.startswith("--out=") for a in args)
    return done, validate_text(done.stdout) if printed else None
