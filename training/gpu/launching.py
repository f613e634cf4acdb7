"""How the GPU stack's processes start: torchrun's command line, and the GPUs it needs.

`//training/gpu:sft` runs itself once per GPU through torchrun (one machine by
default, several with --nnodes); before that, a config for a GPU machine is
refused where the process sees fewer GPUs than its share (a CPU build of torch
sees none), before anything is read or downloaded.
"""

import os
import socket
import sys

from common import cli
from common import machines
from common import run_dir
from common import storage

# How long torchrun lets its workers save and exit after it passes on a SIGTERM
# (a preempted VM, a GKE pod stopped) before it kills them: GKE's grace for a
# training pod (common/kubernetes.py TRAINING_GRACE_S), not torchrun's 30 s, which
# a 31B step plus a checkpoint upload can outlast. The platform's own SIGKILL
# still bounds it.
SHUTDOWN_S = 300


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def processes_per_node(processes, nnodes):
    if processes % nnodes:
        raise cli.UserError(f"config.num_processes={processes} does not split over "
                            f"--nnodes={nnodes} machines")
    return processes // nnodes


def torchrun_args(processes, nnodes=1, node_rank=0, master_addr="127.0.0.1", master_port=0,
                  argv=()):
    """torchrun's command line that runs this binary once per GPU on this machine."""
    per_node = processes_per_node(processes, nnodes)
    if node_rank >= nnodes:
        raise cli.UserError(f"--node_rank={node_rank} is not below --nnodes={nnodes}")
    if nnodes > 1 and (not master_port or master_addr in ("127.0.0.1", "localhost")):
        raise cli.UserError("with --nnodes > 1 give every machine the same --master_addr "
                            "(machine 0's address, not loopback) and --master_port")
    return [f"--nnodes={nnodes}", f"--node_rank={node_rank}",
            f"--nproc_per_node={per_node}",
            f"--master_addr={master_addr}", f"--master_port={master_port or free_port()}",
            f"--shutdown_timeout={SHUTDOWN_S}", "--module", "training.gpu.sft", *argv]


def check_devices(config, nnodes):
    """Refuses a GPU machine's config where this process sees fewer GPUs than its share."""
    machine = machines.get(config.machine)
    if machine.platform == "cpu":
        return
    import torch  # pylint: disable=import-outside-toplevel
    count = torch.cuda.device_count()
    local = int(os.environ.get("LOCAL_WORLD_SIZE", 0)) or processes_per_node(
        config.num_processes, nnodes)
    build = (f"This torch ({torch.__version__}) is a CPU build" if torch.version.cuda is None
             else f"This torch: {torch.__version__}, CUDA {torch.version.cuda}")
    machines.check_visible(
        machine, "gpu" if count else "cpu", count or 1, needed=local,
        hint=f"{build}. Run it on the machine it names, with its runtime (docs/build.md, "
             "\"Runtimes\"), or use --config=cpu.py here.")


def stopped_for_preemption(exit_codes, preempted_exit_code):
    """Whether workers that torchrun counts as failed all stopped for a preemption:
    each exited with the preempted status (a SIGTERM that reached another machine's
    workers stops these too, at the same step)."""
    return bool(preempted_exit_code) and bool(exit_codes) and \
        set(exit_codes) == {preempted_exit_code}


def preempted_status(config, workdir, started, why):
    """The launcher's exit status after its workers stopped for `why`:
    config.preempted_exit_code if this launch's run.json segment (one that began
    after `started`) ends `preempted`, i.e. the checkpoint was saved; 0 if it ends
    `finished` (the signal came as the run ended); else 1, said."""
    try:
        segments = run_dir.read_run_info(workdir).get("segments", [])
    except (cli.UserError, OSError, ValueError, storage.StorageError):
        segments = []
    ours = [s for s in segments if s.get("start", 0) >= started - 5]  # btime is in seconds
    end = ours[-1].get("end") if ours else None
    if end and end[2] == "preempted":
        print(f"{why}: every training process saved the checkpoint of step {end[1]} and "
              "stopped", file=sys.stderr)
        return config.preempted_exit_code
    if end and end[2] == "finished":  # the signal came as the run ended
        print(f"{why} after the run finished at step {end[1]}", file=sys.stderr)
        return 0
    print(f"error: {why}: the training processes stopped without recording a saved "
          f"checkpoint (run.json: {end if ours else 'no segment of this launch'}); the next "
          "run resumes from the last one saved", file=sys.stderr)
    return 1
