"""The layers of the code, bottom first: one top-level folder, one layer.

A package may depend only on packages of lower layers (and on itself). Each
package's default_visibility is the package group `above_LAYER` of the root
package (LAYER: its layer's name), so
Bazel rejects an edge that runs back up; //tests:layering_test checks the
BUILD files against this table, and tools/check_layers.py checks the built
graph with `bazel query`, folder by folder as well as package by package.

`tools/` is not a layer of the product: it holds build and repository tooling
(the image builder, locks, the offline pip hubs, pins, this table), imported by no
product code, visible only to tests and to the build (TOOLING), and using
nothing of the product but the bottom layer (common/repo.py finds the checkout).
"""

LAYERS = [
    # config flags, the one error path, the machine table, the repository root
    ("common", ["//common"]),
    ("data", ["//data"]),  # rows -> token ids + loss masks
    ("gemma4", ["//gemma4"]),  # Gemma 4 and its files: dims, maps, adapters, base, tiny model
    ("training_common", ["//training/common"]),  # recipe, run lifecycle, schedule, FLOPs
    ("stacks", ["//training/tpu", "//training/gpu"]),
    ("stages", ["//conversion", "//serving", "//eval"]),
    ("report", ["//report"]),  # the TPU-vs-GPU report and the whole-system pipeline
    ("pipeline", ["//"]),  # `//:pipeline`, the alias users type
    ("tests", ["//tests"]),  # cross-stage tests
]

# Build tooling outside the layers: no product package may depend on these
# (only tests, and the image rules through their builder tool).
TOOLING = ["//tools", "//tools/oci"]

# buildifier: disable=unnamed-macro
def layer_package_groups():
    """Defines `above_<layer>` for every layer: the packages of all higher layers."""
    for index, (name, _) in enumerate(LAYERS):
        above = []
        for _, packages in LAYERS[index + 1:]:
            above += packages
        native.package_group(name = "above_" + name, packages = above)
