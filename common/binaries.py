"""Starting another binary of this repository: by its own launcher, the one way.

A stage or a test that starts another of our binaries names it by its Bazel label
and carries it in its target's `data`. The child then runs under the launcher
Bazel built for it, which puts that binary's own dependencies on its path, and
nothing borrowed: `python -m MODULE` with the parent's `sys.path` as PYTHONPATH
works only where one environment holds every package, and online Bazel
(rules_python, whose bootstrap passes no import paths through the environment)
gives no such environment.

    from common import binaries
    subprocess.run(binaries.command("//training/tpu:sft", "--config=cpu.py"),
                   env=binaries.child_env())

Standard library only.
"""

import os
import sys

from common import repo

# What a parent's launcher leaves in the environment that a child's launcher sets
# for itself: a borrowed import path must not reach the child.
_PARENT_ONLY = ("PYTHONPATH", "PYTHONHOME", "PYTHONSAFEPATH")


class NotInRunfiles(FileNotFoundError):
    """The binary is not among this process's runfiles (not in its target's `data`)."""


def _split(label):
    if not label.startswith("//") or label.count(":") != 1:
        raise ValueError(f"not a label of this repository, //PACKAGE:NAME: {label!r}")
    package, name = label[2:].split(":")
    return package, name


def launcher(label):
    """The path of binary `label`'s launcher in this process's runfiles."""
    package, name = _split(label)
    path = os.path.join(repo.code_root(), package, name)
    if not os.path.isfile(path) or not os.access(path, os.X_OK):
        raise NotInRunfiles(
            f"{label} is not in this process's runfiles (no launcher at {path}): add it to "
            "the `data` of the target that starts it, and run that target with Bazel")
    return path


def command(label, *args):
    """The command line that runs binary `label` with `args`."""
    return [launcher(label), *map(str, args)]


def child_env(env=None, **updates):
    """`env` (default: this process's) for a child started by its launcher: without
    the import paths of this process's launcher, with `updates` (None removes)."""
    out = {k: v for k, v in (os.environ if env is None else env).items()
           if k not in _PARENT_ONLY}
    for key, value in updates.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = str(value)
    return out


def import_path():
    """This process's import path as a PYTHONPATH value, for a child interpreter
    that must import what this process imports."""
    return os.pathsep.join(entry for entry in sys.path if entry)


def this_interpreter_env(env=None, **updates):
    """The environment for `[sys.executable, "-c", CODE]`, a child that imports what
    this process imports (a test's helper process, an emulator with no binary of
    its own): `child_env` with this process's import path handed on. Under any
    bootstrap, `sys.executable` alone may be a bare interpreter; with this it is
    not. Only for code whose imports are this target's own deps; binaries are
    started through command()."""
    out = child_env(env, **updates)
    out["PYTHONPATH"] = import_path()
    return out
