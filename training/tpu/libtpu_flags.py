"""The flags a config asks libtpu for, set where libtpu reads them.

libtpu reads LIBTPU_INIT_ARGS once, when JAX starts it, so `use` must come
before anything starts a JAX backend: `trainer.setup_devices` (sft, the scan
benchmark) and `//training/tpu:compile` call it first. A flag given in the
environment already is kept, and not given twice. JAX's persistent compilation
cache keys on LIBTPU_INIT_ARGS, so a step compiled with other flags is not
loaded from it.
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


def use(config):
    """Adds `config`'s flags to LIBTPU_INIT_ARGS; refuses once JAX has started."""
    present = os.environ.get("LIBTPU_INIT_ARGS", "").split()
    missing = [flag for flag in flags(config) if flag not in present]
    if not missing:
        return
    from jax._src import xla_bridge  # pylint: disable=import-outside-toplevel
    if xla_bridge.backends_are_initialized():
        raise cli.UserError(
            f"{' '.join(missing)} must reach libtpu before JAX starts, and JAX has started "
            "in this process: set LIBTPU_INIT_ARGS before it starts")
    os.environ["LIBTPU_INIT_ARGS"] = " ".join(present + missing)
    log.info("LIBTPU_INIT_ARGS=%s", os.environ["LIBTPU_INIT_ARGS"])
