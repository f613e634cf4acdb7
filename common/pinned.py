"""The pinned tools and data a target carries (third_party/pinned/, tools/pinned.bzl).

    from common import pinned
    iverilog = pinned.tool("iverilog")   # the executable to run
    problems = pinned.path("verilog_eval")  # None unless the target depends on it

A target that depends on `//third_party/pinned:iverilog` (say) has
iverilog.path in its runfiles: the runfiles path of the tool, as Bazel names it
in either mode.
Outside Bazel (a checkout, an image, the no-Bazel runner) nothing is pinned and
`tool` takes what the machine has on PATH. Under Bazel it never does: a target
that runs a pinned tool without carrying it fails here, on every machine, rather
than pass where the host happens to have the tool and fail on a bare one.
Standard library only.
"""

import os
import shutil

from common import repo

_PACKAGE = os.path.join("third_party", "pinned")
# The executables third_party/pinned/BUILD.bazel pins (its other entries are data).
TOOLS = ("bwrap", "iverilog", "vvp")


class NotCarried(FileNotFoundError):
    """A Bazel target runs a pinned tool its data does not carry."""


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


def under_bazel():
    """Whether this process runs from a Bazel runfiles tree (`bazel run`/`test`)."""
    return os.path.basename(os.path.dirname(repo.code_root())).endswith(".runfiles")


def tool(name):
    """The absolute path of executable `name`: the pinned one where the target
    carries it; under Bazel, a pinned tool it does not carry is an error (never
    the host's); outside Bazel, the machine's on PATH. FileNotFoundError if none."""
    if name not in TOOLS:
        raise ValueError(f"{name!r} is not a pinned tool ({', '.join(TOOLS)})")
    found = path(name)
    if found:
        return found
    if under_bazel():
        raise NotCarried(
            f"{name} is pinned (//third_party/pinned:{name}) but this Bazel target does not "
            f"carry it: add the label to the target's data, never the host's {name}")
    found = shutil.which(name)
    if not found:
        raise FileNotFoundError(f"{name} is not on PATH (outside Bazel the machine's own "
                                f"{name} runs; `bazel run`/`bazel test` bring the pinned one)")
    return os.path.realpath(found)
