"""The accelerator setting: which runtime the training stacks resolve (docs/build.md, "Runtimes").

`//common:accelerator` is a string flag (cpu, tpu or gpu). Its default is what the
machine running Bazel has, detected once per Bazel server by the `local_accelerator`
repository (tools/accelerator.py, the same detection ./bazelw exports for the
offline `pypi_train` hub; G4_ACCELERATOR overrides it): a TPU VM resolves libtpu for the TPU
stack and a GPU VM CUDA torch for the GPU stack, with no flag to know, and CPU
machines (CI) download neither. `--config=cpu|tpu|gpu` (.bazelrc) chooses by hand,
e.g. to build on one machine for another.
"""

ACCELERATORS = ["cpu", "tpu", "gpu"]

def _accelerator_flag_impl(ctx):
    if ctx.build_setting_value not in ACCELERATORS:
        fail("--//common:accelerator=%s: use one of %s" % (ctx.build_setting_value, ", ".join(ACCELERATORS)))
    return []

accelerator_flag = rule(
    implementation = _accelerator_flag_impl,
    build_setting = config.string(flag = True),
    doc = "cpu, tpu or gpu: the runtime the training stacks resolve.",
)

def _local_accelerator_impl(rctx):
    python = rctx.which("python3")
    detected = "cpu"
    if python:
        result = rctx.execute([python, rctx.path(Label("//tools:accelerator.py"))])
        if result.return_code:
            fail("tools/accelerator.py failed: " + result.stderr)
        detected = result.stdout.strip()
    rctx.file("BUILD.bazel", "")
    rctx.file("defs.bzl", "# Detected by tools/accelerator.py.\nACCELERATOR = %r\n" % detected)

local_accelerator = repository_rule(
    implementation = _local_accelerator_impl,
    doc = "`@local_accelerator//:defs.bzl`: ACCELERATOR, what this machine has.",
    environ = ["G4_ACCELERATOR"],
    local = True,
)
