"""The machines this project trains and serves on: the one table of their figures.

Every price and peak in the project comes from here: the trainers' MFU, the
HBM check before a TPU run, the serving sweep's $ per 1M output tokens and the
report's costs. Configs name a machine (`config.machine = "tpu-v5p-8"`); code
looks it up with `get`.

Figures are per chip (a TPU chip or one GPU); `chips` is how many the machine
has. Prices are Google Cloud on-demand list prices per hour for the whole
machine, as the reference study used them (training/common/recipe.md).
"""

import dataclasses

from common import cli


PLATFORMS = {"cpu": "CPU", "tpu": "TPU chip", "gpu": "GPU"}


@dataclasses.dataclass(frozen=True)
class Machine:
    name: str
    chips: int
    hbm_gib_per_chip: float  # 0: no accelerator memory to plan for (CPU)
    peak_bf16_tflops_per_chip: float  # dense bf16; 0: MFU is not reported
    dollars_per_hour: float | None  # on-demand, whole machine; None: no price known
    source: str
    # The TPU topology XLA compiles for ahead of time (training/tpu/aot.py);
    # empty for machines that are not TPU slices.
    topology: str = ""

    @property
    def platform(self):
        """"tpu", "gpu" or "cpu": the accelerator a run on this machine must see."""
        return self.name.split("-")[0]

    @property
    def peak_flops_per_chip(self):
        return self.peak_bf16_tflops_per_chip * 1e12

    @property
    def hbm_bytes_per_chip(self):
        return self.hbm_gib_per_chip * 2**30


_V5P = dict(hbm_gib_per_chip=95.74, peak_bf16_tflops_per_chip=459.0)
_H100 = dict(hbm_gib_per_chip=74.51, peak_bf16_tflops_per_chip=989.0)

MACHINES = {m.name: m for m in (
    Machine("cpu", chips=1, hbm_gib_per_chip=0.0, peak_bf16_tflops_per_chip=0.0,
            dollars_per_hour=0.0, source="a laptop or CI machine: nothing to plan or price"),
    Machine("tpu-v5p-8", chips=4, **_V5P, dollars_per_hour=16.80,
            source="v5p spec sheet: 95 GiB (102.8 GB) HBM, 459 bf16 TFLOP/s per chip; "
                   "$16.80/h as in the reference study", topology="v5p:2x2x1"),
    Machine("tpu-v5p-16", chips=8, **_V5P, dollars_per_hour=2 * 16.80,
            source="two v5p-8 hosts: twice the v5p-8 price", topology="v5p:2x2x2"),
    Machine("tpu-v6e-8", chips=8, hbm_gib_per_chip=29.80, peak_bf16_tflops_per_chip=918.0,
            dollars_per_hour=21.52,
            source="v6e spec sheet: 32 GB HBM, 918 bf16 TFLOP/s per chip; $21.52/h as in "
                   "the reference study", topology="v6e:2x4"),
    Machine("gpu-h100x2", chips=2, **_H100, dollars_per_hour=22.12,
            source="a3-highgpu-2g: H100 80GB, 989 dense bf16 TFLOP/s per GPU; $22.12/h as "
                   "in the reference study"),
    Machine("gpu-h200", chips=1, hbm_gib_per_chip=131.3, peak_bf16_tflops_per_chip=989.0,
            dollars_per_hour=None,
            source="H200 141 GB, same dense bf16 peak as H100 (the device machine of "
                   "benchmark sessions); no on-demand price recorded"),
)}


class UnknownMachine(cli.UserError):
    pass


class WrongMachine(cli.UserError):
    """A config for an accelerator the process does not see."""


def _count(number, platform):
    noun = PLATFORMS.get(platform, f"{platform} device")
    return f"{number} {noun}{'' if number == 1 else 's'}"


def check_visible(machine, platform, count, needed=None, hint=""):
    """Refuses to run `machine`'s config unless this process sees `needed` (default:
    all the machine's) devices of its platform; `platform` and `count` are what the
    process found. CPU machines run anywhere."""
    if machine.platform == "cpu":
        return
    needed = machine.chips if needed is None else needed
    if platform != machine.platform or count < needed:
        raise WrongMachine(
            f"the config's machine {machine.name} needs {_count(needed, machine.platform)}; "
            f"this process sees {_count(count, platform)}" + (f". {hint}" if hint else ""))


def get(name):
    try:
        return MACHINES[name]
    except KeyError:
        raise UnknownMachine(f"unknown machine {name!r}; known: {', '.join(MACHINES)} "
                             "(common/machines.py)") from None
