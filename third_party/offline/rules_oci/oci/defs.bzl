"""Offline stand-in for rules_oci (Bazel 4.2.3, no registry access).

Same names and attributes as the rules_oci subset the BUILD files use:
  * `oci_image(name, base, tars, entrypoint, cmd, env, workdir, labels)` builds a
    real OCI image layout (a directory) with the project's deterministic builder,
    tools/oci/ocibuild.py;
  * `oci_push(name, image, repository, remote_tags)` is an executable that copies
    the layout to a registry with skopeo, by digest first, then each tag
    (`-- --repository=HOST/PATH` overrides the repository, and without either
    the push is refused with one error line; each `--tag=TAG` is
    pushed besides remote_tags, as rules_oci does). Only to a localhost
    registry: an offline image cannot run, so a push anywhere else is refused
    with one error line saying why.
And one rule of its own, `oci_offline_base(name, image, digest)`: the local
layout that stands in for a pulled base offline (one small layer naming the image
it replaces), checked against its own pinned digest. Offline images exercise the
build, the labels and the push; they are not meant to run on a TPU or GPU.
"""

_OCIBUILD = Label("@//tools/oci:ocibuild")

OciImageInfo = provider(
    doc = "An OCI image layout and its manifest digest.",
    fields = {"layout": "the layout directory", "digest": "file holding sha256:..."},
)

def _build(ctx, layers, base, labels, expect_digest, arguments):
    layout = ctx.actions.declare_directory(ctx.label.name)
    digest = ctx.actions.declare_file(ctx.label.name + ".digest")
    args = ["image", "--out", layout.path, "--digest_out", digest.path] + arguments
    inputs = list(layers)
    for layer in layers:
        args += ["--layer", layer.path]
    if base:
        args += ["--base", base.path]
        inputs.append(base)
    if labels:
        args += ["--labels", labels.path]
        inputs.append(labels)
    if expect_digest:
        args += ["--expect_digest", expect_digest]
    ctx.actions.run(
        executable = ctx.executable._ocibuild,
        arguments = args,
        inputs = inputs,
        outputs = [layout, digest],
        mnemonic = "OciImage",
        progress_message = "Building the OCI image %s" % ctx.label,
    )
    return [
        DefaultInfo(files = depset([layout])),
        OutputGroupInfo(digest = depset([digest])),
        OciImageInfo(layout = layout, digest = digest),
    ]

def _oci_image_impl(ctx):
    arguments = []
    if ctx.attr.entrypoint:
        arguments += ["--entrypoint", json_list(ctx.attr.entrypoint)]
    if ctx.attr.cmd:
        arguments += ["--cmd", json_list(ctx.attr.cmd)]
    for key, value in sorted(ctx.attr.env.items()):
        arguments += ["--env", "%s=%s" % (key, value)]
    if ctx.attr.workdir:
        arguments += ["--workdir", ctx.attr.workdir]
    base = ctx.attr.base[OciImageInfo].layout if ctx.attr.base else None
    return _build(ctx, ctx.files.tars, base, ctx.file.labels, None, arguments)

def json_list(values):
    """A JSON list of strings (Bazel 4.2.3's Starlark has no json module)."""
    return "[" + ",".join(['"%s"' % v.replace("\\", "\\\\").replace('"', '\\"') for v in values]) + "]"

oci_image = rule(
    implementation = _oci_image_impl,
    attrs = {
        "base": attr.label(providers = [OciImageInfo]),
        "tars": attr.label_list(allow_files = [".tar.gz", ".tar"]),
        "entrypoint": attr.string_list(),
        "cmd": attr.string_list(),
        "env": attr.string_dict(),
        "workdir": attr.string(),
        "labels": attr.label(allow_single_file = True),
        "_ocibuild": attr.label(default = _OCIBUILD, executable = True, cfg = "exec"),
    },
)

def _oci_offline_base_impl(ctx):
    env = ["--env", "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"]
    if ctx.files.layers:  # a real base (G4_OFFLINE_IMAGES=real), pinned by its inputs
        return _build(ctx, ctx.files.layers, None, None, None, env)
    note = ctx.actions.declare_file(ctx.label.name + ".note")
    ctx.actions.write(note, "Offline stand-in for %s: for testing the build, not for running.\n" %
                            ctx.attr.image)
    listing = ctx.actions.declare_file(ctx.label.name + ".files")
    ctx.actions.write(listing, "/etc/gemma4-offline-base\t%s\n" % note.path)
    layer = ctx.actions.declare_file(ctx.label.name + ".tar.gz")
    ctx.actions.run(
        executable = ctx.executable._ocibuild,
        arguments = ["layer", "--out", layer.path, "--files", listing.path],
        inputs = [note, listing],
        outputs = [layer],
        mnemonic = "OciBaseLayer",
    )
    return _build(ctx, [layer], None, None, ctx.attr.digest, env)

oci_offline_base = rule(
    implementation = _oci_offline_base_impl,
    attrs = {
        "image": attr.string(mandatory = True, doc = "The pulled image it stands for."),
        "digest": attr.string(doc = "This layout's own pinned digest (the stand-in's)."),
        "layers": attr.label_list(allow_files = [".tar.gz"], doc = "A real base's layers."),
        "_ocibuild": attr.label(default = _OCIBUILD, executable = True, cfg = "exec"),
    },
)

def _oci_push_impl(ctx):
    image = ctx.attr.image[OciImageInfo]
    script = ctx.actions.declare_file(ctx.label.name + ".sh")
    ctx.actions.expand_template(
        template = ctx.file._template,
        output = script,
        substitutions = {
            "{{layout}}": image.layout.short_path,
            "{{digest}}": image.digest.short_path,
            "{{repository}}": ctx.attr.repository,
            "{{tags}}": " ".join(ctx.attr.remote_tags),
            "{{workspace}}": ctx.workspace_name,
        },
        is_executable = True,
    )
    return [DefaultInfo(
        executable = script,
        runfiles = ctx.runfiles(files = [image.layout, image.digest]),
    )]

oci_push = rule(
    implementation = _oci_push_impl,
    executable = True,
    attrs = {
        "image": attr.label(mandatory = True, providers = [OciImageInfo]),
        "repository": attr.string(doc = "Unless --repository names one; none: the push fails."),
        "remote_tags": attr.string_list(),
        "_template": attr.label(default = "//oci:push.sh.tpl", allow_single_file = True),
    },
)
