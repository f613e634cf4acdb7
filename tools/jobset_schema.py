"""Writes the JobSet schema the manifest tests validate against, from JobSet's CRD.

    bazel run //tools:jobset_schema -- CRD.yaml v0.12.0

CRD.yaml is config/components/crd/bases/jobset.x-k8s.io_jobsets.yaml of
kubernetes-sigs/jobset at the release tag given. Kept: the served version's
openAPIV3Schema without its `description` fields (the structure the API server
checks, not JobSet's prose), with the release and the CRD file's sha256, in
third_party/jobset/jobset_schema.json. Moving to another release: run it on
that release's file and run //common:kubernetes_test.
"""

import hashlib
import json
import os
import sys

import yaml

OUT = os.path.join("third_party", "jobset", "jobset_schema.json")  # in the checkout
SOURCE = "kubernetes-sigs/jobset config/components/crd/bases/jobset.x-k8s.io_jobsets.yaml"


def _without_descriptions(node):
    if isinstance(node, dict):
        # A description is a string; a property that is named "description" is a schema.
        return {k: _without_descriptions(v) for k, v in node.items()
                if not (k == "description" and isinstance(v, str))}
    if isinstance(node, list):
        return [_without_descriptions(v) for v in node]
    return node


def schema(crd_bytes, release):
    crd = yaml.safe_load(crd_bytes)
    served = [v for v in crd["spec"]["versions"] if v.get("served") and v.get("storage")]
    if len(served) != 1:
        raise SystemExit(f"error: expected one served storage version, found {len(served)}")
    return {"release": release, "source": SOURCE,
            "source_sha256": hashlib.sha256(crd_bytes).hexdigest(),
            "apiVersion": f"{crd['spec']['group']}/{served[0]['name']}",
            "kind": crd["spec"]["names"]["kind"],
            "openAPIV3Schema": _without_descriptions(served[0]["schema"]["openAPIV3Schema"])}


def main(argv):
    if len(argv) != 3:
        raise SystemExit("usage: " + __doc__.strip().splitlines()[2].strip())
    # `bazel run` starts us in the runfiles; the paths the user typed and the
    # checkout are where the command was run.
    workspace = os.environ.get("BUILD_WORKSPACE_DIRECTORY", os.getcwd())
    crd = os.path.join(os.environ.get("BUILD_WORKING_DIRECTORY", os.getcwd()), argv[1])
    with open(crd, "rb") as f:
        result = schema(f.read(), argv[2])
    out = os.path.join(workspace, OUT)
    with open(out + ".tmp", "w") as f:
        json.dump(result, f, indent=1, sort_keys=True)
        f.write("\n")
    os.replace(out + ".tmp", out)
    print(f"wrote {out}: {result['apiVersion']} {result['kind']} {result['release']}")


if __name__ == "__main__":
    main(sys.argv)
