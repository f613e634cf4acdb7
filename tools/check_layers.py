"""Checks the layering on the graph Bazel itself builds (anyone can run it):

    python3 tools/check_layers.py

`bazel query` lists every edge between rules of the tree; each must run from a
package to a package of a lower layer (tools/layers.bzl), no product package
may depend on the build tooling (tools/) nor the tooling on any product package
but the bottom layer (common/), no two packages may depend on each
other, no two top-level folders either (edges of non-test targets), and
//serving:serve must not reach torch. Exits 1 with the offending edges.
//tests:layering_test checks the same from the BUILD files.
"""

import ast
import os
import re
import subprocess
import sys

# Run as a script, this file's folder is on sys.path, not the checkout's.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir))
from common import repo  # pylint: disable=wrong-import-position

ROOT = repo.source_root()
_EDGE = re.compile(r'^\s*"(//[^"]*)"\s*->\s*"(//[^"]*)"')


THIRD_PARTY = "third_party/"


def query(expression, *options):
    done = subprocess.run([os.path.join(ROOT, "bazelw"), "query", expression, *options],
                          cwd=ROOT, capture_output=True, text=True, check=False)
    if done.returncode:
        raise SystemExit(f"error: bazel query {expression!r} failed:\n{done.stderr[-3000:]}")
    return done.stdout


def _table(name):
    with open(os.path.join(ROOT, "tools", "layers.bzl")) as f:
        tree = ast.parse(f.read())
    return ast.literal_eval(next(n.value for n in tree.body if isinstance(n, ast.Assign)
                                 and n.targets[0].id == name))


def layers():
    return {package[2:]: index for index, (_, packages) in enumerate(_table("LAYERS"))
            for package in packages}


def package_edges(universe):
    """{(package, package)} of the rule-to-rule edges of `deps(universe)`."""
    graph = query(f"kind(rule, deps({universe}))", "--output=graph", "--nograph:factored",
                  "--noimplicit_deps")
    edges = set()
    for line in graph.splitlines():
        match = _EDGE.match(line)
        if match:
            a, b = (label[2:].split(":")[0] for label in match.groups())
            # third_party/ holds what stands for external repositories (pinned
            # tools, offline stand-ins): no layer, as @repository labels have none.
            if a != b and not b.startswith(THIRD_PARTY):
                edges.add((a, b))
    return edges


def folder(package):
    return package.split("/")[0] if package else "//"


def main():
    layer_of = layers()
    tooling = {package[2:] for package in _table("TOOLING")}
    edges = package_edges("//...")
    problems = [f"//{a} -> //{b}: product code depends on the build tooling"
                for a, b in sorted(edges) if b in tooling and a not in tooling | {"tests"}]
    bottom = {package[2:] for package in _table("LAYERS")[0][1]}  # tooling may use it
    problems += [f"//{a} -> //{b}: the build tooling depends on product code"
                 for a, b in sorted(edges) if a in tooling and b not in tooling | bottom]
    problems += [f"//{a} -> //{b} runs up or sideways" for a, b in sorted(edges)
                 if a not in tooling and b not in tooling
                 and layer_of.get(b, len(layer_of)) >= layer_of.get(a, -1)]
    problems += [f"//{a} <-> //{b} depend on each other" for a, b in sorted(edges)
                 if (b, a) in edges and a < b]
    folders = {(folder(a), folder(b)) for a, b in package_edges("//... except tests(//...)")}
    problems += [f"{a}/ <-> {b}/: top-level folders depend on each other"
                 for a, b in sorted(folders) if a < b and (b, a) in folders]
    if query("somepath(//serving:serve, @pypi_train//:torch)").strip():
        problems.append("//serving:serve depends on torch")
    print(f"{len(edges)} package edges between {len({p for e in edges for p in e})} packages")
    if problems:
        print("\n".join(problems), file=sys.stderr)
        raise SystemExit(1)
    print("layering: every edge runs down; no cycle between packages or top-level folders; "
          "//serving:serve does not depend on torch")


if __name__ == "__main__":
    main()
