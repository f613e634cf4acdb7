"""Checks that every dependency of the online build is pinned.

MODULE.bazel is Starlark, whose syntax is a subset of Python's, so it is read
with `ast` without evaluating it. Pinned means: an exact version for every
`bazel_dep` and the Python toolchain, a sha256 digest for every pulled image,
a hash for every downloaded archive, a commit for every git override, and a
`==` version plus hashes for every line of every lock file that `pip.parse`
reads. `.bazelversion` names one exact Bazel release.
"""

import ast
import os
import re

EXACT_VERSION = re.compile(r"^\d+\.\d+\.\d+([-+.][0-9A-Za-z.-]+)?$")
DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
COMMIT = re.compile(r"^[0-9a-f]{40}$")
HASH_OPTION = re.compile(r"--hash=sha256:[0-9a-f]{64}")


def _constants(tree):
    """Top-level `NAME = "literal"` assignments, used as call arguments."""
    values = {}
    for node in tree.body:
        if (isinstance(node, ast.Assign) and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name)
                and isinstance(node.value, ast.Constant)):
            values[node.targets[0].id] = node.value.value
    return values


def _call_name(call):
    func = call.func
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return ""


def _kwargs(call, constants):
    out = {}
    for keyword in call.keywords:
        value = keyword.value
        if isinstance(value, ast.Constant):
            out[keyword.arg] = value.value
        elif isinstance(value, ast.Name) and value.id in constants:
            out[keyword.arg] = constants[value.id]
        else:
            out[keyword.arg] = value
    return out


def _label_to_path(label, root):
    package, _, name = label.lstrip("@").lstrip("/").partition(":")
    return os.path.join(root, package, name)


def module_problems(text, root):
    """Returns one message per unpinned thing in MODULE.bazel's `text`."""
    tree = ast.parse(text, filename="MODULE.bazel")
    constants = _constants(tree)
    problems = []
    for call in (n for n in ast.walk(tree) if isinstance(n, ast.Call)):
        name = _call_name(call)
        args = _kwargs(call, constants)
        where = f"MODULE.bazel:{call.lineno}: {name}({args.get('name', '')})"

        def require(field, pattern, what, args=args, where=where):
            value = args.get(field)
            if not isinstance(value, str) or not pattern.match(value):
                problems.append(f"{where}: {field} must be {what}, got {value!r}")

        if name == "bazel_dep":
            require("version", EXACT_VERSION, "an exact version")
        elif name == "toolchain" and "python_version" in args:
            require("python_version", EXACT_VERSION, "an exact x.y.z version")
        elif name == "pull":
            require("digest", DIGEST, "a sha256 digest")
        elif name in ("http_archive", "http_file", "archive_override"):
            if not (args.get("sha256") or args.get("integrity")):
                problems.append(f"{where}: needs sha256 or integrity")
        elif name == "git_override":
            require("commit", COMMIT, "a 40-hex commit")
        elif name == "parse" and "requirements_lock" in args:
            lock = args["requirements_lock"]
            path = _label_to_path(lock, root)
            if not os.path.exists(path):
                problems.append(f"{where}: lock file {lock} does not exist")
                continue
            with open(path) as f:
                problems += [f"{lock}: {p}" for p in lock_problems(f.read())]
    return problems


def lock_problems(text):
    """Returns one message per requirement of a lock file without `==` or hash."""
    problems = []
    # A requirement spans its line plus backslash-continued option lines.
    entries = re.split(r"(?<!\\)\n", text)
    for entry in entries:
        entry = entry.strip()
        if not entry or entry.startswith("#") or entry.startswith("-"):
            continue
        requirement = entry.split()[0]
        if "==" not in requirement:
            problems.append(f"{requirement}: not pinned to an exact version")
        if not HASH_OPTION.search(entry):
            problems.append(f"{requirement}: no --hash")
    return problems


def bazelversion_problems(text):
    version = text.strip()
    if not EXACT_VERSION.match(version):
        return [f".bazelversion: must be an exact release, got {version!r}"]
    return []


def all_problems(root):
    with open(os.path.join(root, "MODULE.bazel")) as f:
        problems = module_problems(f.read(), root)
    with open(os.path.join(root, ".bazelversion")) as f:
        problems += bazelversion_problems(f.read())
    return problems
