"""The project's images, defined once for both Bazel modes.

`project_image` stacks, on a base pinned by digest:
  1. a Python layer: the image's lock files under /opt/g4/locks and their wheels
     installed into /opt/g4/site-packages;
  2. the project layer: the first-party sources a binary needs (its runfiles
     from this repository, no generated launcher) under /app;
and sets the entrypoint (`python3 -m MODULE ARGS...`), PYTHONPATH and labels (the
source commit, each lock's sha256, the base digest, the vLLM/JAX/torch versions).
It defines the image `name` (an OCI layout) and `push_name`, which pushes it
(`bazel run //serving:push_tpu_image -- --repository=HOST/PATH --tag=TAG`: the
digest, then each TAG given; no tag without --tag). There is no default
repository: a push without --repository is refused with one error line (online
rules_oci's "repository not set", offline our stand-in's). Every target here is
`manual`: `bazel build //...` and `bazel test //...` build no image (online, an
image would pull its multi-GB base); name one to build it.

Online, `oci_image` and `oci_push` are rules_oci's; offline (Bazel 4.2.3), the
stand-ins in third_party/offline/rules_oci build the same layout with
tools/oci/ocibuild.py and push it with skopeo. The layers and labels below are
built by ocibuild.py in both modes, so they are byte-identical between them.
"""

load("@rules_oci//oci:defs.bzl", "oci_image", "oci_push")
load(":bases.bzl", "BASES")

_OCIBUILD = Label("//tools/oci:ocibuild")

# Images are built when asked for by name, never by a `//...` pattern.
_MANUAL = ["manual"]

APP_DIR = "/app"
PYTHON_PREFIX = "/opt/g4"

def _app_layer_impl(ctx):
    entries = []
    for f in ctx.attr.binary[DefaultInfo].default_runfiles.files.to_list():
        # Sources of this repository only: third-party code comes from the Python
        # layer, and the generated launcher names this machine's interpreter.
        if f.is_source and not f.short_path.startswith("../"):
            entries.append("%s/%s\t%s" % (APP_DIR, f.short_path, f.path))
    listing = ctx.actions.declare_file(ctx.label.name + ".files")
    ctx.actions.write(listing, "\n".join(sorted(entries)) + "\n")
    out = ctx.actions.declare_file(ctx.label.name + ".tar.gz")
    ctx.actions.run(
        executable = ctx.executable._ocibuild,
        arguments = ["layer", "--out", out.path, "--files", listing.path],
        inputs = depset([listing], transitive = [ctx.attr.binary[DefaultInfo].default_runfiles.files]),
        outputs = [out],
        mnemonic = "OciAppLayer",
        progress_message = "Building the project layer %s" % ctx.label,
    )
    return [DefaultInfo(files = depset([out]))]

app_layer = rule(
    implementation = _app_layer_impl,
    doc = "The first-party sources in a binary's runfiles, as a layer under /app.",
    attrs = {
        "binary": attr.label(mandatory = True),
        "_ocibuild": attr.label(default = _OCIBUILD, executable = True, cfg = "exec"),
    },
)

def _python_layer_impl(ctx):
    out = ctx.actions.declare_file(ctx.label.name + ".tar.gz")
    listing = ctx.actions.declare_file(ctx.label.name + ".files")
    ctx.actions.write(listing, "".join([
        "%s/locks/%s\t%s\n" % (PYTHON_PREFIX, f.basename, f.path)
        for f in ctx.files.locks
    ]))
    args = [
        "layer",
        "--out",
        out.path,
        "--files",
        listing.path,
        "--site_packages",
        PYTHON_PREFIX + "/site-packages",
        "--bin_dir",
        PYTHON_PREFIX + "/bin",
    ]
    for wheel in ctx.files.wheels:
        args += ["--wheel", wheel.path]
    ctx.actions.run(
        executable = ctx.executable._ocibuild,
        arguments = args,
        inputs = [listing] + ctx.files.locks + ctx.files.wheels,
        outputs = [out],
        mnemonic = "OciPythonLayer",
        progress_message = "Installing %d wheels into the layer %s" % (len(ctx.files.wheels), ctx.label),
    )
    return [DefaultInfo(files = depset([out]))]

python_layer = rule(
    implementation = _python_layer_impl,
    doc = "Lock files and their wheels, installed under /opt/g4.",
    attrs = {
        "locks": attr.label_list(allow_files = [".txt"], mandatory = True),
        "wheels": attr.label_list(allow_files = [".whl"]),
        "_ocibuild": attr.label(default = _OCIBUILD, executable = True, cfg = "exec"),
    },
)

def _image_labels_impl(ctx):
    out = ctx.actions.declare_file(ctx.label.name + ".txt")
    args = ["labels", "--out", out.path, "--status", ctx.info_file.path]
    for f in ctx.files.locks:
        args += ["--lock", "%s=%s" % (f.basename.replace("_lock.txt", ""), f.path)]
    for package in ctx.attr.packages:
        args += ["--package", package]
    for key, value in sorted(ctx.attr.labels.items()):
        args += ["--label", "%s=%s" % (key, value)]
    ctx.actions.run(
        executable = ctx.executable._ocibuild,
        arguments = args,
        inputs = [ctx.info_file] + ctx.files.locks,
        outputs = [out],
        mnemonic = "OciLabels",
    )
    return [DefaultInfo(files = depset([out]))]

image_labels = rule(
    implementation = _image_labels_impl,
    doc = "KEY=VALUE labels: source commit (stable status), lock hashes, versions.",
    attrs = {
        "locks": attr.label_list(allow_files = [".txt"]),
        "packages": attr.string_list(doc = "Packages whose locked version becomes a label."),
        "labels": attr.string_dict(),
        "_ocibuild": attr.label(default = _OCIBUILD, executable = True, cfg = "exec"),
    },
)

def overlay_wheels(base, overlay):
    """The wheels of `base` not replaced by `overlay`, then `overlay`'s.

    Both are `all_whl_requirements_by_package` of a pip hub (package -> wheel).
    """
    return [wheel for package, wheel in base.items() if package not in overlay] + overlay.values()

def project_image(
        name,
        push_name,
        base,
        binary,
        module,
        args,
        locks,
        wheels = [],
        packages = [],
        env = {}):
    """An image of `binary` on `base`, and `push_name`, which pushes it.

    Args:
      name: the image target (an OCI layout).
      push_name: the push target.
      base: a key of BASES (tools/oci/bases.bzl): a base pinned by digest.
      binary: the py_binary whose first-party sources form the project layer.
      module: the binary's module (`python3 -m MODULE`).
      args: arguments after the module (the machine config).
      locks: lock files of the Python layer, hashed into the labels.
      wheels: wheels installed into the Python layer.
      packages: packages whose locked version becomes a label.
      env: extra environment (`$NAME` expands to the base's value).
    """
    if base not in BASES:
        fail("%s: unknown base %r; known: %s" % (name, base, ", ".join(BASES)))
    pinned = BASES[base]
    image_name, _, base_digest = pinned["image"].partition("@")
    app_layer(name = name + "_app_layer", binary = binary, tags = _MANUAL)
    python_layer(name = name + "_python_layer", locks = locks, wheels = wheels, tags = _MANUAL)
    labels = {
        "org.opencontainers.image.base.name": image_name,
        "org.opencontainers.image.base.digest": base_digest,
    }
    for package, version in pinned["versions"].items():
        labels["dev.gemma4-toolkit.version." + package] = version
    image_labels(
        name = name + "_labels",
        locks = locks,
        packages = packages,
        labels = labels,
        tags = _MANUAL,
    )
    oci_image(
        name = name,
        base = pinned["label"],
        tars = [name + "_python_layer", name + "_app_layer"],
        entrypoint = ["python3", "-m", module] + args,
        env = dict(env, PYTHONPATH = "%s:%s/site-packages" % (APP_DIR, PYTHON_PREFIX)),
        workdir = APP_DIR,
        labels = name + "_labels",
        tags = _MANUAL,
    )

    # No remote_tags: rules_oci pushes them in addition to every --tag, so a
    # default tag could not be replaced. A push without --tag is by digest only.
    oci_push(
        name = push_name,
        image = name,
        tags = _MANUAL,
    )
