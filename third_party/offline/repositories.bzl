"""Repository rules of the offline mode (Bazel 4.2.3, no network).

Online, rules_python provides a hermetic CPython and `pip.parse` hubs built from
the lock files. Offline, the same labels are served by:
  * `venv_python_toolchain`: a Python toolchain whose interpreter is a virtualenv
    that ./bazelw built from a lock file;
  * `lock_file_hub`: a `@pypi_*` repository with one (empty) py_library per
    package of a lock file and the `requirement()` macro, so that BUILD files
    can name their third-party dependencies in both modes, and a dependency
    missing from the lock fails the build here too.
"""

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
    rctx.file("BUILD.bazel", "\n".join(build) + "\n")
    rctx.file("requirements.bzl", """\
_PACKAGES = {packages}

def requirement(name):
    key = name.lower().replace("-", "_").replace(".", "_")
    if key not in _PACKAGES:
        fail("%s is not in {lock}; add it to the .in file and run tools/update_locks.sh" % name)
    return "@{repo}//:" + key
""".format(packages = repr({p: True for p in packages}), lock = str(rctx.attr.lock), repo = rctx.name))

lock_file_hub = repository_rule(
    implementation = _lock_file_hub_impl,
    attrs = {"lock": attr.label(mandatory = True, allow_single_file = True)},
)

def _venv_python_toolchain_impl(rctx):
    root = rctx.path(Label("//:WORKSPACE")).dirname
    python = rctx.path("%s/%s/bin/python3" % (root, rctx.attr.venv))
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
        "venv": attr.string(mandatory = True),
        "lock": attr.string(mandatory = True),
    },
    local = True,
)
