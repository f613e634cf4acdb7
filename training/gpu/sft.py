"""LoRA SFT of Gemma 4 on GPU: PyTorch, TRL, PEFT, FSDP.

    bazel run //training/gpu:sft -- --config=h100x2.py --workdir=runs/h100x2

With config.num_processes > 1 the binary starts itself once per GPU through
torchrun (torch.distributed.run). Without --config it trains the tiny random
Gemma 4 on the sample data on CPU. Rerunning the same command resumes from the
newest checkpoint in --workdir; the final PEFT adapter lands in WORKDIR/adapter.
--workdir may be a gs:// URL: checkpoints are written locally, uploaded as each
is saved, and the newest is copied back before a resume.

Several machines: config.num_processes counts the processes of all of them
(one per GPU), and each machine runs the same command with its --node_rank:

    bazel run //training/gpu:sft -- --config=h100x2.py --config.num_processes=4 \
        --nnodes=2 --node_rank=0 --master_addr=10.0.0.2 --workdir=/shared/runs/h100x4 \
        --shared_fs

A config whose machine has GPUs is refused at once where the process sees
fewer than its share of them (a CPU build of torch sees none).
"""

import logging
import os
import signal
import sys
import time

from absl import app
from absl import flags
from absl import logging as absl_logging

from common import cli
from common import config_cli
from common import machines
from common import run_dir
from common import storage
from gemma4 import base_model
from gemma4 import gemma4_map
from training.gpu import config_base
from training.gpu import launching
from training.gpu import memory_plan

_CONFIG = config_cli.define_config_flag(__file__)
_WORKDIR = flags.DEFINE_string(
    "workdir", "runs/gpu-sft", "Run directory: config, metrics, checkpoints (resumed if "
    "present); a local folder or a gs://BUCKET/... URL.")
_SHARED_FS = flags.DEFINE_bool(
    "shared_fs", False, "With --nnodes > 1: --workdir is a file system every machine mounts "
    "(NFS, Filestore).")
_NNODES = flags.DEFINE_integer(
    "nnodes", 1, "Machines taking part; config.num_processes is divided among them.",
    lower_bound=1)
_NODE_RANK = flags.DEFINE_integer("node_rank", 0, "This machine's index, 0 to --nnodes - 1.",
                                  lower_bound=0)
_MASTER_ADDR = flags.DEFINE_string(
    "master_addr", "127.0.0.1", "Address of machine 0, which every machine can reach "
    "(required with --nnodes > 1).")
_MASTER_PORT = flags.DEFINE_integer(
    "master_port", 0, "Port of the rendezvous on machine 0 (0: a free port, one machine "
    "only; with --nnodes > 1 every machine must give the same port).")


def launch(config, workdir):
    """Re-runs this binary under torchrun, one process per device; returns its exit code.

    A SIGTERM to this process (a preempted VM; on GKE the pod's first process) is
    torchrun's to pass on: every worker saves the step's checkpoint and exits. This
    process then exits as a preempted trainer does (config.preempted_exit_code: 143
    on a JobSet, so that its Job fails and the JobSet restarts it) if the run
    recorded that save (run.json: this launch's segment ends `preempted`), else 1.
    Workers that stop for another machine's SIGTERM (--nnodes > 1) exit with that
    status too, which is the same preemption, not a failure."""
    from torch.distributed import run as torchrun  # pylint: disable=import-outside-toplevel
    from torch.distributed.elastic.multiprocessing import api  # pylint: disable=import-outside-toplevel
    from torch.distributed.elastic.multiprocessing import errors  # pylint: disable=import-outside-toplevel
    # Workers import this package as we do, from wherever it was found.
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    args = launching.torchrun_args(config.num_processes, _NNODES.value, _NODE_RANK.value,
                                   _MASTER_ADDR.value, _MASTER_PORT.value, sys.argv[1:])
    started = time.time()
    try:
        torchrun.main(args)
    except SystemExit as e:
        return e.code or 0
    except api.SignalException as e:
        if e.sigval != signal.SIGTERM:
            return 128 + e.sigval
        return launching.preempted_status(config, workdir, started, "SIGTERM")
    except Exception as e:  # pylint: disable=broad-except
        # torchrun raises ChildFailedError with the workers' exit codes and errors.
        codes = ([failure.exitcode for failure in e.failures.values()]
                 if isinstance(e, errors.ChildFailedError) else [])
        if launching.stopped_for_preemption(codes, config.preempted_exit_code):
            return launching.preempted_status(config, workdir, started,
                                              "a SIGTERM on another machine")
        print(f"error: a training process failed: {e}", file=sys.stderr)
        return 1
    return 0


def plan_memory(config):
    """The memory plan per GPU from the base's config.json alone (no weight is read or
    downloaded), refused when over the machine's memory. The tiny base is written
    by the run itself, and a name that is no base is the run's to refuse: nothing
    to plan for them here."""
    name = config.model.name
    if name in base_model.IN_RUN_DIR or not (os.path.isdir(name) or base_model.is_hub_id(name)):
        return
    dims = gemma4_map.Dims.from_hf_config(base_model.config_only(name)[0])
    memory_plan.plan(dims, config, machines.get(config.machine), config.num_processes,
                     config_base.use_fsdp(config, config.num_processes), print)


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    config = _CONFIG.value
    workdir = config_cli.user_path(_WORKDIR.value)
    launching.processes_per_node(config.num_processes, _NNODES.value)  # splits evenly
    if "LOCAL_RANK" not in os.environ:  # once, before torchrun starts the workers
        plan_memory(config)
    launching.check_devices(config, _NNODES.value)
    if storage.is_url(workdir) and _NNODES.value > 1:
        raise cli.UserError(
            "a gs:// --workdir serves runs on one machine: with --nnodes > 1 each machine's "
            "checkpoint shards stay on its own disk. Use a file system every machine mounts, "
            "with --shared_fs")
    if not _SHARED_FS.value:
        run_dir.check_shared(workdir, _NNODES.value, bucket_ok=False)
    run_dir.prepare(workdir)  # no bucket, no credentials, no write access: one line
    if config.num_processes > 1 and "LOCAL_RANK" not in os.environ:
        # Workers see the same flags; the workdir must not depend on their cwd.
        sys.argv = [a for a in sys.argv if not a.startswith("--workdir")] + [f"--workdir={workdir}"]
        raise SystemExit(launch(config, workdir))
    absl_logging.set_verbosity(absl_logging.WARNING)
    logging.getLogger("training").setLevel(logging.INFO)
    from training.gpu import trainer  # pylint: disable=import-outside-toplevel
    step = trainer.train(config, workdir)
    if int(os.environ.get("RANK", "0")) == 0:
        print(f"trained to step {step}; run directory {workdir}")


if __name__ == "__main__":
    cli.run(main)
