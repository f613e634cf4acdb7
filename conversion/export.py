"""Exports a TPU run's Orbax LoRA checkpoint as a PEFT adapter and/or a merged model.

    bazel run //conversion:export -- --run_dir=runs/v5p8 --format=both --output_dir=out

--format=peft writes a PEFT adapter directory at --output_dir; merged writes a
merged HF model there; both writes OUTPUT_DIR/adapter and OUTPUT_DIR/merged.
--step defaults to the newest checkpoint, --base_model to the base the run
recorded (for the CPU default run, the tiny base it trained on). The output is
built in a temporary directory and renamed into place: after an error nothing
is left at --output_dir, and an existing output is replaced only with
--overwrite. Each output holds provenance.json: the run's config, the step, a
fingerprint of the base and the tool versions.
"""

import json
import os

from absl import app
from absl import flags
from absl import logging as absl_logging

from common import cli
from common import config_cli
from conversion import exporting

_RUN_DIR = flags.DEFINE_string("run_dir", None, "TPU run directory (training/tpu:sft --workdir).")
_STEP = flags.DEFINE_integer("step", None, "Checkpoint step (default: the newest).")
_BASE_MODEL = flags.DEFINE_string("base_model", None,
                                  "Base HF directory or Hub id (default: the run's).")
_FORMAT = flags.DEFINE_enum("format", "both", ["peft", "merged", "both"], "What to write.")
_OUTPUT_DIR = flags.DEFINE_string("output_dir", None, "Where to write.")
_OVERWRITE = flags.DEFINE_bool("overwrite", False, "Replace an existing --output_dir.")


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    absl_logging.set_verbosity(absl_logging.WARNING)  # Orbax logs every read at INFO
    base = _BASE_MODEL.value
    if base and os.path.exists(config_cli.user_path(base)):
        base = config_cli.user_path(base)
    written = exporting.export(config_cli.user_path(_RUN_DIR.value),
                               config_cli.user_path(_OUTPUT_DIR.value), _FORMAT.value,
                               _STEP.value, base, _OVERWRITE.value)
    print(json.dumps(written, indent=2))


if __name__ == "__main__":
    # Here, not at import: tests import this module under their own flags.
    flags.mark_flags_as_required(["run_dir", "output_dir"])
    cli.run(main)
