"""Every program the tree's Python starts by name comes from where the README
promises: the pinned tools (third_party/pinned/) only through common/pinned.py,
the image tests' tools from ./bazelw's install list, the rest from a short list
of what every supported machine has. A test that reaches for a program the host
may lack (as //data:sample_test once took iverilog from PATH, which only a machine
set up by hand had) fails here, where it is written; ./bazelw's PATH guard
(tools/host_guard/) catches at run time what this reading cannot see.
"""

import ast
import os
import re

from absl.testing import absltest

from common import pinned
from common import repo
from tests import build_files

# Where each program a test or binary may start by name comes from.
BASE = "on every machine the README supports (Debian with Python 3.11; the checkout's git)"
BAZELW = "installed by ./bazelw (IMAGE_TEST_TOOLS)"
USER = "on the user's own machine for a real run; no test starts it"
TOOLING = "run by repository tooling by hand, not by a test"
PROVIDED = {
    "du": BASE, "git": BASE,
    "bazel-4": BAZELW, "docker-registry": BAZELW, "skopeo": BAZELW, "umoci": BAZELW,
    "docker": USER,
    "apt-get": TOOLING,
}
_RUNS = {"run", "Popen", "check_output", "check_call", "call"}
_EXECS = re.compile(r"exec[lv]p?e?$")


def started_programs(source):
    """(line, name) of every program `source` (Python) starts by a literal name:
    subprocess calls and os.exec* with a list, a tuple or a string, and
    shutil.which."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
            continue
        owner = node.func.value.id if isinstance(node.func.value, ast.Name) else None
        name = node.func.attr
        if not node.args or not ((owner == "subprocess" and name in _RUNS) or
                                 (owner == "os" and _EXECS.match(name)) or
                                 (owner == "shutil" and name == "which")):
            continue
        first = node.args[0]
        if isinstance(first, (ast.List, ast.Tuple)) and first.elts:
            first = first.elts[0]
        if isinstance(first, ast.Constant) and isinstance(first.value, str):
            program = first.value.split()[0] if first.value.split() else ""
            if program and os.sep not in program:
                found.append((node.lineno, program))
    return found


def problems(files):
    """What `files` ({path: Python source}) start that is not provided as promised."""
    out = []
    for path, source in sorted(files.items()):
        for line, program in started_programs(source):
            if program in pinned.TOOLS:
                out.append(f"{path}:{line}: {program} by name: a pinned tool comes from "
                           f"common.pinned.tool({program!r}), never from the host's PATH")
            elif program not in PROVIDED:
                out.append(f"{path}:{line}: {program} is started by name but nothing "
                           "provides it: pin it (tools/pinned.bzl), install it in "
                           "./bazelw, or list it in PROVIDED with where it comes from")
    return out


class HostToolsTest(absltest.TestCase):

    def setUp(self):
        super().setUp()
        self.root = repo.source_root()

    def _read(self, path):
        with open(os.path.join(self.root, path), encoding="utf-8") as f:
            return f.read()

    def test_the_tree_starts_only_provided_programs(self):
        files = {p: self._read(p) for p in build_files.repository_files(self.root)
                 if p.endswith(".py") and not p.startswith("third_party/")}
        self.assertGreater(len(files), 100)
        self.assertEqual(problems(files), [])

    def test_a_host_dependent_test_is_caught(self):
        source = ('import shutil, subprocess\n'
                  'iverilog = shutil.which("iverilog")\n'
                  'subprocess.run(["vvp", "-n", "a.vvp"])\n'
                  'subprocess.run("chromium --headless x.html", shell=True)\n'
                  'subprocess.run([iverilog, "-V"])\n'
                  'subprocess.run(["/usr/bin/env"])\n')
        found = problems({"x_test.py": source})
        self.assertLen(found, 3, found)
        self.assertIn("x_test.py:2: iverilog by name", found[0])
        self.assertIn("x_test.py:3: vvp by name", found[1])
        self.assertIn("x_test.py:4: chromium is started by name", found[2])

    def test_pinned_tools_are_the_ones_the_build_pins(self):
        build = self._read("third_party/pinned/BUILD.bazel")
        pinned_tools = re.findall(r'name = "([^"]+)",\n\s+data = \[[^]]*\],\n\s+tool = '
                                  r'"@test_tools//:bin/\1"', build)
        self.assertEqual(sorted(pinned_tools), sorted(pinned.TOOLS))
        # ./bazelw's guard shadows each of them on the tests' PATH.
        guard = os.path.join(self.root, "tools", "host_guard")
        self.assertEqual(sorted(n for n in os.listdir(guard) if n != "refuse"),
                         sorted(pinned.TOOLS))

    def test_bazelw_installs_what_is_listed_as_installed_by_it(self):
        bazelw = self._read("bazelw")
        listed = re.search(r"IMAGE_TEST_TOOLS=\(([^)]*)\)", bazelw).group(1)
        commands = {pair.split("=")[0] for pair in listed.split()}
        commands.add("bazel-4")
        self.assertEqual(commands, {p for p, where in PROVIDED.items() if where == BAZELW})


if __name__ == "__main__":
    absltest.main()
