"""Compiles the TPU steps of the repository's own machine configs, to ship with it.

    bazel run //report:ship_compiled_steps

For every TPU machine with a config for the real base (training/tpu/configs),
under the planner's default recipe (report/configs/recipe.py), with our
settings (and with --reference_settings, the reference study's too), compiles
the step a plan compiles (training/tpu/extrapolate.py: at two depths for an
unrolled step, whole for a scanned one) and writes the figures, keyed as a
plan's cache keys them, to report/compiled_steps.json in the source tree. A
plan of those configs then compiles nothing, even on a fresh machine; any
other config (a recipe of your own, a changed mesh) is still compiled.

Run it after changing a module that makes the step (extrapolate.STEP_MODULES),
a pinned package that builds or compiles it, or a TPU config: until then
//report:plan_test fails, naming this command. Each compile is also kept in
--cache_dir (the plan's), so an interrupted run resumes where it stopped.
About 25 to 40 minutes and 8 GB of host memory on 2 cores for our settings (a
scanned step compiles twice: 5 minutes each), as long again for the
reference's.
"""

import os

from absl import app
from absl import flags
from absl import logging as absl_logging

from common import cli
from common import config_cli
from report import plan as plan_lib
from report import planning

FLAGS = flags.FLAGS  # --cache_dir and --reference_settings are the plan's (report/plan.py)


def target():
    """report/compiled_steps.json in the source tree (`bazel run` names it)."""
    workspace = os.environ.get("BUILD_WORKSPACE_DIRECTORY")
    # (run from bazel-bin, the runfiles' link leads to the source file)
    return (os.path.join(workspace, "report", os.path.basename(plan_lib.SHIPPED)) if workspace
            else os.path.realpath(plan_lib.SHIPPED))


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    absl_logging.set_verbosity(absl_logging.INFO)
    from training.tpu import aot  # pylint: disable=import-outside-toplevel
    from training.tpu import extrapolate  # pylint: disable=import-outside-toplevel
    aot.use_libtpu()  # before anything starts JAX
    cache = extrapolate.Cache(config_cli.user_path(FLAGS.cache_dir) if FLAGS.cache_dir else "")
    for machine, settings, config, dims in plan_lib.own_steps(FLAGS.reference_settings):
        print(f"{machine.name}, {settings} settings...", flush=True)
        try:
            planning.hparams_check(config, machine)
        except cli.UserError as e:  # the plan refuses it before compiling: nothing to ship
            print(f"  not planned: {e}", flush=True)
            continue
        extrapolate.compile_step(dims, config, machine, cache)
    path = target()
    extrapolate.ship(path, cache.used, "Compiled TPU steps of training/tpu/configs under "
                     "report/configs/recipe.py; regenerate: bazel run //report:ship_compiled_steps")
    print(f"{len(cache.used)} compiled steps ({cache.misses} compiled now) in {path}")


if __name__ == "__main__":
    cli.run(main)
