"""Checks that every dependency of the online build is pinned.

MODULE.bazel is Starlark, whose syntax is a subset of Python's, so it is read
with `ast` without evaluating it. Pinned means: an exact version for every
`bazel_dep` and the Python toolchain, a sha256 digest for every pulled image,
a hash for every downloaded archive, a commit for every git override, and a
`==` version plus hashes for every line of every lock file that `pip.parse`
reads. `.bazelversion` names one exact Bazel release.

Images: every `oci.pull` names its tag in `BASE_IMAGE_TAGS` (what
`tools/update_locks.py --images` compares against the registry), the offline
stand-in of each pull in WORKSPACE names the same IMAGE@DIGEST, and the images
the serving configs run directly (serving/server_config.py) are pinned pulls.
"""

import ast
import hashlib
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
                and isinstance(node.value, (ast.Constant, ast.Dict))):
            values[node.targets[0].id] = ast.literal_eval(node.value)
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
        elif isinstance(value, ast.List) and all(isinstance(e, ast.Constant) for e in value.elts):
            out[keyword.arg] = [e.value for e in value.elts]
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


def sha256_of(data):
    return "sha256:" + hashlib.sha256(data).hexdigest()


def pulled_images(text):
    """[{name, image, digest, tag}] of MODULE.bazel's `oci.pull` calls."""
    tree = ast.parse(text, filename="MODULE.bazel")
    constants = _constants(tree)
    tags = constants.get("BASE_IMAGE_TAGS", {})
    images = []
    for call in (n for n in ast.walk(tree) if isinstance(n, ast.Call)):
        if _call_name(call) == "pull":
            args = _kwargs(call, constants)
            images.append({"name": args.get("name"), "image": args.get("image"),
                           "digest": args.get("digest"), "tag": tags.get(args.get("name")),
                           "platforms": args.get("platforms") or []})
    return images


def _strip_registry(image):
    """`docker.io/vllm/vllm-tpu` and `vllm/vllm-tpu` name the same image."""
    for prefix in ("docker.io/library/", "docker.io/", "index.docker.io/"):
        if image.startswith(prefix):
            return image[len(prefix):]
    return image


def image_problems(module_text, workspace_text, pinned_references, bases_labels=()):
    """Every pull names a tag and linux/amd64; WORKSPACE's stand-ins and
    `pinned_references` (IMAGE@DIGEST strings used outside Bazel) match the pulls;
    `bases_labels` ((image, label) of tools/oci/bases.bzl) use the amd64 repositories."""
    problems = []
    pulls = pulled_images(module_text)
    by_reference = {f"{_strip_registry(p['image'])}@{p['digest']}": p for p in pulls}
    for pull in pulls:
        if not pull["tag"]:
            problems.append(f"MODULE.bazel: oci.pull({pull['name']}) has no tag in "
                            "BASE_IMAGE_TAGS (the tag its digest was taken from)")
        # Without platforms, rules_oci refuses a digest that is an index; with them it
        # takes an index or a single manifest, as @NAME_linux_amd64.
        if "linux/amd64" not in pull["platforms"]:
            problems.append(f"MODULE.bazel: oci.pull({pull['name']}) needs "
                            'platforms = ["linux/amd64"] (the images run on amd64 hosts)')
    tree = ast.parse(workspace_text, filename="WORKSPACE")
    stand_ins = {}
    for call in (n for n in ast.walk(tree) if isinstance(n, ast.Call)):
        if _call_name(call) == "offline_base_image":
            args = _kwargs(call, {})
            stand_ins[args.get("name")] = args.get("image")
    for pull in pulls:
        found = [stand_ins[n] for n in [pull["name"] + "_linux_amd64"] if n in stand_ins]
        reference = f"{_strip_registry(pull['image'])}@{pull['digest']}"
        if not found:
            problems.append(f"WORKSPACE: no offline_base_image {pull['name']}_linux_amd64")
        elif _strip_registry(found[0]) != reference:
            problems.append(f"WORKSPACE: the stand-in for {pull['name']} names {found[0]}, "
                            f"MODULE.bazel pulls {reference}")
    for reference in pinned_references:
        if _strip_registry(reference) not in by_reference:
            problems.append(f"{reference}: not one of MODULE.bazel's pinned pulls")
    for image, label in bases_labels:
        pull = by_reference.get(_strip_registry(image))
        if pull and label != f"@{pull['name']}_linux_amd64":
            problems.append(f"tools/oci/bases.bzl: {image} is built on {label}, not on "
                            f"@{pull['name']}_linux_amd64 (the platform's repository)")
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


def bases_images(text):
    """(image, label) of every entry of tools/oci/bases.bzl's BASES."""
    tree = ast.parse(text, filename="bases.bzl")
    bases = _constants(tree).get("BASES", {})
    return [(base["image"], base["label"]) for base in bases.values()]


def all_image_problems(root, pinned_references=()):
    """image_problems for the tree at `root`: its BASES and `pinned_references`."""
    with open(os.path.join(root, "MODULE.bazel")) as f:
        module_text = f.read()
    with open(os.path.join(root, "WORKSPACE")) as f:
        workspace_text = f.read()
    with open(os.path.join(root, "tools", "oci", "bases.bzl")) as f:
        bases = bases_images(f.read())
    return image_problems(module_text, workspace_text,
                          [*(image for image, _ in bases), *pinned_references], bases)
