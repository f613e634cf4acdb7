"""The import graph runs one way: every BUILD file against the layer table.

tools/layers.bzl lists the layers bottom first, one top-level folder each, and
the build tooling outside them. Bazel enforces them through visibility (each
package's default_visibility is the package group of its layer); this test
checks, from the BUILD files alone, that
  * every package of the tree is in the table and declares that visibility,
  * no dependency edge runs to a package of the same or a higher layer,
  * no two packages depend on each other (no cycle between packages), and no two
    top-level folders do either (non-test targets),
  * no product package depends on the build tooling (tools/), and no product
    Python file imports it,
  * //serving:serve reaches no torch (serving imports no training stack).
tools/check_layers.py checks the same on the graph `bazel query` builds.
"""

import ast
import os

from absl.testing import absltest

from common import repo
from tests import build_files
from tests.build_files import package_of

_TOOLING_VISIBILITY = "//tests:__pkg__"


def _layers_literal(root, name):
    with open(os.path.join(root, "tools", "layers.bzl")) as f:
        tree = ast.parse(f.read())
    for node in tree.body:
        if isinstance(node, ast.Assign) and node.targets[0].id == name:
            return ast.literal_eval(node.value)
    raise AssertionError(f"tools/layers.bzl has no {name}")


def read_layers(root):
    """[(layer, [package, ...])] from tools/layers.bzl's LAYERS literal."""
    return _layers_literal(root, "LAYERS")


def read_tooling(root):
    """The build-tooling packages (tools/layers.bzl's TOOLING), without the `//`."""
    return [package[2:] for package in _layers_literal(root, "TOOLING")]


def is_file(root, label):
    """A source file (e.g. //:MODULE.bazel) is data, not a dependency on code."""
    return os.path.isfile(os.path.join(root, package_of(label), label.split(":", 1)[1]))


def violations(root, packages, layers, tooling=()):
    """Every breach of the layer table, as sentences."""
    layer_of = {p[2:]: i for i, (_, members) in enumerate(layers) for p in members}
    names = [name for name, _ in layers]
    found = []
    for package, (targets, visibility, _) in sorted(packages.items()):
        if package in tooling:
            if visibility != [_TOOLING_VISIBILITY]:
                found.append(f"//{package}: default_visibility {visibility}, want "
                             f"[{_TOOLING_VISIBILITY!r}] (build tooling)")
            # Tooling may use the bottom layer (tools/venvs.py finds the checkout
            # through common/repo.py), and nothing else of the product.
            bottom = [p[2:] for p in layers[0][1]]
            found += [f"{target} -> {dep}: build tooling depends on product code"
                      for target, deps in sorted(targets.items()) for dep in deps
                      if _code_package(root, dep) not in (None, package, *tooling, *bottom)]
            continue
        if package not in layer_of:
            found.append(f"//{package} is in no layer of tools/layers.bzl")
            continue
        want = [f"//:above_{names[layer_of[package]]}"]
        if package and visibility != want:
            found.append(f"//{package}: default_visibility {visibility}, want {want}")
        for target, deps in sorted(targets.items()):
            for dep in deps:
                other = _code_package(root, dep)
                if other is None or other == package:
                    continue
                if other in tooling:
                    if package != "tests":
                        found.append(f"{target} -> {dep}: product code depends on the build "
                                     "tooling (tools/)")
                    continue
                if layer_of.get(other, len(layers)) >= layer_of[package]:
                    found.append(f"{target} -> {dep}: //{other} is not below //{package} "
                                 f"({names[layer_of[package]]})")
    return found


def _code_package(root, label):
    """The package of a dependency on code in the tree; None for files and externals
    (third_party/ holds stand-ins for external repositories: pinned tools and data)."""
    if not label.startswith("//") or label.startswith("//third_party/") or is_file(root, label):
        return None
    return package_of(label)


def package_cycles(root, packages):
    """Pairs of packages that depend on each other (files excluded)."""
    edges = {(package, package_of(dep)) for package, (targets, _, _) in packages.items()
             for deps in targets.values() for dep in deps
             if _code_package(root, dep) not in (None, package)}
    return sorted((a, b) for a, b in edges if (b, a) in edges and a < b)


def folder_of(package):
    return package.split("/")[0] if package else "//"


def folder_cycles(root, packages):
    """Pairs of top-level folders whose non-test targets depend on each other."""
    edges = {(folder_of(package), folder_of(package_of(dep)))
             for package, (targets, _, rules) in packages.items()
             for target, deps in targets.items() if not rules[target].kind.endswith("_test")
             for dep in deps
             if _code_package(root, dep) is not None}
    return sorted((a, b) for a, b in edges if a != b and (b, a) in edges and a < b)


def tooling_imports(root, tooling_folder="tools"):
    """`file:line` of every product Python file that imports the build tooling."""
    found = []
    for directory, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs
                   if d not in build_files.SKIP_DIRS and not d.startswith(("bazel-", "."))]
        relative = os.path.relpath(directory, root)
        if relative.split(os.sep)[0] in (tooling_folder, "tests"):
            continue
        for name in files:
            if not name.endswith(".py"):
                continue
            path = os.path.join(directory, name)
            with open(path) as f:
                source = f.read()
            found += sorted({f"{os.path.relpath(path, root)}:{line}"
                             for line, module, _ in build_files.imports(source)
                             if module.split(".")[0] == tooling_folder})
    return found


class LayeringTest(absltest.TestCase):

    def setUp(self):
        super().setUp()
        self.root = repo.source_root()
        self.layers = read_layers(self.root)
        self.tooling = read_tooling(self.root)
        self.packages = build_files.read_tree(self.root)

    def test_every_edge_runs_down(self):
        self.assertEqual(violations(self.root, self.packages, self.layers, self.tooling), [])

    def test_no_two_packages_depend_on_each_other(self):
        self.assertEqual(package_cycles(self.root, self.packages), [])

    def test_no_two_top_level_folders_depend_on_each_other(self):
        self.assertEqual(folder_cycles(self.root, self.packages), [])
        # One folder, one layer: every product package sits in its folder's layer.
        folder_layer = {}
        for index, (_, members) in enumerate(self.layers):
            for package in members:
                folder_layer.setdefault(folder_of(package[2:]), set()).add(index)
        mixed = {folder: layers for folder, layers in folder_layer.items()
                 if folder != "training" and len(layers) > 1}
        self.assertEqual(mixed, {})

    def test_no_product_code_imports_the_tooling(self):
        self.assertEqual(tooling_imports(self.root), [])

    def test_serving_does_not_depend_on_torch(self):
        self.assertIn("@pypi_train//:torch",
                      build_files.dependencies(self.packages, "//training/gpu:sft"))
        self.assertNotIn("@pypi_train//:torch",
                         build_files.dependencies(self.packages, "//serving:serve"))

    def _with_edge(self, package, target, dep):
        packages = dict(self.packages)
        targets, visibility, rules = packages[package]
        packages[package] = ({**targets, target: targets[target] + [dep]}, visibility, rules)
        return packages

    def test_a_back_edge_is_caught(self):
        packages = self._with_edge("data", "//data:codev", "//gemma4:gemma4_map")
        self.assertIn("//data:codev -> //gemma4:gemma4_map: //gemma4 is "
                      "not below //data (data)",
                      violations(self.root, packages, self.layers, self.tooling))
        packages = self._with_edge("data", "//data:codev", "//training/common:lifecycle")
        self.assertEqual(folder_cycles(self.root, packages), [("data", "training")])

    def test_a_select_condition_is_an_edge_too(self):
        # As `bazel query` counts it: a data target keyed on the root package's
        # config_setting depends on the top layer.
        edges, _, _ = build_files.parse_build(
            'py_library(name = "x", deps = select({"//:on_tpu": [":y"], '
            '"//conditions:default": []}))\n', "data")
        self.assertEqual(edges["//data:x"], ["//:on_tpu", "//data:y"])
        packages = self._with_edge("data", "//data:codev", "//:on_tpu")
        self.assertIn("//data:codev -> //:on_tpu: // is not below //data (data)",
                      violations(self.root, packages, self.layers, self.tooling))

    def test_an_edge_into_the_tooling_is_caught(self):
        packages = self._with_edge("serving", "//serving:server_config", "//tools:pins")
        self.assertIn("//serving:server_config -> //tools:pins: product code depends on the "
                      "build tooling (tools/)",
                      violations(self.root, packages, self.layers, self.tooling))

    def test_a_tooling_import_is_caught(self):
        root = self.create_tempdir().full_path
        os.makedirs(os.path.join(root, "serving"))
        with open(os.path.join(root, "serving", "x.py"), "w") as f:
            f.write("import os\n\n\ndef f():\n    from tools import pins\n")
        self.assertEqual(tooling_imports(root), ["serving/x.py:5"])


if __name__ == "__main__":
    absltest.main()
