"""Online mode only (bzlmod): the module extension that creates @local_accelerator.

Bazel 4.2.3 (offline mode) has no module extensions; WORKSPACE calls the
repository rule of tools/accelerator.bzl directly.
"""

load(":accelerator.bzl", "local_accelerator")

def _accelerator_impl(_):
    local_accelerator(name = "local_accelerator")

accelerator = module_extension(implementation = _accelerator_impl)
