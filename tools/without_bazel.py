"""Runs this repository's binaries on a host where Bazel cannot be installed.

A TPU VM without root or network (or one where a team may not install Bazel)
still needs the exact packages the lock pins. This script, which needs nothing
but Python 3.10+ and pip, puts the locked wheels into a folder of the
repository and runs a binary by its module, as Bazel would run its target:

    # 1. Where pip reaches PyPI: the wheels for the host's Python and platform
    #    (what the host already has at the locked version can be skipped).
    python3 tools/without_bazel.py download --dest=wheels --python_version=3.11 \\
        --without=torch,trl,peft,accelerate
    # 2. On the host, from the repository root (wheels/ copied beside it):
    python3 tools/without_bazel.py run --find_links=wheels --without=torch,trl,peft,accelerate \\
        training.tpu.sft -- --config=one_chip.py --workdir=runs/chip

`plan` prints what `run` would do without doing it. The set is the lock's
(the `*_lock.txt` files in third_party/requirements, `--locks=train,train_tpu` by default:
the training lock with the TPU overlay, libtpu) closed over its `# via` lines:
the direct requirements minus `--without` and what only they need. A package
the running Python already has at the locked version is used as it is (a TPU
VM's own JAX and libtpu); `--host` names packages whose host version is used
whatever it is (reported). The others are installed with pip (no dependencies
resolved, every wheel checked against the lock's hashes) into
`.without_bazel/site-DIGEST` (DIGEST: of the set), once; that folder goes first
on PYTHONPATH, the repository after it. The binary then replaces this process
(signals such as a preemption's SIGTERM reach it directly).
"""

import argparse
import dataclasses
import glob
import hashlib
import importlib.metadata
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LOCKS = os.path.join(ROOT, "third_party", "requirements")
SITES = os.path.join(ROOT, ".without_bazel")
_ENTRY = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;\\]+)")
_DIRECT = "-r "  # `# via -r train.in`: a requirement the .in file names


class Error(Exception):
    pass


@dataclasses.dataclass
class Locked:
    name: str  # normalized (PEP 503)
    version: str
    text: str  # the lock's whole entry: requirement, marker and hashes
    via: list  # normalized names of the packages that need it; "" for a direct requirement


def normalize(name):
    return re.sub(r"[-_.]+", "-", name).lower()


def read_lock(path):
    """{name: Locked} of a uv-compiled lock file."""
    entries, current, in_via = {}, None, False
    with open(path, encoding="utf-8") as f:
        for line in f:
            match = _ENTRY.match(line)
            if match:
                current = Locked(normalize(match.group(1)), match.group(2), line, [])
                entries[current.name] = current
                in_via = False
                continue
            if current is None:
                continue
            stripped = line.strip()
            if stripped.startswith("--hash") or stripped.startswith("--"):
                current.text += line
            elif stripped.startswith("# via"):
                rest = stripped[len("# via"):].strip()
                in_via = not rest
                if rest:
                    current.via.append("" if rest.startswith(_DIRECT) else normalize(rest))
            elif in_via and stripped.startswith("#   "):
                parent = stripped[len("#   "):].strip()
                current.via.append("" if parent.startswith(_DIRECT) else normalize(parent))
            elif not stripped:
                in_via = False
    return entries


def locked_set(locks, packages=(), without=()):
    """The lock files' entries (later ones replace earlier ones by name) closed
    over `# via`: `packages` (default: the direct requirements) not in
    `without`, and what they need."""
    entries = {}
    for lock in locks:
        path = os.path.join(LOCKS, f"{lock}_lock.txt")
        if not os.path.exists(path):
            raise Error(f"no lock {path}; known: {', '.join(sorted(known_locks()))}")
        entries.update(read_lock(path))
    without = {normalize(name) for name in without}
    packages = {normalize(name) for name in packages}
    unknown = sorted((without | packages) - set(entries))
    if unknown:
        raise Error(f"{', '.join(unknown)}: not pinned by the lock(s) {', '.join(locks)}")
    roots = packages or {name for name, entry in entries.items() if "" in entry.via}
    needed = roots - without
    # An overlay's entries (libtpu) name parents (jax) the closure reaches anyway.
    grew = True
    while grew:
        grew = False
        for name, entry in entries.items():
            if name not in needed and name not in without and \
                    any(parent in needed for parent in entry.via):
                needed.add(name)
                grew = True
    return {name: entries[name] for name in sorted(needed)}


def known_locks():
    return [name[:-len("_lock.txt")] for name in os.listdir(LOCKS) if name.endswith("_lock.txt")]


def host_version(name):
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def _same(host, locked):
    """Whether a host version is the locked one ("2.13.0" is "2.13.0+cpu"'s release)."""
    return host is not None and (host == locked or host.split("+")[0] == locked.split("+")[0]
                                 and "+" not in host)


def plan(entries, host=()):
    """(from the host, to install): names used as the host has them, and Locked
    entries to install."""
    host = {normalize(name) for name in host}
    from_host, install = {}, []
    for name, entry in entries.items():
        version = host_version(name)
        if _same(version, entry.version) or (name in host and version is not None):
            from_host[name] = version
        else:
            install.append(entry)
    return from_host, install


def site_dir(install):
    digest = hashlib.sha256("".join(e.text for e in install).encode()).hexdigest()[:12]
    return os.path.join(SITES, f"site-{digest}")


def _requirements_file(entries, folder):
    path = os.path.join(folder, "requirements.txt")
    with open(path, "w", encoding="utf-8") as f:
        f.write("".join(e.text for e in entries))
    return path


def _pip_command():
    """This Python's pip, or the pip wheel its standard library bundles (ensurepip),
    run from the wheel itself: interpreters made for builds often ship without pip."""
    if importlib.util.find_spec("pip") is not None:
        return [sys.executable, "-m", "pip"]
    try:
        import ensurepip  # pylint: disable=import-outside-toplevel
    except ImportError:
        ensurepip = None
    bundled = sorted(glob.glob(os.path.join(os.path.dirname(ensurepip.__file__), "_bundled",
                                            "pip-*.whl"))) if ensurepip else []
    if not bundled:
        raise Error(f"{sys.executable} has no pip and no bundled one (ensurepip): install "
                    "pip for it (python3-pip)")
    return [sys.executable, os.path.join(bundled[-1], "pip")]


def _pip(args):
    command = [*_pip_command(), *args]
    done = subprocess.run(command, check=False)
    if done.returncode:
        raise Error(f"pip failed ({done.returncode}): {' '.join(command)}")


def install(entries, site, find_links=(), index_url=None):
    """Installs `entries` into `site` unless a completed install is there."""
    done_marker = os.path.join(site, ".complete")
    if os.path.exists(done_marker):
        return False
    tmp = f"{site}.tmp{os.getpid()}"
    os.makedirs(tmp, exist_ok=True)
    try:
        with tempfile.TemporaryDirectory() as folder:
            sources = ["--no-index"] if index_url is None else ["--index-url", index_url]
            for links in find_links:
                sources += ["--find-links", os.path.abspath(links)]
            _pip(["install", "--isolated", "--no-deps", "--only-binary=:all:", "--no-compile",
                  "--no-cache-dir", "--disable-pip-version-check", "--require-hashes", "-q",
                  "--target", tmp, *sources, "-r", _requirements_file(entries, folder)])
        with open(os.path.join(tmp, ".complete"), "w", encoding="utf-8") as f:
            f.write("".join(f"{e.name}=={e.version}\n" for e in entries))
        shutil.rmtree(site, ignore_errors=True)  # an install that did not finish
        os.replace(tmp, site)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return True


def download(entries, dest, python_version, platforms):
    os.makedirs(dest, exist_ok=True)
    with tempfile.TemporaryDirectory() as folder:
        args = ["download", "--isolated", "--no-deps", "--only-binary=:all:", "--require-hashes",
                "--disable-pip-version-check", "-q", "-d", dest,
                "-r", _requirements_file(entries, folder)]
        if python_version:
            args += ["--python-version", python_version, "--implementation", "cp"]
            for platform in platforms:
                args += ["--platform", platform]
        _pip(args)


def _describe(from_host, install_set, site):
    lines = [f"{len(from_host)} package(s) from this Python: " + ", ".join(
        f"{name} {version}" for name, version in sorted(from_host.items()))]
    lines.append(f"{len(install_set)} package(s) into {os.path.relpath(site, ROOT)}: " + ", ".join(
        f"{e.name} {e.version}" for e in install_set))
    return "\n".join(lines)


def _list(value):
    return [item for item in value.split(",") if item]


def _parser():
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--locks", default="train,train_tpu", type=_list,
                        help="lock names, later ones overlaying earlier ones (%(default)s)")
    common.add_argument("--packages", default="", type=_list,
                        help="what to install, with what it needs (default: the lock's "
                             "direct requirements)")
    common.add_argument("--without", default="", type=_list,
                        help="packages to leave out, with what only they need")
    local = argparse.ArgumentParser(add_help=False)
    local.add_argument("--host", default="", type=_list,
                       help="packages used as this Python has them, whatever their version")
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=__doc__.split("\n", 2)[2])
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("plan", parents=[common, local], help="what run would do")
    get = commands.add_parser("download", parents=[common], help="the wheels, where pip "
                              "reaches PyPI")
    get.add_argument("--skip", default="", type=_list,
                     help="packages the target host has at the locked version")
    get.add_argument("--dest", default="wheels", help="the wheels' folder (%(default)s)")
    get.add_argument("--python_version", default="", help="the host's Python (3.11), if "
                     "not this one")
    # Up to glibc 2.35, a TPU VM's (Ubuntu 22.04): libtpu's wheel is manylinux_2_31.
    get.add_argument("--platforms", type=_list, default=(
        "manylinux_2_35_x86_64,manylinux_2_34_x86_64,manylinux_2_31_x86_64,"
        "manylinux_2_28_x86_64,manylinux_2_27_x86_64,manylinux_2_17_x86_64,"
        "manylinux2014_x86_64,manylinux1_x86_64,any"),
        help="wheel platforms (default: x86-64 Linux with glibc 2.35 or newer, as TPU and "
        "GPU VM images have)")
    run = commands.add_parser("run", parents=[common, local], help="install, then run a "
                              "binary: run [OPTIONS] MODULE -- FLAGS")
    run.add_argument("--find_links", default="", type=_list, help="folders of wheels")
    run.add_argument("--index_url", default=None,
                     help="a package index to install from as well (default: none)")
    run.add_argument("module", help="the binary's module, as in training.tpu.sft")
    run.add_argument("args", nargs=argparse.REMAINDER, help="the binary's flags, after --")
    return parser


def main(argv=None):
    args = _parser().parse_args(argv)
    try:
        entries = locked_set(args.locks, args.packages, args.without)
        if args.command == "download":
            wanted = [e for name, e in entries.items()
                      if name not in {normalize(s) for s in args.skip}]
            download(wanted, args.dest, args.python_version, args.platforms)
            print(f"{len(wanted)} wheel(s) in {args.dest}")
            return 0
        from_host, install_set = plan(entries, args.host)
        site = site_dir(install_set)
        print(_describe(from_host, install_set, site), flush=True)
        if args.command == "plan":
            return 0
        if install_set:
            install(install_set, site, args.find_links, args.index_url)
        flags = args.args[1:] if args.args[:1] == ["--"] else args.args
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            [site, ROOT] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
        # Relative paths in flags mean the user's directory, as under `bazel run`.
        env.setdefault("BUILD_WORKING_DIRECTORY", os.getcwd())
        os.execve(sys.executable, [sys.executable, "-m", args.module, *flags], env)
    except Error as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
