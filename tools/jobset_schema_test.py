"""tools/jobset_schema.py keeps a CRD's structure without its prose, and the
committed schema is one it wrote."""

import hashlib
import json
import os

from absl.testing import absltest

from tools import jobset_schema

_CRD = b"""
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
spec:
  group: jobset.x-k8s.io
  names: {kind: JobSet}
  versions:
  - name: v1alpha1
    served: false
    storage: false
    schema: {openAPIV3Schema: {type: object}}
  - name: v1alpha2
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        description: JobSet is ...
        type: object
        properties:
          spec:
            description: the spec
            type: object
            properties:
              description: {type: string, description: a field named description}
"""


class JobSetSchemaTest(absltest.TestCase):

    def test_structure_without_descriptions(self):
        result = jobset_schema.schema(_CRD, "v9.9.9")
        self.assertEqual((result["apiVersion"], result["kind"], result["release"]),
                         ("jobset.x-k8s.io/v1alpha2", "JobSet", "v9.9.9"))
        self.assertEqual(result["source_sha256"], hashlib.sha256(_CRD).hexdigest())
        # A field that happens to be called `description` is a property, kept as one.
        self.assertEqual(result["openAPIV3Schema"], {
            "type": "object", "properties": {"spec": {"type": "object", "properties": {
                "description": {"type": "string"}}}}})

    def test_the_committed_schema(self):
        path = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir,
                            jobset_schema.OUT)
        with open(path) as f:
            pinned = json.load(f)
        self.assertEqual(pinned["apiVersion"], "jobset.x-k8s.io/v1alpha2")
        self.assertRegex(pinned["source_sha256"], r"^[0-9a-f]{64}$")
        text = json.dumps(pinned["openAPIV3Schema"])
        self.assertIn('"replicatedJobs"', text)
        self.assertIn('"failurePolicy"', text)

        def prose(node):
            if isinstance(node, dict):
                return any(k == "description" and isinstance(v, str) or prose(v)
                           for k, v in node.items())
            return isinstance(node, list) and any(prose(v) for v in node)
        self.assertFalse(prose(pinned["openAPIV3Schema"]))


if __name__ == "__main__":
    absltest.main()
