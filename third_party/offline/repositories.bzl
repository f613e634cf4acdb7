"""Repository rules of the offline mode (Bazel 4.2.3, no network).

Online, rules_python provides a hermetic CPython and `pip.parse` hubs built from
the lock files. Offline, the same labels are served by:
  * `venv_python_toolchain`: a Python toolchain whose interpreter is a virtualenv
    that ./bazelw built from a lock file (the training runtime of the machine's
    accelerator, G4_TRAIN_VENV);
  * `lock_file_hub`: a `@pypi_*` repository with one (empty) py_library per
    package of a lock file and the `requirement()` macro, so that BUILD files
    can name their third-party dependencies in both modes, and a dependency
    missing from the lock fails the build here too. By default it lists no
    wheels (`all_whl_requirements` is empty): offline image layers carry the lock
    files, not the packages;
  * `offline_base_image`: the repository an `oci.pull` creates online, holding a
    small local layout (`oci_offline_base`) that stands for the pulled base and
    is pinned by its own digest.

With G4_OFFLINE_IMAGES=real (`--repo_env`, README "Images"), the images become
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

def _lock_file_hub_impl(rctx):
    packages = _lock_packages(rctx.read(rctx.attr.lock))
    build = ['package(default_visibility = ["//visibility:public"])', ""]
    for pkg in packages:
        build.append('py_library(name = "%s")' % pkg)
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

lock_file_hub = repository_rule(
    implementation = _lock_file_hub_impl,
    attrs = {"lock": attr.label(mandatory = True, allow_single_file = True)},
    environ = [REAL_IMAGES_ENV],
)

def _venv_python_toolchain_impl(rctx):
    root = rctx.path(Label("//:WORKSPACE")).dirname

    # ./bazelw names the training runtime of this machine's accelerator.
    venv = rctx.os.environ.get("G4_TRAIN_VENV") or "%s/%s" % (root, rctx.attr.venv)
    python = rctx.path("%s/bin/python3" % venv)
    if not python.exists:
        fail("No virtualenv at %s. Run Bazel through ./bazelw, which builds it from %s." %
             (python, rctx.attr.lock))
    rctx.file("BUILD.bazel", """\
load("@bazel_tools//tools/python:toolchain.bzl", "py_runtime_pair")
load("@rules_python//python:defs.bzl", "py_runtime")

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
""".format(python = python))

venv_python_toolchain = repository_rule(
    implementation = _venv_python_toolchain_impl,
    attrs = {
        "venv": attr.string(mandatory = True, doc = "Unless G4_TRAIN_VENV names another."),
        "lock": attr.string(mandatory = True),
    },
    environ = ["G4_TRAIN_VENV"],
    local = True,
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
