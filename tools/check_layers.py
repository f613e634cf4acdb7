"""Checks the layering on the graph Bazel itself builds (anyone can run it):

    python3 tools/check_layers.py

`bazel query` lists every edge between rules of the tree; each must run from a
package to a package of a lower layer (tools/layers.bzl), no two packages may
depend on each other, and //serving:serve must not reach torch. Exits 1 with
the offending edges. //tests:layering_test checks the same from the BUILD files.
"""

import ast
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_EDGE = re.compile(r'^\s*"(//[^"]*)"\s*->\s*"(//[^"]*)"')


def query(expression, *options):
    done = subprocess.run([os.path.join(ROOT, "bazelw"), "query", expression, *options],
                          cwd=ROOT, capture_output=True, text=True, check=False)
    if done.returncode:
        raise SystemExit(f"error: bazel query {expression!r} failed:\n{done.stderr[-3000:]}")
    return done.stdout


def layers():
    with open(os.path.join(ROOT, "tools", "layers.bzl")) as f:
        tree = ast.parse(f.read())
    table = next(n.value for n in tree.body if isinstance(n, ast.Assign)
                 and n.targets[0].id == "LAYERS")
    return {package[2:]: index for index, (_, packages) in enumerate(ast.literal_eval(table))
            for package in packages}


def main():
    layer_of = layers()
    graph = query("kind(rule, deps(//...))", "--output=graph", "--nograph:factored",
                  "--noimplicit_deps")
    edges = set()
    for line in graph.splitlines():
        match = _EDGE.match(line)
        if match:
            a, b = (label[2:].split(":")[0] for label in match.groups())
            if a != b:
                edges.add((a, b))
    problems = [f"//{a} -> //{b} runs up or sideways" for a, b in sorted(edges)
                if layer_of.get(b, len(layer_of)) >= layer_of.get(a, -1)]
    problems += [f"//{a} <-> //{b} depend on each other" for a, b in sorted(edges)
                 if (b, a) in edges and a < b]
    if query("somepath(//serving:serve, @pypi_train//:torch)").strip():
        problems.append("//serving:serve depends on torch")
    print(f"{len(edges)} package edges between {len({p for e in edges for p in e})} packages")
    if problems:
        print("\n".join(problems), file=sys.stderr)
        raise SystemExit(1)
    print("layering: every edge runs down; no cycle; //serving:serve does not depend on torch")


if __name__ == "__main__":
    main()
