"""Where the project's code and its checkout lie, from any context: the one way.

Two places, which differ under Bazel:
- `code_root()`: the directory the project's Python packages are imported from
  (the checkout, a Bazel runfiles tree, or `/app` in an image); a subprocess
  that imports project modules gets it as PYTHONPATH.
- `source_root()`: the checkout itself, with `.venvs/` and the `shared/` folder
  beside it. Under `bazel run`/`bazel test` the runfiles tree holds a link to
  the checkout's `MODULE.bazel` (a data dependency of //common:repo), whose real
  path leads back to the checkout.

Standard library only: the tooling scripts (tools/venvs.py, tools/pip_hub.py)
import it with the system python3, outside Bazel.
"""

import os

MARKER = "MODULE.bazel"


def code_root():
    """The directory holding the project's packages (this file is <it>/common/repo.py)."""
    # abspath, not realpath: in a runfiles tree the file is a link into the checkout,
    # and the runfiles tree is what holds every package a binary depends on.
    return os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def source_root():
    """The checkout's root directory (links of a runfiles tree resolved)."""
    marker = os.path.join(code_root(), MARKER)
    if not os.path.exists(marker):
        raise FileNotFoundError(
            f"{marker} not found: not run from a checkout, or a Bazel target that needs the "
            "checkout does not depend on //common:repo")
    return os.path.dirname(os.path.realpath(marker))
