"""The layers of the code, bottom first: a package may depend only on packages of
lower layers (and on itself). Each package's default_visibility is the package
group `//:above_<its layer>`, so Bazel rejects an edge that runs back up;
//tests:layering_test checks the BUILD files against this table, and
tools/check_layers.py checks the built graph with `bazel query`.
"""

LAYERS = [
    # config flags, the error path, the machine table; the image builder
    ("tools_common", ["//tools/common", "//tools/oci"]),
    ("data", ["//data"]),  # rows -> token ids + loss masks
    ("formats", ["//training/formats"]),  # Gemma 4 and its files: dims, maps, adapters, base
    ("training_common", ["//training/common"]),  # recipe, run lifecycle, schedule, FLOPs
    ("stacks", ["//training/tpu", "//training/gpu"]),
    ("stages", ["//conversion", "//serving", "//eval"]),
    ("tools", ["//tools"]),  # the report, lock and pin tools
    ("pipeline", ["//"]),  # the whole system in one command
    ("tests", ["//tests"]),  # cross-stage tests
]

# buildifier: disable=unnamed-macro
def layer_package_groups():
    """Defines `above_<layer>` for every layer: the packages of all higher layers."""
    for index, (name, _) in enumerate(LAYERS):
        above = []
        for _, packages in LAYERS[index + 1:]:
            above += packages
        native.package_group(name = "above_" + name, packages = above)
