"""What the tests run besides Python, pinned and fetched by Bazel itself (both modes).

  * `test_tools`: Icarus Verilog (iverilog, vvp) and bubblewrap (bwrap) from the
    Debian packages tools/test_tools_debs.txt pins by URL and sha256, unpacked
    with a wrapper per tool (tools/test_tools.py);
  * `verilog_eval_data`: the VerilogEval v2 data at the pinned commit, every
    file checked against tools/verilog_eval.sha256 (tools/verilog_eval.py: the
    shared copy beside the checkout where it is intact, else a download);
  * `pinned_path`: a target's way to find one of them at run time. It writes
    NAME.path, the tool's runfiles path, which common/pinned.py reads: the
    repository's folder in a runfiles tree is named differently by Bazel 4
    and by bzlmod, and this path is what Bazel itself says.
WORKSPACE calls the repository rules (offline); MODULE.bazel reaches them
through tools/pinned_extension.bzl (online).
"""

def _run_script(rctx, what, args):
    """Runs `_inputs[0]` (a standard-library script of tools/) with the system python3.

    Every input is read first: reading a file through its label makes the
    repository depend on it, so a change to one fetches it again.
    """
    for label in rctx.attr._inputs:
        rctx.read(label)
    result = rctx.execute(
        [rctx.which("python3"), rctx.path(rctx.attr._inputs[0])] + args,
        timeout = 1800,
        quiet = False,
    )
    if result.return_code != 0:
        fail("%s failed:\n%s%s" % (what, result.stdout, result.stderr))

def _test_tools_impl(rctx):
    _run_script(rctx, "installing the pinned test tools", ["install", "--out", rctx.path(".")])
    rctx.file("BUILD.bazel", """\
package(default_visibility = ["//visibility:public"])

exports_files(glob(["bin/*"]))

# What the wrappers in bin/ run: every file of the unpacked packages.
filegroup(
    name = "root",
    srcs = glob(["root/**"]),
)
""")

test_tools = repository_rule(
    implementation = _test_tools_impl,
    doc = "`@NAME//:bin/{iverilog,vvp,bwrap}`: the pinned Debian test tools.",
    attrs = {
        # The script first (_run_script); fetched again when one of these changes.
        "_inputs": attr.label_list(default = [
            Label("//tools:test_tools.py"),
            Label("//tools:test_tools_debs.txt"),
            Label("//tools:debs.py"),
        ]),
    },
)

def _verilog_eval_data_impl(rctx):
    _run_script(rctx, "fetching the VerilogEval data", ["--dest", rctx.path("data")])
    rctx.file("BUILD.bazel", """\
package(default_visibility = ["//visibility:public"])

exports_files(["data/dataset_spec-to-rtl/problems.txt"])

filegroup(
    name = "data",
    srcs = glob(["data/**"]),
)
""")

verilog_eval_data = repository_rule(
    implementation = _verilog_eval_data_impl,
    doc = "`@NAME//:data`: the VerilogEval v2 spec-to-rtl data, pinned and checked.",
    attrs = {
        # The script first (_run_script); fetched again when one of these changes.
        "_inputs": attr.label_list(default = [
            Label("//tools:verilog_eval.py"),
            Label("//tools:verilog_eval.sha256"),
        ]),
    },
)

def _pinned_path_impl(ctx):
    out = ctx.actions.declare_file(ctx.label.name + ".path")
    ctx.actions.write(out, ctx.file.tool.short_path + "\n")
    return [DefaultInfo(
        files = depset([out]),
        runfiles = ctx.runfiles(files = [out, ctx.file.tool] + ctx.files.data),
    )]

pinned_path = rule(
    implementation = _pinned_path_impl,
    doc = "NAME.path: `tool`'s runfiles path (common/pinned.py), with `tool` and `data` in runfiles.",
    attrs = {
        "tool": attr.label(mandatory = True, allow_single_file = True),
        "data": attr.label_list(allow_files = True),
    },
)
