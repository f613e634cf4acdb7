"""Repository rules of the offline mode (Bazel 4.2.3, no network).

Online, rules_python provides a hermetic CPython and `pip.parse` hubs built from
the lock files. Offline, the same labels are served as strictly:
  * `bare_python_toolchain`: a Python toolchain whose interpreter holds no
    third-party package (a virtualenv of the system python3 without pip), so a
    process imports only what its target's `deps` put on its path, as online;
  * `pip_hub(name, lock)`: the hub `@NAME` (the `requirement()` macro and one
    alias per package of the lock, so that BUILD files name their third-party
    dependencies the same way in both modes and a package missing from the lock
    fails the build here too) over `@NAME_site`, where tools/pip_hub.py installs
    the lock by hash with one folder and one py_library per package, its `deps`
    read from its METADATA, the way rules_python lays out wheels. By default
    the hub lists no wheels (`all_whl_requirements` is empty): offline image
    layers carry the lock files, not the packages;
  * `offline_base_image`: the repository an `oci.pull` creates online, holding a
    small local layout (`oci_offline_base`) that stands for the pulled base and
    is pinned by its own digest.

With G4_OFFLINE_IMAGES=real (`--repo_env`, docs/build.md, "Images"), the images become
runnable: each hub downloads its lock's wheels (tools/venvs.py --wheels: pip,
every wheel checked against the lock's hashes) and lists them, and a base given
`debian_lock` is the Python base made from pinned Debian packages
(tools/oci/debian_base.py) instead of the stand-in.
"""

REAL_IMAGES_ENV = "G4_OFFLINE_IMAGES"

def _real_images(rctx):
    return rctx.os.environ.get(REAL_IMAGES_ENV) == "real"

def _run(rctx, what, command):
    result = rctx.execute(command, timeout = 3600, quiet = False)
    if result.return_code != 0:
        fail("%s failed (%s):\n%s" % (what, " ".join([str(c) for c in command]), result.stderr))

def _workspace_root(rctx):
    return rctx.path(Label("//:WORKSPACE")).dirname

def _normalize(name):
    # PEP 503 normalization, as rules_python does for hub target names.
    out = name.lower()
    for sep in ["-", "."]:
        out = out.replace(sep, "_")
    return out

def _lock_packages(content):
    packages = []
    for line in content.splitlines():
        if not line or line[0] in " #-":
            continue
        spec = line.split(" ")[0]
        if "==" not in spec:
            fail("unpinned requirement in lock file: %r" % line)
        packages.append(_normalize(spec.split("==")[0].split("[")[0]))
    return packages

def _hub_impl(rctx):
    packages = _lock_packages(rctx.read(rctx.attr.lock))
    build = ['package(default_visibility = ["//visibility:public"])', ""]
    for pkg in packages:
        build.append('alias(name = "%s", actual = "@%s//:%s")' % (pkg, rctx.attr.site, pkg))
    wheels = {}
    if _real_images(rctx):
        _run(rctx, "downloading the wheels of %s" % rctx.attr.lock, [
            rctx.which("python3"),
            "%s/tools/venvs.py" % _workspace_root(rctx),
            "--wheels",
            rctx.path(rctx.attr.lock),
            rctx.path("wheels"),
        ])
        for wheel in rctx.path("wheels").readdir():
            pkg = _normalize(wheel.basename.split("-")[0])
            wheels[pkg] = "@%s//:%s_whl" % (rctx.name, pkg)
            build.append('filegroup(name = "%s_whl", srcs = ["wheels/%s"])' % (pkg, wheel.basename))
    rctx.file("BUILD.bazel", "\n".join(build) + "\n")
    rctx.file("requirements.bzl", """\
_PACKAGES = {packages}

def requirement(name):
    key = name.lower().replace("-", "_").replace(".", "_")
    if key not in _PACKAGES:
        fail("%s is not in {lock}; add it to the .in file and run tools/update_locks.py" % name)
    return "@{repo}//:" + key

# Offline, wheels only with G4_OFFLINE_IMAGES=real (third_party/offline/repositories.bzl).
all_whl_requirements_by_package = {wheels}
all_whl_requirements = all_whl_requirements_by_package.values()
""".format(
        packages = repr({p: True for p in packages}),
        lock = str(rctx.attr.lock),
        repo = rctx.name,
        wheels = repr(wheels),
    ))

_hub = repository_rule(
    implementation = _hub_impl,
    doc = "`@NAME`: requirement(), aliases into `site`, and the wheels of real images.",
    attrs = {
        "lock": attr.label(mandatory = True, allow_single_file = True),
        "site": attr.string(mandatory = True),
    },
    environ = [REAL_IMAGES_ENV],
)

def _site_impl(rctx):
    # Reading a file through its label makes the repository depend on it.
    for label in rctx.attr._installer:
        rctx.read(label)
    lock = rctx.attr.lock
    if rctx.attr.gpu_lock and rctx.os.environ.get("G4_ACCELERATOR") == "gpu":
        lock = rctx.attr.gpu_lock  # as MODULE.bazel's pypi_train on linux_x86_64_gpu
    python = rctx.path(Label("@offline_python//:bin/python3"))
    rctx.report_progress("installing %s, one folder per package" % lock)
    _run(rctx, "installing the packages of %s" % lock, [
        rctx.which("python3"),
        rctx.path(Label("//tools:pip_hub.py")),
        "--lock",
        rctx.path(lock),
        "--python",
        python,
        "--out",
        rctx.path("."),
    ])

_site = repository_rule(
    implementation = _site_impl,
    doc = "`@NAME_site`: a lock's packages, one folder and one py_library each (tools/pip_hub.py).",
    attrs = {
        "lock": attr.label(mandatory = True, allow_single_file = True),
        "gpu_lock": attr.label(allow_single_file = True),
        # Fetched again when the installer changes.
        "_installer": attr.label_list(default = [
            Label("//tools:pip_hub.py"),
            Label("//tools:venvs.py"),
            Label("//third_party/requirements:uv_lock.txt"),
        ]),
    },
    environ = ["G4_ACCELERATOR"],
)

def pip_hub(name, lock, gpu_lock = None):
    """`@NAME`, the hub BUILD files load `requirement` from, over `@NAME_site`.

    `gpu_lock`: the lock on a GPU machine (G4_ACCELERATOR=gpu), as the online
    hub resolves train_gpu_lock.txt there. The hub itself is cheap: loading a
    BUILD file fetches it, while the packages are installed only when a target
    that needs them is analysed.
    """
    _hub(name = name, lock = lock, site = name + "_site")
    _site(name = name + "_site", lock = lock, gpu_lock = gpu_lock)

# The offline interpreter's sitecustomize. A package's folder is on sys.path as
# its runfiles path, which holds only the package's `.import_root` link
# (tools/pip_hub.py): the entry is replaced by the real folder the link points
# into. PYTHONPATH, which Bazel 4's launcher uses to pass those paths, is
# dropped once read, so a child process gets no borrowed path (online, the
# rules_python bootstrap passes none either).
_SITECUSTOMIZE = """\
import os
import sys


def _real(entry):
    marker = os.path.join(entry, ".import_root")
    if os.path.islink(marker):
        return os.path.dirname(os.path.realpath(marker))
    return entry


sys.path[:] = [_real(entry) for entry in sys.path]
os.environ.pop("PYTHONPATH", None)
"""

def _bare_python_toolchain_impl(rctx):
    python = rctx.which("python3")
    if not python:
        fail("python3 is not on PATH: the offline mode builds its interpreter from it")
    _run(rctx, "creating the bare interpreter", [python, "-m", "venv", "--without-pip", rctx.path("venv")])
    site = rctx.execute([
        rctx.path("venv/bin/python3"),
        "-c",
        "import sysconfig; print(sysconfig.get_paths()['purelib'])",
    ]).stdout.strip()
    rctx.file(site + "/sitecustomize.py", _SITECUSTOMIZE)
    rctx.symlink("venv/bin", "bin")
    interpreter = rctx.path("venv/bin/python3")
    rctx.file("BUILD.bazel", """\
load("@bazel_tools//tools/python:toolchain.bzl", "py_runtime_pair")
load("@rules_python//python:defs.bzl", "py_runtime")

exports_files(["bin/python3"])

py_runtime(
    name = "runtime",
    interpreter_path = "{python}",
    python_version = "PY3",
    # The launcher itself runs on this interpreter too (build tools such as
    # tools/oci:ocibuild run in sandboxes without a `python` on PATH).
    stub_shebang = "#!{python}",
)

py_runtime_pair(
    name = "runtime_pair",
    py3_runtime = ":runtime",
)

toolchain(
    name = "toolchain",
    toolchain = ":runtime_pair",
    toolchain_type = "@bazel_tools//tools/python:toolchain_type",
)
""".format(python = interpreter))

bare_python_toolchain = repository_rule(
    implementation = _bare_python_toolchain_impl,
    doc = "`@NAME//:toolchain`: the system python3 with no third-party package.",
)

def _offline_base_image_impl(rctx):
    rctx.file("WORKSPACE", 'workspace(name = "%s")\n' % rctx.name)
    if rctx.attr.debian_lock and _real_images(rctx):
        script = "%s/tools/oci/debian_base.py" % _workspace_root(rctx)
        python = rctx.which("python3")
        _run(
            rctx,
            "downloading the Debian packages of the Python base",
            [python, script, "fetch", rctx.path("debs")],
        )
        _run(rctx, "building the Python base layer", [
            python,
            script,
            "layer",
            "--debs",
            rctx.path("debs"),
            "--lock",
            rctx.path(rctx.attr.debian_lock),
            "--out",
            rctx.path("base.tar.gz"),
        ])
        rctx.file("BUILD.bazel", """\
load("@rules_oci//oci:defs.bzl", "oci_offline_base")

oci_offline_base(
    name = "{name}",
    image = "{image}",
    layers = ["base.tar.gz"],
    visibility = ["//visibility:public"],
)
""".format(name = rctx.name, image = "debian:bookworm python3.11 (%s)" % rctx.attr.debian_lock))
        return
    rctx.file("BUILD.bazel", """\
load("@rules_oci//oci:defs.bzl", "oci_offline_base")

oci_offline_base(
    name = "{name}",
    digest = "{digest}",
    image = "{image}",
    visibility = ["//visibility:public"],
)
""".format(name = rctx.name, digest = rctx.attr.digest, image = rctx.attr.image))

offline_base_image = repository_rule(
    implementation = _offline_base_image_impl,
    doc = "`@NAME` (i.e. `@NAME//:NAME`): the offline stand-in of a pulled base image.",
    attrs = {
        "image": attr.string(mandatory = True, doc = "The pulled image, IMAGE@sha256:..."),
        "digest": attr.string(mandatory = True, doc = "The stand-in layout's own digest."),
        "debian_lock": attr.label(
            allow_single_file = True,
            doc = "With G4_OFFLINE_IMAGES=real: the base is made from these Debian packages.",
        ),
    },
    environ = [REAL_IMAGES_ENV],
)
