"""Which accelerator this machine has: `tpu`, `gpu` or `cpu`, printed on one line.

    python3 tools/accelerator.py

The one detection behind the `//common:accelerator` default (tools/accelerator.bzl runs
it when Bazel sets up the repository) and behind the lock the offline
`pypi_train` hub installs (./bazelw exports it). G4_ACCELERATOR overrides it. A TPU VM exposes its chips as
/dev/accel* (up to v4) or VFIO groups /dev/vfio/N (v5e, v5p, v6e); an NVIDIA GPU
machine has the driver's /proc/driver/nvidia/version or /dev/nvidiactl.
Standard library only: it runs with the system python3, outside Bazel.
"""

import glob
import os
import sys

CHOICES = ("cpu", "tpu", "gpu")
ENV = "G4_ACCELERATOR"


def detect(root="/"):
    """The accelerator of the machine whose file system is at `root`."""
    override = os.environ.get(ENV, "").strip().lower()
    if override:
        if override not in CHOICES:
            raise SystemExit(f"error: {ENV}={override!r}; use one of {', '.join(CHOICES)}")
        return override
    dev = os.path.join(root, "dev")
    if (glob.glob(os.path.join(dev, "accel[0-9]*"))
            or glob.glob(os.path.join(dev, "vfio", "[0-9]*"))):
        return "tpu"
    if (os.path.exists(os.path.join(root, "proc", "driver", "nvidia", "version"))
            or os.path.exists(os.path.join(dev, "nvidiactl"))):
        return "gpu"
    return "cpu"


if __name__ == "__main__":
    print(detect(sys.argv[1] if len(sys.argv) > 1 else "/"))
