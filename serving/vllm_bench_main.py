"""Runs vLLM's own serving benchmark (`vllm bench serve`) with the given arguments.

Executed by the `serve` environment's python (the one with vLLM), not by the
training environment that runs serving/bench.py; it imports nothing of ours.
"""

import argparse
import asyncio
import inspect
import sys

from vllm.benchmarks import serve


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__)
    serve.add_cli_args(parser)
    result = serve.main(parser.parse_args(argv))
    if inspect.isawaitable(result):
        asyncio.run(result)


if __name__ == "__main__":
    main(sys.argv[1:])
