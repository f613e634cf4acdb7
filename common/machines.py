"""The machines this project trains and serves on: the one table of their figures.

Every price and peak in the project comes from here: the trainers' MFU, the
HBM check before a TPU run, the serving sweep's $ per 1M output tokens and the
report's costs. Configs name a machine (`config.machine = "tpu-v5p-8"`); code
looks it up with `get`.

Figures are per chip (a TPU chip or one GPU); `chips` is how many the machine
has, `hosts` how many VMs a run starts one process on (on GKE: nodes, one pod
each), `gke_accelerator` the node label GKE gives that accelerator
(common/kubernetes.py selects nodes by it and by the topology). Prices are per hour for
the whole machine: on demand, the reference study's (training/common/recipe.md)
where it states one, else the same price per chip for the other sizes of that
generation (Google prices TPU slices and A3 VMs per chip); spot where a source
gives one. None where no price is recorded: no stored copy of Google's TPU
price list has v5e, v6e or v5p on it (the copies read are the v4-preview page),
nor A3 Ultra (H200) or A4 (B200) prices. The report uses the on-demand price.

Chip figures and topologies: Google's Cloud TPU pages for v5e, v6e and v5p
(peak bf16, HBM and its bandwidth per chip, the supported 2D slice shapes with
their chips and hosts); GKE's TPU and GPU pages for the node labels and for
the VMs of a multi-host v5e/v6e slice (4 chips each: a 4x4 slice is 4 VMs, which
the TPU pages' "hosts" column counts as 2 physical hosts); NVIDIA's datasheets for the GPUs (dense bf16, without
sparsity), as the search index held them on 2026-12-06. HBM is the sheets'
decimal GB in GiB (32 GB -> 29.80), as the planner's limit; bandwidth in
decimal GB/s.
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
    hosts: int = 1
    hbm_gbps_per_chip: float = 0.0  # HBM bandwidth, GB/s; 0: not recorded
    spot_dollars_per_hour: float | None = None  # whole machine; None: no price recorded
    # GKE's node label for the accelerator (cloud.google.com/gke-tpu-accelerator for
    # TPU slices, cloud.google.com/gke-accelerator for GPUs); empty for CPU.
    gke_accelerator: str = ""

    @property
    def platform(self):
        """"tpu", "gpu" or "cpu": the accelerator a run on this machine must see."""
        return self.name.split("-")[0]

    @property
    def chips_per_host(self):
        return self.chips // self.hosts

    @property
    def gke_topology(self):
        """The slice shape GKE's cloud.google.com/gke-tpu-topology label names ("2x2x2")."""
        return self.topology.partition(":")[2]

    @property
    def peak_flops_per_chip(self):
        return self.peak_bf16_tflops_per_chip * 1e12

    @property
    def hbm_bytes_per_chip(self):
        return self.hbm_gib_per_chip * 2**30


_V5P = dict(hbm_gib_per_chip=95.74, peak_bf16_tflops_per_chip=459.0, hbm_gbps_per_chip=2765.0,
            gke_accelerator="tpu-v5p-slice")
_H100 = dict(hbm_gib_per_chip=74.51, peak_bf16_tflops_per_chip=989.0, hbm_gbps_per_chip=3350.0,
             gke_accelerator="nvidia-h100-80gb")
# Google's v5e and v6e pages: 197 and 918 bf16 TFLOP/s, 16 and 32 GB of HBM per chip at
# 819 and 1638 GB/s; slices 1x1, 2x2, 2x4 on one VM (v6e-8 the study's machine), 4x4
# on 4 VMs of 4 chips, 4x8 on 8.
_V5E = dict(hbm_gib_per_chip=14.90, peak_bf16_tflops_per_chip=197.0, hbm_gbps_per_chip=819.0,
            gke_accelerator="tpu-v5-lite-podslice")
_V6E = dict(hbm_gib_per_chip=29.80, peak_bf16_tflops_per_chip=918.0, hbm_gbps_per_chip=1638.0,
            gke_accelerator="tpu-v6e-slice")
_SLICES_2D = ((1, "1x1", 1), (4, "2x2", 1), (8, "2x4", 1), (16, "4x4", 4), (32, "4x8", 8))
_H200 = dict(hbm_gib_per_chip=131.3, peak_bf16_tflops_per_chip=989.0, hbm_gbps_per_chip=4800.0,
             gke_accelerator="nvidia-h200-141gb")
V6E_PER_CHIP = 21.52 / 8  # the study's v6e-8, per chip-hour
H100_PER_GPU = 22.12 / 2  # the study's a3-highgpu-2g, per GPU-hour
# Spot, us-central1, per GPU-hour: Google's billing catalog as the open price file of
# github.com/Cyclenerd/google-cloud-pricing-cost-calculator (pricing.yml, generated
# 2026-07-30) gives it for a3-highgpu-8g ($50.61/h); its on-demand price there is the
# study's, $11.06 per GPU-hour.
H100_SPOT_PER_GPU = 50.61 / 8
_PAGES = "Google's Cloud TPU {} page (a stored copy, read 2026-12-06)"


def _tpu_slices():
    for chips, shape, hosts in _SLICES_2D:
        yield Machine(f"tpu-v5litepod-{chips}", chips=chips, **_V5E, dollars_per_hour=None,
                      source=_PAGES.format("v5e") + ": 197 bf16 TFLOP/s, 16 GB HBM at 819 GB/s "
                      "per chip; no price recorded", topology=f"v5e:{shape}", hosts=hosts)
    for chips, shape, hosts in _SLICES_2D:
        yield Machine(f"tpu-v6e-{chips}", chips=chips, **_V6E,
                      dollars_per_hour=chips * V6E_PER_CHIP,
                      source=_PAGES.format("v6e") + ": 918 bf16 TFLOP/s, 32 GB HBM at 1638 GB/s "
                      "per chip; $2.69 per chip-hour, the reference study's v6e-8 price "
                      "($21.52/h); Google's Trillium launch listed $2.70 (evaluation), "
                      "$1.89 (1 year) and $1.22 (3 years) per chip-hour",
                      topology=f"v6e:{shape}", hosts=hosts)


def _h100(gpus, nodes=1):
    vm = f"a3-highgpu-{gpus // nodes}g" + (f" x {nodes} nodes" if nodes > 1 else "")
    return Machine(f"gpu-h100x{gpus}", chips=gpus, **_H100, hosts=nodes,
                   dollars_per_hour=gpus * H100_PER_GPU,
                   spot_dollars_per_hour=gpus * H100_SPOT_PER_GPU,
                   source=f"{vm}: H100 80GB (3.35 TB/s), 989 dense bf16 TFLOP/s "
                          "per GPU (NVIDIA H100 datasheet); $11.06 per GPU-hour, the reference "
                          "study's a3-highgpu-2g price ($22.12/h); spot $6.33 per GPU-hour "
                          "(Google's billing catalog, us-central1, 2026-07-30)")


MACHINES = {m.name: m for m in (
    Machine("cpu", chips=1, hbm_gib_per_chip=0.0, peak_bf16_tflops_per_chip=0.0,
            dollars_per_hour=0.0, source="a laptop or CI machine: nothing to plan or price"),
    Machine("tpu-v5p-8", chips=4, **_V5P, dollars_per_hour=16.80,
            source="Google's v5p page: 95 GB HBM at 2765 GB/s, 459 bf16 TFLOP/s per chip; "
                   "$16.80/h as in the reference study", topology="v5p:2x2x1"),
    Machine("tpu-v5p-16", chips=8, **_V5P, dollars_per_hour=2 * 16.80,
            source="two v5p-8 hosts: twice the v5p-8 price", topology="v5p:2x2x2", hosts=2),
    Machine("tpu-v5p-32", chips=16, **_V5P, dollars_per_hour=4 * 16.80,
            source="four v5p-8 hosts: four times the v5p-8 price", topology="v5p:2x2x4",
            hosts=4),
    *_tpu_slices(),
    *(_h100(gpus) for gpus in (1, 2, 4, 8)),
    _h100(16, nodes=2),
    Machine("gpu-h200", chips=1, **_H200, dollars_per_hour=None,
            source="one H200 141 GB (4.8 TB/s), the same dense bf16 peak as H100 (the device "
                   "machine of benchmark sessions); no price recorded"),
    Machine("gpu-h200x8", chips=8, **_H200, dollars_per_hour=None,
            source="a3-ultragpu-8g: 8 x H200 141 GB (4.8 TB/s), 989 dense bf16 TFLOP/s per "
                   "GPU (NVIDIA H200 datasheet: 1,979 is with sparsity); no price recorded"),
    Machine("gpu-b200x8", chips=8, hbm_gib_per_chip=167.64, peak_bf16_tflops_per_chip=2250.0,
            hbm_gbps_per_chip=8000.0, dollars_per_hour=None, gke_accelerator="nvidia-b200",
            source="a4-highgpu-8g: 8 x B200 180 GB (8 TB/s), 2,250 dense bf16 TFLOP/s per GPU "
                   "(NVIDIA DGX B200 datasheet); no price recorded"),
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
