"""The flags a config asks libtpu for, set where libtpu reads them.

libtpu reads LIBTPU_INIT_ARGS once, when it is loaded (a JAX backend's start,
or a compile-only topology), so `use` must come before either:
`trainer.setup_devices` (sft and the benchmarks, for a TPU config: a CPU
config never loads libtpu) and `//training/tpu:compile` call it first. A flag
given in the environment already is kept, and not given twice. JAX's
persistent compilation cache keys on LIBTPU_INIT_ARGS, so a step compiled with
other flags is not loaded from it.
"""

import logging
import os

from common import cli

log = logging.getLogger(__name__)

# Each chip's RngBitGenerator draws only its part of a sharded array, from the
# generator's state plus a constant of the chip's own (config_base.py,
# `dropout_rng_per_chip`).
PER_CHIP_RNG = "--xla_tpu_spmd_rng_bit_generator_unsafe=true"


def flags(config):
    """The libtpu flags `config` asks for."""
    return [PER_CHIP_RNG] if config.dropout_rng_per_chip else []


def _libtpu_started():
    """Whether this process has started a JAX backend or loaded libtpu (a
    compile-only topology loads it without starting a backend)."""
    # pylint: disable=import-outside-toplevel
    from jax._src import xla_bridge
    from jax._src.lib import xla_client
    return xla_bridge.backends_are_initialized() or xla_client.pjrt_plugin_loaded("tpu")


def use(config):
    """Adds `config`'s flags to LIBTPU_INIT_ARGS; refuses once libtpu is loaded."""
    present = os.environ.get("LIBTPU_INIT_ARGS", "").split()
    missing = [flag for flag in flags(config) if flag not in present]
    if not missing:
        return
    if _libtpu_started():
        raise cli.UserError(
            f"{' '.join(missing)} must reach libtpu before JAX starts it, and this process "
            "has started it: set LIBTPU_INIT_ARGS before the process starts")
    os.environ["LIBTPU_INIT_ARGS"] = " ".join(present + missing)
    log.info("LIBTPU_INIT_ARGS=%s", os.environ["LIBTPU_INIT_ARGS"])
