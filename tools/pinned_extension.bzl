"""Online mode only (bzlmod): the module extension that creates the pinned
repositories of tools/pinned.bzl. Bazel 4.2.3 (offline mode) has no module
extensions; WORKSPACE calls the repository rules directly."""

load(":pinned.bzl", "test_tools", "verilog_eval_data")

def _pinned_impl(_):
    test_tools(name = "test_tools")
    verilog_eval_data(name = "verilog_eval")

pinned = module_extension(implementation = _pinned_impl)
