"""The embedded sample data set: CodeV-R1 schema, real tasks, Verilog that compiles."""

import os
import re
import subprocess
import tempfile

from absl.testing import absltest

from common import pinned
from data import codev
from data import sources

_FENCED = re.compile(r"```verilog\n(.*?)```", re.DOTALL)


class SampleDataTest(absltest.TestCase):

    def test_rows(self):
        items = list(codev.read_rows(sources.SAMPLE))
        self.assertGreaterEqual(len(items), 32)
        for item in items:
            self.assertIsInstance(item, codev.Row, item)
            self.assertIn("<think>", item.response)
            reasoning, answer = codev.split_response(item.response)
            self.assertTrue(reasoning, item.number)
            self.assertTrue(_FENCED.search(answer), item.number)

    def test_every_answer_compiles(self):
        iverilog = pinned.tool("iverilog")  # the pinned Icarus Verilog 11, never the host's
        failures = []
        for row in codev.read_rows(sources.SAMPLE):
            code = _FENCED.search(codev.split_response(row.response)[1]).group(1)
            with tempfile.TemporaryDirectory() as tmp:
                source = os.path.join(tmp, "design.sv")
                with open(source, "w") as f:
                    f.write(code)
                result = subprocess.run(
                    [iverilog, "-g2012", "-o", os.path.join(tmp, "a.out"), source],
                    capture_output=True, text=True, timeout=60)
                if result.returncode:
                    failures.append((row.number, result.stderr[:500]))
        self.assertEqual(failures, [])


if __name__ == "__main__":
    absltest.main()
