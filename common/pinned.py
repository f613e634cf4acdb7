"""The pinned tools and data a target carries (third_party/pinned/, tools/pinned.bzl).

    from common import pinned
    iverilog = pinned.path("iverilog")   # None unless the target depends on it

A target that depends on `//third_party/pinned:iverilog` (say) has
iverilog.path in its runfiles: the runfiles path of the tool, as Bazel names it
in either mode.
Outside Bazel (a checkout, an image) nothing is pinned, and callers fall back to
what the machine has. Standard library only.
"""

import os

from common import repo

_PACKAGE = os.path.join("third_party", "pinned")


def path(name):
    """The real path of pinned `name` in this process's runfiles, or None."""
    marker = os.path.join(repo.code_root(), _PACKAGE, name + ".path")
    try:
        with open(marker) as f:
            relative = f.read().strip()
    except FileNotFoundError:
        return None
    found = os.path.realpath(os.path.join(repo.code_root(), relative))
    if not os.path.exists(found):
        raise FileNotFoundError(f"{marker} names {relative}, which is not in the runfiles")
    return found
