"""Every `*_test.py` in the tree is the main source of some py_test target.

Without this, a test file that nobody wired into a BUILD file would silently
drop out of `bazel test //...`. BUILD files are Starlark, read with `ast`.
"""

import ast
import os
import re

from absl.testing import absltest

from common import repo

_SKIP_DIRS = {".git", ".venvs", "node_modules"}
_BUILD_NAMES = ("BUILD.bazel", "BUILD")


def _string_list(node):
    if isinstance(node, ast.List):
        return [e.value for e in node.elts if isinstance(e, ast.Constant)]
    return []


def py_tests(build_text):
    """(main file, tags) of each py_test in a BUILD file: the main is `main`, or
    the one src, or `name`.py."""
    for call in ast.walk(ast.parse(build_text)):
        if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name)
                and call.func.id == "py_test"):
            continue
        args = {k.arg: k.value for k in call.keywords}
        if "main" in args:
            main = args["main"].value
        else:
            srcs = _string_list(args.get("srcs"))
            main = srcs[0] if len(srcs) == 1 else f"{args['name'].value}.py"
        yield main, _string_list(args.get("tags"))


def py_test_mains(build_text):
    """The main file of each py_test in a BUILD file."""
    return {main for main, _ in py_tests(build_text)}


def unwired_tests(root):
    """Test files whose package has no py_test with them as main."""
    missing = []
    for directory, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if d not in _SKIP_DIRS and not d.startswith("bazel-")]
        package = directory
        while not any(os.path.exists(os.path.join(package, b)) for b in _BUILD_NAMES):
            if package == root:
                break
            package = os.path.dirname(package)
        mains = set()
        for build in _BUILD_NAMES:
            path = os.path.join(package, build)
            if os.path.exists(path):
                with open(path) as f:
                    mains |= py_test_mains(f.read())
        for name in files:
            if name.endswith("_test.py"):
                relative = os.path.relpath(os.path.join(directory, name), package)
                if relative not in mains:
                    missing.append(os.path.relpath(os.path.join(directory, name), root))
    return sorted(missing)


class BuildGraphTest(absltest.TestCase):

    def test_tests_that_run_bazel_4_are_left_out_of_online_mode(self):
        """A test that starts Debian's Bazel 4.2.3 carries `bazel4_only`, which .bazelrc
        filters out of `test` and clears again under --config=offline (./bazelw)."""
        root = repo.source_root()
        with open(os.path.join(root, ".bazelrc")) as f:
            rc = [line.split() for line in f if line.strip() and not line.startswith("#")]
        self.assertIn(["test", "--test_tag_filters=-bazel4_only"], rc)
        self.assertIn(["test:offline", "--test_tag_filters="], rc)
        found = []
        for directory, dirs, files in os.walk(root):
            dirs[:] = [d for d in dirs if d not in _SKIP_DIRS and not d.startswith("bazel-")]
            if "BUILD.bazel" not in files:
                continue
            with open(os.path.join(directory, "BUILD.bazel")) as f:
                tests = list(py_tests(f.read()))
            for main, tags in tests:
                path = os.path.join(directory, main)
                with open(path) as f:
                    runs_bazel_4 = re.search(r'\[\s*"bazel-4"', f.read()) is not None
                if runs_bazel_4 or "bazel4_only" in tags:
                    found.append(os.path.relpath(path, root))
                    self.assertEqual(runs_bazel_4, "bazel4_only" in tags, path)
        self.assertIn("tests/image_test.py", found)

    def test_images_are_built_only_when_asked(self):
        """`test //...` builds no image (online, each would pull a multi-GB base):
        .bazelrc builds only tests, and every target project_image defines is manual."""
        root = repo.source_root()
        with open(os.path.join(root, ".bazelrc")) as f:
            rc = [line.split() for line in f if line.strip() and not line.startswith("#")]
        self.assertIn(["test", "--build_tests_only"], rc)
        # And no test process starts libtpu (importable online beside //training/tpu:aot).
        self.assertIn(["test", "--test_env=JAX_PLATFORMS=cpu"], rc)
        with open(os.path.join(root, "tools", "oci", "defs.bzl")) as f:
            defs = ast.parse(f.read())
        (project_image,) = [node for node in defs.body if isinstance(node, ast.FunctionDef)
                            and node.name == "project_image"]
        rules = {"app_layer", "python_layer", "image_labels", "oci_image", "oci_push"}
        called = set()
        for call in ast.walk(project_image):
            if isinstance(call, ast.Call) and getattr(call.func, "id", None) in rules:
                called.add(call.func.id)
                tags = {k.arg: k.value for k in call.keywords}.get("tags")
                self.assertEqual(getattr(tags, "id", None), "_MANUAL", call.func.id)
        self.assertEqual(called, rules)
        self.assertIn('_MANUAL = ["manual"]', ast.unparse(defs).replace("'", '"'))

    def test_every_test_file_has_a_py_test(self):
        root = repo.source_root()
        self.assertTrue(os.path.exists(os.path.join(root, "tests", "build_graph_test.py")),
                        f"{root} is not the source tree")
        self.assertEqual(unwired_tests(root), [])

    def test_detects_an_unwired_test(self):
        root = self.create_tempdir().full_path
        os.makedirs(os.path.join(root, "pkg", "sub"))
        with open(os.path.join(root, "pkg", "BUILD.bazel"), "w") as f:
            f.write('py_test(name = "a_test", srcs = ["a_test.py"])\n'
                    'py_test(name = "b", srcs = ["x.py", "b.py"], main = "b_test.py")\n')
        for name in ("a_test.py", "b_test.py", "c_test.py", "sub/d_test.py"):
            open(os.path.join(root, "pkg", name), "w").close()
        self.assertEqual(unwired_tests(root), ["pkg/c_test.py", "pkg/sub/d_test.py"])


if __name__ == "__main__":
    absltest.main()
