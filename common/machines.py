"""The machines this project trains and serves on: the one table of their figures.

Every price and peak in the project comes from here: the trainers' MFU, the
HBM check before a TPU run, the serving sweep's $ per 1M output tokens and the
report's costs. Configs name a machine (`config.machine = "tpu-v5p-8"`); code
looks it up with `get`.

Figures are per chip (a TPU chip or one GPU); `chips` is how many the machine
has, `hosts` how many VMs a run starts one process on (on GKE: nodes, one pod
each), `gke_accelerator` the node label GKE gives that accelerator
(common/kubernetes.py selects nodes by it and by the topology).

Prices: every machine has a `Price` per chip-hour (per GPU-hour on GPU
machines), on demand and spot, with its source, the source's date and its
caveats, for one region (PRICE_REGION unless a binary is given `--region`);
the machine's $/hour, per VM and whole, follow from it. Google prices TPU
slices and A3/A4 VMs per chip, so one figure serves every size of a
generation. The built-in figures (REGIONS) are the reference study's where it
states one (training/common/recipe.md), else SkyPilot's GCP catalog or the
billing catalog as google-cloud-pricing-cost-calculator's pricing.yml holds
it, read through stored copies on 2026-12-07; a team's own prices (a
committed-use discount, another region) come from a price file (`load_prices`,
docs/compare-and-plan.md). A figure the sources lack is None and said so:
nothing is made up.

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
import datetime
import json
import re

from common import cli


PLATFORMS = {"cpu": "CPU", "tpu": "TPU chip", "gpu": "GPU"}
PRICE_REGION = "us-central1"  # the region of the built-in prices unless one is asked for


@dataclasses.dataclass(frozen=True)
class Price:
    """Dollars per chip-hour (per GPU-hour on a GPU machine) in one region.
    None: not sold there, or no source gives it."""
    on_demand: float | None
    spot: float | None
    source: str
    date: str  # the source's own date, else the day it was read (ISO 8601)
    note: str = ""  # how far to trust the on-demand figure: a lower bound, low confidence
    region: str = PRICE_REGION
    spot_note: str = ""  # the same for the spot figure


@dataclasses.dataclass(frozen=True)
class Machine:
    name: str
    chips: int
    hbm_gib_per_chip: float  # 0: no accelerator memory to plan for (CPU)
    peak_bf16_tflops_per_chip: float  # dense bf16; 0: MFU is not reported
    source: str  # where the chip figures come from (prices: `price.source`)
    # The TPU topology XLA compiles for ahead of time (training/tpu/aot.py);
    # empty for machines that are not TPU slices.
    topology: str = ""
    hosts: int = 1
    hbm_gbps_per_chip: float = 0.0  # HBM bandwidth, GB/s; 0: not recorded
    price: Price | None = None  # per chip; set from REGIONS (or a price file) for the table
    # GKE's node label for the accelerator (cloud.google.com/gke-tpu-accelerator for
    # TPU slices, cloud.google.com/gke-accelerator for GPUs); empty for CPU.
    gke_accelerator: str = ""

    @property
    def platform(self):
        """"tpu", "gpu" or "cpu": the accelerator a run on this machine must see."""
        return self.name.split("-")[0]

    @property
    def family(self):
        """What one price covers: a TPU generation ("tpu-v5p") or a GPU ("gpu-h100")."""
        if self.platform == "tpu":
            return self.name.rsplit("-", 1)[0]
        return self.name.split("x")[0]

    @property
    def dollars_per_hour(self):
        """On demand, the whole machine; None: no price known."""
        return _times(self.price and self.price.on_demand, self.chips)

    @property
    def spot_dollars_per_hour(self):
        """Spot, the whole machine; None: not sold, or no price known."""
        return _times(self.price and self.price.spot, self.chips)

    @property
    def dollars_per_vm_hour(self):
        """On demand, one of the machine's VMs (hosts)."""
        return _times(self.price and self.price.on_demand, self.chips_per_host)

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


def _times(per_chip, chips):
    return None if per_chip is None else per_chip * chips


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
_PAGES = "Google's Cloud TPU {} page (a stored copy, read 2026-12-06)"

# The sources of the built-in prices (stored copies, read 2026-12-07).
_STUDY = "the reference study (training/common/recipe.md)"
_SKYPILOT = ("SkyPilot's GCP catalog (github.com/skypilot-org/skypilot-catalog "
             "catalogs/v7/gcp/vms.csv at 017e2502; undated: the day read), a slice's price "
             "over its chips")
_SKYPILOT_DATE = "2026-12-07"
_BILLING = ("Google's billing catalog as pricing.yml of google-cloud-pricing-cost-calculator "
            "(the copy generated 2026-08-27, github.com/BetinMcFly fork of Cyclenerd's, 0a176534)")
_BILLING_DATE = "2026-08-27"


_H200_NOTE = ("low confidence: the same catalog's us-central1 H100 share is under half of "
              "Google's billing catalog, so this may be low")
_CPU = Price(0.0, None, "a laptop or CI machine: nothing to price", "2026-12-07")


def _tpu(on_demand, spot, region, note=""):
    return Price(on_demand, spot, _SKYPILOT, _SKYPILOT_DATE, note, region)


# Per chip-hour (per GPU-hour), by region, then by family (Machine.family). SkyPilot's
# catalog gives TPUs in several regions; the GPU figures are us-central1's only.
REGIONS = {
    "us-central1": {
        "tpu-v5p": Price(4.20, 1.68, f"on demand: {_STUDY}, v5p-8 at $16.80/h, as SkyPilot's "
                         f"catalog lists it; spot: {_SKYPILOT}", _SKYPILOT_DATE),
        "tpu-v5litepod": _tpu(1.20, 0.21298, "us-central1"),
        "tpu-v6e": Price(21.52 / 8, 0.64833, f"on demand: {_STUDY}, v6e-8 at $21.52/h; spot: "
                         f"{_SKYPILOT}", _SKYPILOT_DATE,
                         "SkyPilot's catalog lists $2.70 per chip-hour on demand"),
        "gpu-h100": Price(22.12 / 2, 53.0936245 / 8, f"on demand: {_STUDY}, a3-highgpu-2g at "
                          f"$22.12/h, as {_BILLING} lists it ($88.49/h for a3-highgpu-8g); "
                          "spot: the same file, a3-highgpu-8g at $53.09/h", _BILLING_DATE,
                          "1 and 3 year commitments in that file: $61.38/h and $38.86/h "
                          "for a3-highgpu-8g"),
        "gpu-h200": Price(86.75992 / 8, 32.61871 / 8, f"{_SKYPILOT}: a3-ultragpu-8g, its "
                          "GPUs' share ($74.49/h) plus its host's ($12.27/h)", _SKYPILOT_DATE,
                          _H200_NOTE, spot_note=_H200_NOTE),
        "gpu-b200": Price(90.216 / 8, None, f"{_SKYPILOT}: a4-highgpu-8g, its GPUs' share",
                          _SKYPILOT_DATE, "a lower bound: no source read gives the host's "
                          "price", spot_note="no spot price in us-central1 (us-east4 lists "
                          "$64.44/h)"),
    },
    "us-east1": {"tpu-v5litepod": _tpu(1.20, 0.21298, "us-east1"),
                 "tpu-v5p": _tpu(4.20, 1.68, "us-east1"),
                 "tpu-v6e": _tpu(2.70, 0.64833, "us-east1")},
    "us-east5": {"tpu-v5litepod": _tpu(1.20, 0.60, "us-east5"),
                 "tpu-v5p": _tpu(4.20, 1.56009, "us-east5"),
                 "tpu-v6e": _tpu(2.70, 1.08, "us-east5")},
    "us-west4": {"tpu-v5litepod": _tpu(1.20, 0.4692, "us-west4")},
    "europe-west4": {"tpu-v5litepod": _tpu(1.56, 0.44261, "europe-west4"),
                     "tpu-v5p": _tpu(4.2525, 1.34849, "europe-west4"),
                     "tpu-v6e": _tpu(2.97, 0.71316, "europe-west4")},
}


def _tpu_slices():
    for chips, shape, hosts in _SLICES_2D:
        yield Machine(f"tpu-v5litepod-{chips}", chips=chips, **_V5E,
                      source=_PAGES.format("v5e") + ": 197 bf16 TFLOP/s, 16 GB HBM at 819 GB/s "
                      "per chip", topology=f"v5e:{shape}", hosts=hosts)
    for chips, shape, hosts in _SLICES_2D:
        yield Machine(f"tpu-v6e-{chips}", chips=chips, **_V6E,
                      source=_PAGES.format("v6e") + ": 918 bf16 TFLOP/s, 32 GB HBM at 1638 GB/s "
                      "per chip", topology=f"v6e:{shape}", hosts=hosts)


def _h100(gpus, nodes=1):
    vm = f"a3-highgpu-{gpus // nodes}g" + (f" x {nodes} nodes" if nodes > 1 else "")
    return Machine(f"gpu-h100x{gpus}", chips=gpus, **_H100, hosts=nodes,
                   source=f"{vm}: H100 80GB (3.35 TB/s), 989 dense bf16 TFLOP/s "
                          "per GPU (NVIDIA H100 datasheet)")


_UNPRICED = {m.name: m for m in (
    Machine("cpu", chips=1, hbm_gib_per_chip=0.0, peak_bf16_tflops_per_chip=0.0,
            source="a laptop or CI machine: nothing to plan"),
    Machine("tpu-v5p-8", chips=4, **_V5P, topology="v5p:2x2x1",
            source="Google's v5p page: 95 GB HBM at 2765 GB/s, 459 bf16 TFLOP/s per chip"),
    Machine("tpu-v5p-16", chips=8, **_V5P, source="two v5p-8 hosts", topology="v5p:2x2x2",
            hosts=2),
    Machine("tpu-v5p-32", chips=16, **_V5P, source="four v5p-8 hosts", topology="v5p:2x2x4",
            hosts=4),
    *_tpu_slices(),
    *(_h100(gpus) for gpus in (1, 2, 4, 8)),
    _h100(16, nodes=2),
    Machine("gpu-h200", chips=1, **_H200,
            source="one H200 141 GB (4.8 TB/s), the same dense bf16 peak as H100 (the device "
                   "machine of benchmark sessions); priced as an eighth of a3-ultragpu-8g"),
    Machine("gpu-h200x8", chips=8, **_H200,
            source="a3-ultragpu-8g: 8 x H200 141 GB (4.8 TB/s), 989 dense bf16 TFLOP/s per "
                   "GPU (NVIDIA H200 datasheet: 1,979 is with sparsity)"),
    Machine("gpu-b200x8", chips=8, hbm_gib_per_chip=167.64, peak_bf16_tflops_per_chip=2250.0,
            hbm_gbps_per_chip=8000.0, gke_accelerator="nvidia-b200",
            source="a4-highgpu-8g: 8 x B200 180 GB (8 TB/s), 2,250 dense bf16 TFLOP/s per GPU "
                   "(NVIDIA DGX B200 datasheet)"),
)}


class PriceError(cli.UserError):
    pass


def _unpriced(family, region):
    return Price(None, None, f"no price for {family} in {region} in the built-in table "
                 "(common/machines.py REGIONS): give one in a price file (--prices)",
                 "", region=region)


def priced(region=PRICE_REGION, prices=None):
    """{name: Machine} with each machine's price in `region`: a price file's
    (`prices`, from load_prices) where it names the machine or its family, else the
    built-in table's, else none."""
    prices = prices or {}
    table = REGIONS.get(region, {})
    out = {}
    for name, machine in _UNPRICED.items():
        price = (dataclasses.replace(_CPU, region=region) if machine.platform == "cpu" else
                 prices.get(name) or prices.get(machine.family) or table.get(machine.family) or
                 _unpriced(machine.family, region))
        out[name] = dataclasses.replace(machine, price=price)
    return out


_REGION = re.compile(r"^[a-z]+-[a-z]+[0-9]+$")
_DATE = re.compile(r"^[0-9]{4}-[0-9]{2}-[0-9]{2}$")
_MOST = 1e6  # $ per chip-hour: anything above is a typo, not a price


def check_region(region):
    """`region` as Google Cloud names it ("us-central1"), or PriceError."""
    name = region.strip().lower() if isinstance(region, str) else region
    if not isinstance(name, str) or not _REGION.match(name):
        raise PriceError(f"--region={region!r}: a Google Cloud region such as {PRICE_REGION}")
    return name


def _is_date(text):
    try:
        return bool(_DATE.match(text)) and bool(datetime.date.fromisoformat(text))
    except ValueError:
        return False


def _figure(path, key, field, value):
    if value is None:
        return None
    try:
        number = float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) \
            else None
    except OverflowError:
        number = None
    if number is None or not 0 <= number <= _MOST:
        raise PriceError(f"--prices={path}: {key}.{field}: dollars per chip-hour (a number "
                         f"from 0 to {_MOST:,.0f}) or null, not {value!r}")
    return number + 0.0  # no -0.0


def _no_duplicates(pairs):
    seen = {}
    for key, value in pairs:
        if key in seen:
            raise ValueError(f"{key!r} is given twice")
        seen[key] = value
    return seen


def load_prices(path, region=PRICE_REGION, text=None):
    """A team's own prices: {name or family: Price} from a JSON file (`text`, if
    given, is its content)

        {"source": "our committed-use contract", "date": "2026-11-30",
         "prices": {"tpu-v5p": {"on_demand": 2.94, "spot": 1.68},
                    "gpu-h100x2": {"on_demand": 9.50}}}

    per chip-hour (per GPU-hour), keyed by a machine (`gpu-h100x2`) or a family
    every size shares (`tpu-v5p`, `gpu-h100`); a machine's entry wins over its
    family's. A figure left out is the family's entry's if the file has one, else
    the built-in table's for `region`; null is "not sold". An optional "region"
    must be `region`. Anything else is an error naming the file and the entry."""
    try:
        if text is None:
            with open(path, encoding="utf-8") as f:
                text = f.read()
        document = json.loads(text.lstrip("\ufeff"), object_pairs_hook=_no_duplicates)
    except (OSError, ValueError, RecursionError) as e:
        raise PriceError(f"--prices={path}: not a readable JSON file ({e})") from None
    families = {m.family for m in _UNPRICED.values() if m.platform != "cpu"}
    names = [n for n, m in _UNPRICED.items() if m.platform != "cpu"]
    if (not isinstance(document, dict) or not isinstance(document.get("prices"), dict)
            or not isinstance(document.get("source"), str) or not document["source"].strip()):
        raise PriceError(f"--prices={path}: expected an object with \"source\" (where the "
                         "prices come from) and \"prices\" ({name or family: {\"on_demand\": "
                         "$ per chip-hour, \"spot\": ...}})")
    date = document.get("date", "")
    if not isinstance(date, str) or (date and not _is_date(date)):
        raise PriceError(f"--prices={path}: \"date\" is YYYY-MM-DD, not {date!r}")
    if "region" in document and (not isinstance(document["region"], str) or
                                 document["region"].strip().lower() != region):
        raise PriceError(f"--prices={path}: its prices are for region "
                         f"{document['region']!r}, the plan's is {region!r} (--region)")
    table = REGIONS.get(region, {})
    entries = document["prices"]
    for key, entry in entries.items():
        if key not in families and key not in names:
            raise PriceError(f"--prices={path}: {key!r} is neither a machine nor a family; "
                             f"families: {', '.join(sorted(families))}; machines: "
                             f"{', '.join(names)}")
        if not isinstance(entry, dict) or not entry or set(entry) - {"on_demand", "spot"}:
            raise PriceError(f"--prices={path}: {key}: expected {{\"on_demand\": ..., "
                             f"\"spot\": ...}} ($ per chip-hour or null), not {entry!r}")
    out = {}
    # Families first: a machine's entry keeps what it leaves out from its family's.
    for key in sorted(entries, key=lambda k: k not in families):
        entry = entries[key]
        family = key if key in families else _UNPRICED[key].family
        base = out.get(family) or table.get(family) or _unpriced(family, region)
        figures = {field: (_figure(path, key, field, entry[field]) if field in entry
                           else getattr(base, field)) for field in ("on_demand", "spot")}
        kept = [field for field in ("on_demand", "spot") if field not in entry]
        source = f"{document['source']} ({path})"
        if kept:
            source += (f"; {' and '.join(kept).replace('_', ' ')} kept from " +
                       (f"{base.source} ({base.date})" if base.date else base.source))
        out[key] = Price(figures["on_demand"], figures["spot"], source,
                         date or (base.date if kept else ""),
                         base.note if "on_demand" in kept else "", region,
                         base.spot_note if "spot" in kept else "")
    return out


def use_prices(region=PRICE_REGION, path=None, text=None):
    """Prices every machine of this process's table for `region`, with the price
    file at `path` (its content `text`, if given) as well (what --region and
    --prices do), and returns the region as checked. Nothing changes if either is
    refused."""
    region = check_region(region)
    prices = load_prices(path, region, text) if path else None
    if region not in REGIONS:
        print(f"prices: the built-in table has none for {region} (it has "
              f"{', '.join(REGIONS)}): " + ("only the price file's" if path else
                                            "no machine is priced; --prices gives prices"),
              flush=True)
    MACHINES.update(priced(region, prices))
    return region


MACHINES = priced()


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
