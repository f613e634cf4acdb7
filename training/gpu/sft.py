"""LoRA SFT of Gemma 4 on GPU: PyTorch, TRL, PEFT, FSDP.

    bazel run //training/gpu:sft -- --config=h100x2.py --workdir=runs/h100x2

With config.num_processes > 1 the binary starts itself once per GPU through
torchrun (torch.distributed.run). Without --config it trains the tiny random
Gemma 4 on the sample data on CPU. Rerunning the same command resumes from the
newest checkpoint in --workdir; the final PEFT adapter lands in WORKDIR/adapter.
"""

import logging
import os
import socket
import sys

from absl import app
from absl import flags
from absl import logging as absl_logging

from common import cli
from common import config_cli

_CONFIG = config_cli.define_config_flag(__file__)
_WORKDIR = flags.DEFINE_string(
    "workdir", "runs/gpu-sft", "Run directory: config, metrics, checkpoints (resumed if present).")


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(processes):
    """Re-runs this binary under torchrun, one process per device; returns its exit code."""
    from torch.distributed import run as torchrun  # pylint: disable=import-outside-toplevel
    # Workers import this package as we do, from wherever it was found.
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    args = [f"--nproc_per_node={processes}", "--master_addr=127.0.0.1",
            f"--master_port={_free_port()}", "--module", "training.gpu.sft", *sys.argv[1:]]
    try:
        torchrun.main(args)
    except SystemExit as e:
        return e.code or 0
    except Exception as e:  # torchrun raises ChildFailedError with the workers' errors
        print(f"error: a training process failed: {e}", file=sys.stderr)
        return 1
    return 0


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    config = _CONFIG.value
    workdir = config_cli.user_path(_WORKDIR.value)
    if config.num_processes > 1 and "LOCAL_RANK" not in os.environ:
        # Workers see the same flags; the workdir must not depend on their cwd.
        sys.argv = [a for a in sys.argv if not a.startswith("--workdir")] + [f"--workdir={workdir}"]
        raise SystemExit(launch(config.num_processes))
    absl_logging.set_verbosity(absl_logging.WARNING)
    logging.getLogger("training").setLevel(logging.INFO)
    from training.gpu import trainer  # pylint: disable=import-outside-toplevel
    step = trainer.train(config, workdir)
    if int(os.environ.get("RANK", "0")) == 0:
        print(f"trained to step {step}; run directory {workdir}")


if __name__ == "__main__":
    cli.run(main)
