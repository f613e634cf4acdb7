"""Where the source tree and the shared VerilogEval data lie, from any context.

CI clones the repository at an unknown place next to a `shared/` folder, so the
default data set is `<repo root>/../shared/verilog-eval/dataset_spec-to-rtl`.
The repo root is found from `MODULE.bazel`: under `bazel run`/`bazel test` the
file is a runfile (a data dependency on `//:MODULE.bazel`) whose real path is
the source tree's; run from a checkout (`python -m eval.verilog_eval`) it is
the checkout's own file. Targets that call these functions need that data
dependency.
"""

import os

_MARKER = "MODULE.bazel"
SHARED_DATASET = os.path.join("shared", "verilog-eval", "dataset_spec-to-rtl")


def source_root():
    """The source tree's root directory (symlinks of runfiles resolved)."""
    # This file is <root>/eval/repo_paths.py, in the source tree or in a
    # runfiles tree that mirrors it; abspath keeps the runfiles path.
    candidate = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                             _MARKER)
    if not os.path.exists(candidate):
        raise FileNotFoundError(
            f"{candidate} not found: a Bazel target using eval.repo_paths needs "
            f"data = [\"//:{_MARKER}\"]")
    return os.path.dirname(os.path.realpath(candidate))


def default_dataset_dir():
    """$VERILOG_EVAL_DIR, else `<repo root>/../shared/verilog-eval/dataset_spec-to-rtl`."""
    override = os.environ.get("VERILOG_EVAL_DIR")
    if override:
        return os.path.abspath(override)
    return os.path.normpath(os.path.join(source_root(), os.pardir, SHARED_DATASET))
