"""Measured runs against their predictions: the figures in calibration.json.

Each run records what the ahead-of-time compile predicted for a step (its
roofline, bytes per chip) and what a real chip measured for the same shape
(the commands that made both are in the file). A factor is measured over
predicted; the planner scales a prediction by the factors of the runs that
apply to it and states how many runs that is.
"""

import json
import os

from common import cli

PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "calibration.json")


class CalibrationError(cli.UserError):
    pass


def roofline_seconds(predicted):
    """A step's time at the chip's peak: XLA's counted FLOPs (plus the kernels'
    counted by hand) at peak FLOP/s, or its counted bytes at the HBM bandwidth,
    whichever takes longer."""
    compute = (predicted["xla_flops"] + predicted.get("kernel_flops", 0.0)) / \
        predicted["peak_flops_per_chip"]
    return max(compute, predicted["xla_bytes_accessed"] / predicted["hbm_bytes_per_s"])


def runs(path=PATH):
    """The recorded runs, each a dict (see calibration.json)."""
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)["runs"]
    except (OSError, ValueError, KeyError) as e:
        raise CalibrationError(f"{path}: not a calibration file ({e})") from None


def factors(name, machine=None, generation=None, path=PATH):
    """[(run id, factor)] of the factor `name` over the runs (of `machine`, or of a
    TPU `generation` such as "v5e", if given)."""
    return [(run["id"], run["factors"][name]) for run in runs(path)
            if name in run["factors"] and (machine is None or run["machine"] == machine)
            and (generation is None or run["topology"].split(":")[0] == generation)]
