"""The tree's BUILD files read with `ast` (Starlark is Python's grammar here), for the
tests that check the build graph without running Bazel; and the imports of its
Python sources, which those targets must declare.

Each rule becomes a `Target`: its label, kind, source files (globs expanded against
the tree) and dependency labels. `requirement("absl-py")` becomes the label of
its hub (`@pypi_train//:absl-py`, from the BUILD file's `load` of that hub's
requirements.bzl). A `select()` contributes its conditions and the labels of
every branch, as `bazel query` counts them, or, given an accelerator
(`//common:accelerator`), the labels of the branch it selects.
"""

import ast
import collections
import glob
import os
import re
import subprocess

SKIP_DIRS = {".git", ".venvs", "node_modules", "third_party"}
BUILD_NAMES = ("BUILD.bazel", "BUILD")
REQUIREMENT = re.compile(r"^@(pypi\w*)//:(.+)$")  # a requirement(): hub, package
_DEFAULT = "//conditions:default"

Target = collections.namedtuple("Target", "label kind srcs deps")


class Scope:
    """What a BUILD file's expressions refer to: its list constants and the
    requirement macros it loads (macro name -> hub)."""

    def __init__(self, constants=None, hubs=None, accelerator=None):
        self.constants = constants or {}
        self.hubs = hubs or {}
        self.accelerator = accelerator  # None: every branch of every select()


def labels(node, scope=None):
    """Label strings of a deps/data value: lists, `+`, select(), requirement(), and the
    BUILD file's own list constants."""
    scope = scope or Scope()
    if isinstance(node, ast.List):
        return [label for element in node.elts for label in labels(element, scope)]
    if isinstance(node, ast.BinOp):
        return labels(node.left, scope) + labels(node.right, scope)
    if isinstance(node, ast.Name) and node.id in scope.constants:
        return labels(scope.constants[node.id], scope)
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, ast.Call):
        name = getattr(node.func, "id", "")
        if name in scope.hubs:
            return [f"@{scope.hubs[name]}//:{node.args[0].value}"]
        if name == "select":
            branches = {key.value: value for key, value in zip(node.args[0].keys,
                                                              node.args[0].values)}
            if scope.accelerator is None:  # the conditions are dependencies too
                return [key for key in branches if key != _DEFAULT] + [
                    label for value in branches.values() for label in labels(value, scope)]
            chosen = branches.get(f"//common:on_{scope.accelerator}", branches[_DEFAULT])
            return labels(chosen, scope)
    return []


def _hubs(tree):
    """{macro name: hub} of the `requirement` macros a BUILD file loads."""
    hubs = {}
    for node in tree.body:
        call = node.value if isinstance(node, ast.Expr) else None
        if not (isinstance(call, ast.Call) and getattr(call.func, "id", "") == "load"):
            continue
        hub = re.match(r"^@(pypi\w*)//", call.args[0].value)
        if not hub:
            continue
        for arg in call.args[1:]:
            if isinstance(arg, ast.Constant) and arg.value == "requirement":
                hubs["requirement"] = hub.group(1)
        for keyword in call.keywords:
            if keyword.value.value == "requirement":
                hubs[keyword.arg] = hub.group(1)
    return hubs


def absolute(label, package):
    if label.startswith(":"):
        return f"//{package}{label}"
    if label.startswith("//") and ":" not in label:
        return f"{label}:{label.rsplit('/', 1)[-1]}"
    return label


def package_of(label):
    return label[2:].split(":")[0]


def _files(node, directory):
    """Source file names of a srcs value, relative to the package: lists and glob()."""
    if isinstance(node, ast.List):
        return [e.value for e in node.elts if isinstance(e, ast.Constant)]
    if isinstance(node, ast.BinOp):
        return _files(node.left, directory) + _files(node.right, directory)
    if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "glob":
        found = []
        for pattern in node.args[0].elts:
            found += sorted(os.path.relpath(path, directory)
                            for path in glob.glob(os.path.join(directory, pattern.value)))
        return found
    return []


def parse_build(text, package, directory=None, accelerator=None):
    """({target label: [dependency labels]}, default_visibility, {label: Target});
    `accelerator`: resolve select()s as //common:accelerator=that would (None: all branches)."""
    tree = ast.parse(text)
    scope = Scope({n.targets[0].id: n.value for n in tree.body
                   if isinstance(n, ast.Assign) and isinstance(n.targets[0], ast.Name)},
                  _hubs(tree), accelerator)
    edges, visibility, targets = {}, None, {}
    for call in (n.value for n in tree.body if isinstance(n, ast.Expr)
                 and isinstance(n.value, ast.Call)):
        kwargs = {k.arg: k.value for k in call.keywords}
        kind = getattr(call.func, "id", "")
        if kind == "package":
            visibility = ast.literal_eval(kwargs["default_visibility"])
            continue
        if "name" not in kwargs:
            continue
        deps = []
        for field in ("deps", "data", "srcs"):
            if field in kwargs:
                deps += labels(kwargs[field], scope)
        label = f"//{package}:{kwargs['name'].value}"
        edges[label] = [absolute(d, package) for d in deps if d.startswith((":", "//", "@"))]
        targets[label] = Target(
            label, kind,
            _files(kwargs.get("srcs"), directory) if directory and "srcs" in kwargs else [],
            [absolute(d, package) for d in labels(kwargs.get("deps"), scope)])
    return edges, visibility, targets


def read_tree(root, accelerator=None):
    """{package: (edges, visibility, targets)} for every BUILD file under root."""
    packages = {}
    for directory, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if d not in SKIP_DIRS and not d.startswith(("bazel-", "."))]
        build = next((b for b in BUILD_NAMES if b in files), None)
        if build:
            package = os.path.relpath(directory, root).replace(os.sep, "/")
            package = "" if package == "." else package
            with open(os.path.join(directory, build)) as f:
                packages[package] = parse_build(f.read(), package, directory, accelerator)
    return packages


def dependencies(packages, start):
    """Every label `start` depends on (deps, data, srcs; transitively), itself included;
    `packages` as read_tree returns them."""
    edges = {label: deps for package_edges, _, _ in packages.values()
             for label, deps in package_edges.items()}
    seen, stack = set(), [start]
    while stack:
        label = stack.pop()
        if label not in seen:
            seen.add(label)
            stack += edges.get(label, [])
    return seen


def imports(source):
    """(line, module, imported name or None) of every absolute import in `source`,
    but for fallbacks: imports in an `except ImportError:` handler run only where
    the import they stand in for is missing, which is the one declared."""
    tree = ast.parse(source)
    fallbacks = {id(inner) for node in ast.walk(tree) if isinstance(node, ast.Try)
                 for handler in node.handlers
                 if getattr(handler.type, "id", None) in ("ImportError", "ModuleNotFoundError")
                 for inner in ast.walk(handler)}
    found = []
    for node in ast.walk(tree):
        if id(node) in fallbacks:
            continue
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name, None) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            found += [(node.lineno, node.module, alias.name) for alias in node.names]
    return found


def repository_files(root):
    """Tracked and new (not ignored) files that exist now, relative to root."""
    # Only the tree's own checkout: git would otherwise answer for an enclosing one.
    try:
        if not os.path.exists(os.path.join(root, ".git")):
            raise OSError("not a git checkout")
        listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others",
                                 "--exclude-standard"], cwd=root, check=True,
                                capture_output=True, timeout=30).stdout.decode()
        # A staged deletion or rename still lists its old path.
        return sorted({f for f in listed.split("\0")
                       if f and os.path.isfile(os.path.join(root, f))})
    except (OSError, subprocess.SubprocessError):
        pass
    files = []
    for directory, dirs, names in os.walk(root):
        dirs[:] = [d for d in dirs if d not in (".git", ".venvs", "node_modules") and not d.startswith("bazel-")]
        files += [os.path.relpath(os.path.join(directory, n), root) for n in names]
    return sorted(files)
