"""Python runs this at the start of every process that //serving:vllm_server starts
(serving/vllm_server.py puts this folder first on their PYTHONPATH): vLLM's own
helper processes (`sys.executable -m vllm...`, e.g. its model registry's
inspection) import torchvision too, and need the same hook as the server
(serving/torchvision_cpu.py) before they do."""

from serving import torchvision_cpu

torchvision_cpu.install()
