"""Lays out a lock file's packages the way rules_python does: one folder each.

Run by the offline mode's `pip_hub` repository rule (third_party/offline/
repositories.bzl) with the system python3 (standard library, and pip's vendored
`packaging` where the standard library has no marker evaluation):

    python3 tools/pip_hub.py --lock LOCK --python PYTHON --out DIR

installs every package of the lock by hash (the pinned uv; no dependency
resolution: the lock is complete) into a staging folder, then moves each
installed distribution's files, as its RECORD lists them, into
`DIR/site-packages/NAME/` (a path that names site-packages, as rules_python's
does: dill, under `datasets`, pickles modules from elsewhere by value)
and writes `DIR/BUILD.bazel` with one `py_library` per package: `imports` its own
folder, `deps` the packages its METADATA requires (markers evaluated for this
interpreter, extras of the requirer left out, as rules_python does). A process
then sees exactly the packages its target depends on, transitively, and nothing
else: the strictness of online mode, where every wheel is its own repository.

Each folder holds a `.import_root` file, the one file of the package in runfiles:
the offline interpreter's sitecustomize (repositories.bzl) replaces the runfiles
folder on sys.path by the real one it points into, so that 60k-file packages
cost no runfiles links. Its content is the package's RECORD hash, so that a test
whose package changed is not taken from the cache.
"""

import argparse
import base64
import csv
import email.parser
import hashlib
import os
import pwd
import re
import shutil
import subprocess
import sys
import tempfile

# Run as a script, this file's folder is on sys.path, not the checkout's.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir))
from tools import venvs  # pylint: disable=wrong-import-position

try:
    from packaging.requirements import Requirement
except ImportError:  # the system python3, as the repository rule runs it: pip's copy
    from pip._vendor.packaging.requirements import Requirement

IMPORT_ROOT = ".import_root"
SITE = "site-packages"


class HubError(Exception):
    pass


def normalize(name):
    """PEP 503 normalization, with `_` as rules_python's hub target names have it."""
    return re.sub(r"[-_.]+", "_", name).lower()


def lock_packages(lock):
    """{normalized name: pinned line's name} of a lock file's `name==version` lines."""
    out = {}
    with open(lock) as f:
        for line in f:
            match = re.match(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==", line)
            if match:
                out[normalize(match.group(1))] = match.group(1)
    return out


def uv_cache_dir():
    """uv's cache of this user, wherever Bazel runs us: a test's inner Bazel (and a
    repository rule) may see another HOME, which would mean a cold cache."""
    if os.environ.get("UV_CACHE_DIR"):
        return os.environ["UV_CACHE_DIR"]
    home = pwd.getpwuid(os.getuid()).pw_dir
    return os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.join(home, ".cache"), "uv")


def install(lock, python, staging):
    """Every package of `lock` by hash into `staging`: the files are hard links
    into uv's cache where they are cached already."""
    command = [venvs.uv_binary(), "pip", "install", "--quiet", "--python", python,
               "--target", staging, "--require-hashes", "--no-deps", "--link-mode=hardlink",
               "--cache-dir", uv_cache_dir(),
               # The machine's certificate store: a proxy's own CA is trusted too.
               "--system-certs", "-r", lock]
    find_links = venvs.pip_find_links()
    if find_links:
        for link in find_links:
            command += ["--find-links", link]
    else:
        command += ["--extra-index-url", venvs.TORCH_CPU_INDEX,
                    "--index-strategy", "unsafe-best-match"]
    subprocess.run(command, check=True)


def distributions(staging):
    """[(normalized name, dist-info folder)] installed in `staging`."""
    out = []
    for entry in sorted(os.listdir(staging)):
        if entry.endswith(".dist-info"):
            with open(os.path.join(staging, entry, "METADATA"), encoding="utf-8") as f:
                name = email.parser.Parser().parse(f, headersonly=True)["Name"]
            out.append((normalize(name), entry))
    return out


def record_files(staging, dist_info):
    """The files of a distribution inside `staging`, relative to it, from its RECORD."""
    files = []
    with open(os.path.join(staging, dist_info, "RECORD"), newline="", encoding="utf-8") as f:
        for row in csv.reader(f):
            if not row:
                continue
            path = os.path.normpath(row[0])
            if path.startswith(os.pardir) or os.path.isabs(path):
                continue  # scripts and data outside site-packages: not imported
            if os.path.isfile(os.path.join(staging, path)):
                files.append(path)
    return files


def requirements(metadata_path, known):
    """The packages of `known` that a distribution's METADATA requires here, its
    own extras left out (as rules_python's hubs leave them)."""
    with open(metadata_path, encoding="utf-8") as f:
        metadata = email.parser.Parser().parse(f, headersonly=True)
    out = set()
    for line in metadata.get_all("Requires-Dist") or []:
        requirement = Requirement(line)
        name = normalize(requirement.name)
        if name not in known:
            continue
        marker = requirement.marker
        if marker is None or marker.evaluate({"extra": ""}):
            out.add(name)
    return out


def find_cycle(graph):
    """One dependency cycle of `graph` ({name: deps}) as a list, or None."""
    state = {}

    def visit(node, path):
        state[node] = "open"
        for dep in sorted(graph[node]):
            if state.get(dep) == "open":
                return path[path.index(dep):] + [dep]
            if dep not in state:
                found = visit(dep, path + [dep])
                if found:
                    return found
        state[node] = "done"
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node, [node])
            if found:
                return found
    return None


def split(staging, site):
    """Moves each distribution's files into `site/NAME/` (`site`: the site-packages
    folder); returns the names."""
    names = []
    for name, dist_info in distributions(staging):
        folder = os.path.join(site, name)
        digest = hashlib.sha256()
        with open(os.path.join(staging, dist_info, "RECORD"), "rb") as f:
            digest.update(f.read())
        for path in record_files(staging, dist_info):
            target = os.path.join(folder, path)
            os.makedirs(os.path.dirname(target), exist_ok=True)
            os.replace(os.path.join(staging, path), target)
        with open(os.path.join(folder, IMPORT_ROOT), "w") as f:
            f.write(base64.urlsafe_b64encode(digest.digest()).decode() + "\n")
        names.append(name)
    leftovers = [os.path.join(root, f) for root, _, files in os.walk(staging) for f in files]
    # Scripts (bin/) are not imported; uv's own lock file (.lock) is not installed.
    leftovers = [p for p in leftovers
                 if not os.path.relpath(p, staging).startswith(("bin" + os.sep, "."))]
    if leftovers:
        raise HubError(f"{len(leftovers)} installed files are in no RECORD, e.g. "
                       f"{os.path.relpath(leftovers[0], staging)}")
    return names


def build_file(site, packages):
    """BUILD.bazel text: one py_library per package, deps from its METADATA."""
    graph = {}
    for name in sorted(os.listdir(site)):
        dist_infos = [d for d in os.listdir(os.path.join(site, name)) if d.endswith(".dist-info")]
        graph[name] = requirements(os.path.join(site, name, dist_infos[0], "METADATA"),
                                   set(packages)) - {name}
    missing = sorted(set(packages) - set(graph))
    if missing:
        raise HubError(f"locked but not installed: {', '.join(missing)}")
    cycle = find_cycle(graph)
    if cycle:
        raise HubError("dependency cycle (Bazel needs a graph without one): "
                       + " -> ".join(cycle))
    lines = ['package(default_visibility = ["//visibility:public"])', ""]
    for name, deps in sorted(graph.items()):
        lines += ["py_library(", f'    name = "{name}",',
                  f'    data = ["{SITE}/{name}/{IMPORT_ROOT}"],',
                  f'    imports = ["{SITE}/{name}"],']
        if deps:
            lines.append("    deps = [" + ", ".join(f'":{d}"' for d in sorted(deps)) + "],")
        lines += [")", ""]
    return "\n".join(lines)


def compile_bytecode(python, site):
    """Bytecode next to every source, checked by hash: imports under Bazel's
    sandbox, which cannot write __pycache__ here, do not compile each time."""
    subprocess.run([python, "-m", "compileall", "-q", "-j", "0", "--invalidation-mode",
                    "unchecked-hash", site], check=False, stdout=subprocess.DEVNULL)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lock", required=True, help="the lock file")
    parser.add_argument("--python", required=True, help="the interpreter the packages are for")
    parser.add_argument("--out", required=True, help="the repository folder")
    args = parser.parse_args(argv)
    packages = lock_packages(args.lock)
    site = os.path.join(args.out, SITE)
    if os.path.exists(site):
        shutil.rmtree(site)
    staging = tempfile.mkdtemp(prefix="staging-", dir=args.out)
    try:
        install(args.lock, args.python, staging)
        split(staging, site)
        build = build_file(site, packages)
    except HubError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    compile_bytecode(args.python, site)
    with open(os.path.join(args.out, "BUILD.bazel"), "w") as f:
        f.write(build)
    return 0


if __name__ == "__main__":
    sys.exit(main())
