"""The import graph runs one way: every BUILD file against the layer table.

tools/layers.bzl lists the layers bottom first. Bazel enforces them through
visibility (each package's default_visibility is the package group of its layer); this
test checks, from the BUILD files alone, that
  * every package of the tree is in the table and declares that visibility,
  * no dependency edge runs to a package of the same or a higher layer,
  * no two packages depend on each other (no cycle between packages),
  * //serving:serve reaches no torch (serving imports no training stack).
tools/check_layers.py checks the same on the graph `bazel query` builds.
"""

import ast
import os

from absl.testing import absltest

_BUILD_NAMES = ("BUILD.bazel", "BUILD")
_SKIP_DIRS = {".git", ".venvs", "node_modules", "third_party"}


def source_root():
    # MODULE.bazel is a data dependency; its runfile links back to the source tree.
    if os.path.exists("MODULE.bazel"):
        return os.path.dirname(os.path.realpath("MODULE.bazel"))
    return os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def read_layers(root):
    """[(layer, [package, ...])] from tools/layers.bzl's LAYERS literal."""
    tree = ast.parse(open(os.path.join(root, "tools", "layers.bzl")).read())
    for node in tree.body:
        if isinstance(node, ast.Assign) and node.targets[0].id == "LAYERS":
            return ast.literal_eval(node.value)
    raise AssertionError("tools/layers.bzl has no LAYERS")


def _labels(node):
    """Label strings of a deps/data value: list literals, `+` of lists, requirement()."""
    if isinstance(node, ast.List):
        return [label for element in node.elts for label in _labels(element)]
    if isinstance(node, ast.BinOp):
        return _labels(node.left) + _labels(node.right)
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "requirement":
        return [f"@pypi//:{node.args[0].value}"]
    return []


def parse_build(text, package):
    """({target label: [dependency labels]}, default_visibility, module-level names)."""
    tree = ast.parse(text)
    names = {n.targets[0].id: n.value for n in tree.body
             if isinstance(n, ast.Assign) and isinstance(n.targets[0], ast.Name)}
    targets, visibility = {}, None
    for call in (n.value for n in tree.body if isinstance(n, ast.Expr)
                 and isinstance(n.value, ast.Call)):
        kwargs = {k.arg: k.value for k in call.keywords}
        if getattr(call.func, "id", "") == "package":
            visibility = ast.literal_eval(kwargs["default_visibility"])
            continue
        if "name" not in kwargs:
            continue
        deps = []
        for field in ("deps", "data", "srcs"):
            value = kwargs.get(field)
            if isinstance(value, ast.BinOp) and isinstance(value.left, ast.Name):
                value = ast.BinOp(names[value.left.id], value.op, value.right)
            deps += _labels(value) if value is not None else []
        label = f"//{package}:{kwargs['name'].value}"
        targets[label] = [_absolute(d, package) for d in deps if d.startswith((":", "//", "@"))]
    return targets, visibility


def _absolute(label, package):
    if label.startswith(":"):
        return f"//{package}{label}"
    if label.startswith("//") and ":" not in label:
        return f"{label}:{label.rsplit('/', 1)[-1]}"
    return label


def package_of(label):
    return label[2:].split(":")[0]


def read_tree(root):
    """{package: (targets, visibility)} for every BUILD file under root."""
    packages = {}
    for directory, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if d not in _SKIP_DIRS and not d.startswith(("bazel-", "."))]
        build = next((b for b in _BUILD_NAMES if b in files), None)
        if build:
            package = os.path.relpath(directory, root).replace(os.sep, "/")
            package = "" if package == "." else package
            with open(os.path.join(directory, build)) as f:
                packages[package] = parse_build(f.read(), package)
    return packages


def is_file(root, label):
    """A source file (e.g. //:MODULE.bazel) is data, not a dependency on code."""
    return os.path.isfile(os.path.join(root, package_of(label), label.split(":", 1)[1]))


def violations(root, packages, layers):
    """Every breach of the layer table, as sentences."""
    layer_of = {p[2:]: i for i, (_, members) in enumerate(layers) for p in members}
    names = [name for name, _ in layers]
    found = []
    for package, (targets, visibility) in sorted(packages.items()):
        if package not in layer_of:
            found.append(f"//{package} is in no layer of tools/layers.bzl")
            continue
        want = [f"//:above_{names[layer_of[package]]}"]
        if package and visibility != want:
            found.append(f"//{package}: default_visibility {visibility}, want {want}")
        for target, deps in sorted(targets.items()):
            for dep in deps:
                other = package_of(dep) if dep.startswith("//") else None
                if other is None or other == package or is_file(root, dep):
                    continue
                if layer_of.get(other, len(layers)) >= layer_of[package]:
                    found.append(f"{target} -> {dep}: //{other} is not below //{package} "
                                 f"({names[layer_of[package]]})")
    return found


def package_cycles(root, packages):
    """Pairs of packages that depend on each other (files excluded)."""
    edges = {(package, package_of(dep)) for package, (targets, _) in packages.items()
             for deps in targets.values() for dep in deps
             if dep.startswith("//") and package_of(dep) != package and not is_file(root, dep)}
    return sorted((a, b) for a, b in edges if (b, a) in edges and a < b)


def reaches(packages, start, goal):
    """Whether `start` depends (deps, data, srcs; transitively) on label `goal`."""
    targets = {t: d for ts, _ in packages.values() for t, d in ts.items()}
    seen, stack = set(), [start]
    while stack:
        label = stack.pop()
        if label == goal:
            return True
        if label not in seen:
            seen.add(label)
            stack += targets.get(label, [])
    return False


class LayeringTest(absltest.TestCase):

    def setUp(self):
        super().setUp()
        self.root = source_root()
        self.layers = read_layers(self.root)
        self.packages = read_tree(self.root)

    def test_every_edge_runs_down(self):
        self.assertEqual(violations(self.root, self.packages, self.layers), [])

    def test_no_two_packages_depend_on_each_other(self):
        self.assertEqual(package_cycles(self.root, self.packages), [])

    def test_serving_does_not_depend_on_torch(self):
        self.assertTrue(reaches(self.packages, "//training/gpu:sft", "@pypi//:torch"))
        self.assertFalse(reaches(self.packages, "//serving:serve", "@pypi//:torch"))

    def test_a_back_edge_is_caught(self):
        packages = dict(self.packages)
        targets, visibility = packages["data"]
        targets = {**targets, "//data:codev": targets["//data:codev"] + [
            "//training/formats:gemma4_map"]}
        packages["data"] = (targets, visibility)
        self.assertIn("//data:codev -> //training/formats:gemma4_map: //training/formats is "
                      "not below //data (data)", violations(self.root, packages, self.layers))


if __name__ == "__main__":
    absltest.main()
