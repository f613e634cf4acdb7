"""Measured runs against their predictions: the figures in calibration.json.

Each run records what the ahead-of-time compile predicted for a step (its
roofline, bytes per chip) and what a real chip measured for the same shape
(the commands that made both are in the file). A factor is measured over
predicted; the planner scales a prediction by the factors of the runs that
apply to it and states how many runs that is.
"""

import json
import math
import os

from common import cli

PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "calibration.json")
SHAPES_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "step_shapes.json")


class CalibrationError(cli.UserError):
    pass


STEP = "step_seconds_over_roofline"  # the factor the planner scales step times by


def roofline_seconds(predicted):
    """A step's time at the chips' peak: the FLOPs (XLA's counted ones plus the
    kernels' counted by hand on TPU; flops.py's compiled count on GPU, which
    has no ahead-of-time compile) at peak FLOP/s, or XLA's counted bytes at the
    HBM bandwidth, whichever takes longer; over `chips` chips (default 1)."""
    chips = predicted.get("chips", 1)
    flops = predicted.get("xla_flops", predicted.get("compiled_flops", 0.0))
    compute = (flops + predicted.get("kernel_flops", 0.0)) / (chips * predicted["peak_flops_per_chip"])
    memory = predicted.get("xla_bytes_accessed", 0.0) / (chips * predicted["hbm_bytes_per_s"])
    return max(compute, memory)


def runs(path=PATH):
    """The recorded runs, each a dict (see calibration.json)."""
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)["runs"]
    except (OSError, ValueError, KeyError) as e:
        raise CalibrationError(f"{path}: not a calibration file ({e})") from None


def platform(run):
    """"tpu" or "gpu": the platform of a run's machine."""
    return run["machine"].split("-")[0]


def applicable(machine_platform, *, exclude=(), extra=(), path=PATH):
    """The step factors that apply to a prediction for a machine of `machine_platform`:
    (runs as dicts {id, machine, factor, source}, scope). The runs of that platform;
    where there are none, those of every platform, and the scope says so. `extra`:
    more runs in the same form (run directories measured by the user); `exclude`:
    ids left out (a run held out to test the calibration on)."""
    every = [{"id": run["id"], "machine": run["machine"], "factor": run["factors"][STEP],
              "source": run.get("source", "common/calibration.json")}
             for run in runs(path) if STEP in run["factors"]] + list(extra)
    every = [run for run in every if run["id"] not in exclude]
    same = [run for run in every if platform(run) == machine_platform]
    if same:
        return same, f"{machine_platform.upper()} runs"
    return every, f"no {machine_platform.upper()} run: runs of other platforms"


def spread(factors):
    """(mean, lowest, highest) of the factors; None without any."""
    if not factors:
        return None
    return sum(factors) / len(factors), min(factors), max(factors)


def factors(name, machine=None, generation=None, path=PATH):
    """[(run id, factor)] of the factor `name` over the runs (of `machine`, or of a
    TPU `generation` such as "v5e", if given)."""
    return [(run["id"], run["factors"][name]) for run in runs(path)
            if name in run["factors"] and (machine is None or run["machine"] == machine)
            and (generation is None or run["topology"].split(":")[0] == generation)]


def _positive(value, zero_ok=False):
    if (isinstance(value, bool) or not isinstance(value, (int, float))
            or not math.isfinite(value) or value < 0 or (value == 0 and not zero_ok)):
        raise ValueError(f"{value!r} is not a positive number of seconds")
    return float(value)


def step_model(path=SHAPES_PATH):
    """Our TPU step as a x compute + b x memory seconds (the roofline's two parts:
    counted work at peak, HBM traffic at bandwidth, partly overlapped), fitted by
    least squares on seconds to the chip shapes named in step_shapes.json's
    `fit`; the other shapes are held out: {"compute": a, "memory": b, "fit":
    [names], "held_out": [{"shape", "measured", "predicted", "error"}], "source"}."""
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
        fitted = set(data["fit"])
        points = [(_positive(r["compute_seconds"], True), _positive(r["memory_seconds"], True),
                   _positive(r["step_seconds"]), str(r["shape"])) for r in data["rows"]]
        names = [p[3] for p in points]
        if len(set(names)) != len(names) or not fitted <= set(names):
            raise ValueError("shape names repeat, or `fit` names a shape the rows lack")
    except (OSError, ValueError, KeyError, TypeError, RecursionError) as e:
        raise CalibrationError(f"{path}: not a file of measured step shapes ({e})") from None
    fit = [p for p in points if p[3] in fitted]
    if len(fit) < 2 or len(fit) == len(points):
        raise CalibrationError(f"{path}: fit on at least 2 shapes and hold at least one out")
    # The normal equations of t = a c + b m over the fitted shapes.
    cc, cm, mm = (sum(c * c for c, _, _, _ in fit), sum(c * m for c, m, _, _ in fit),
                  sum(m * m for _, m, _, _ in fit))
    ct, mt = sum(c * t for c, _, t, _ in fit), sum(m * t for _, m, t, _ in fit)
    det = cc * mm - cm * cm
    if det <= 1e-12 * cc * mm:
        raise CalibrationError(f"{path}: the fitted shapes do not tell compute from memory")
    a, b = (ct * mm - mt * cm) / det, (mt * cc - ct * cm) / det
    if a <= 0 or b < 0:
        raise CalibrationError(f"{path}: the fit gives {a:.3f} x compute + {b:.3f} x memory, "
                               "a step that does not grow with its work: choose other shapes")
    held = [{"shape": name, "measured": t, "predicted": a * c + b * m,
             "error": (a * c + b * m) / t - 1} for c, m, t, name in points if name not in fitted]
    return {"compute": a, "memory": b, "fit": [p[3] for p in fit], "held_out": held,
            "source": os.path.relpath(path, os.path.dirname(os.path.dirname(path)))}


def predict_step(model, compute_seconds, memory_seconds):
    """(point, low, high) seconds of a step with these roofline parts: the model's
    value, and the range its held-out errors give, the point included (a
    held-out shape predicted 12% low puts the high end 1/0.88 above the point)."""
    point = model["compute"] * compute_seconds + model["memory"] * memory_seconds
    errors = [h["error"] for h in model["held_out"]]
    return (point, min(point, point / (1 + max(errors))),
            max(point, point / (1 + min(errors))))
