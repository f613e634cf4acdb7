"""Exports a TPU run's Orbax LoRA checkpoint as a PEFT adapter and/or a merged model.

    bazel run //conversion:export -- --run_dir=runs/v5p8 --format=both --output_dir=out

--format=peft writes a PEFT adapter directory at --output_dir; merged writes a
merged HF model there; both writes OUTPUT_DIR/adapter and OUTPUT_DIR/merged.
--step defaults to the newest checkpoint, --base_model to the base the run
recorded (for the CPU default run, the tiny base it trained on). The output is
built in a temporary directory and renamed into place: after an error nothing
is left at --output_dir, and an existing output is replaced only with
--overwrite. Each output holds provenance.json (the run's config, the step, a
fingerprint of the base and the tool versions) and a model card, README.md, with
the Hub's metadata, the recipe, the data, the losses and, with
--eval_summary=EVAL_OUT/summary.json, the evaluation's pass@k.

    bazel run //conversion:export -- --run_dir=gs://BUCKET/runs/v5p8 --output_dir=out \
        --eval_summary=out/eval/summary.json --push_to_hub=my-org/gemma4-31b-codev

--push_to_hub=ORG/NAME uploads the adapter to ORG/NAME (and the merged model,
with --format=both, to ORG/NAME-merged), private unless --nohub_private; it
needs a token with write access (`hf auth login` or HF_TOKEN).
"""

import json
import os

from absl import app
from absl import flags
from absl import logging as absl_logging

from common import cli
from common import config_cli
from common import storage
from conversion import exporting
from conversion import model_card

_RUN_DIR = flags.DEFINE_string("run_dir", None, "TPU run directory (training/tpu:sft --workdir).")
_STEP = flags.DEFINE_integer("step", None, "Checkpoint step (default: the newest).")
_BASE_MODEL = flags.DEFINE_string("base_model", None,
                                  "Base HF directory or Hub id (default: the run's).")
_FORMAT = flags.DEFINE_enum("format", "both", ["peft", "merged", "both"], "What to write.")
_OUTPUT_DIR = flags.DEFINE_string("output_dir", None, "Where to write.")
_OVERWRITE = flags.DEFINE_bool("overwrite", False, "Replace an existing --output_dir.")
_EVAL_SUMMARY = flags.DEFINE_string("eval_summary", None, "summary.json of //eval:verilog_eval "
                                    "on this model: its pass@k goes into the model card.")
_MODEL_NAME = flags.DEFINE_string("model_name", None, "The model card's name (default: the "
                                  "--push_to_hub name, else the output folder's).")
_PUSH = flags.DEFINE_string("push_to_hub", None, "ORG/NAME: upload the export to the Hub.")
_PRIVATE = flags.DEFINE_bool("hub_private", True, "Create the Hub repositories private.")


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    absl_logging.set_verbosity(absl_logging.WARNING)  # Orbax logs every read at INFO
    base = _BASE_MODEL.value
    if base and os.path.exists(config_cli.user_path(base)):
        base = config_cli.user_path(base)
    if _PUSH.value:
        model_card.push_plan({}, _PUSH.value)  # a malformed name fails before the export
    summary = None
    if _EVAL_SUMMARY.value:
        path = config_cli.user_path(_EVAL_SUMMARY.value)
        if not storage.exists(path):
            raise cli.UserError(f"no evaluation summary at {path} (--eval_summary)")
        summary = storage.read_json(path)
    name = _MODEL_NAME.value or (_PUSH.value.split("/")[1] if _PUSH.value else None)
    written = exporting.export(config_cli.user_path(_RUN_DIR.value),
                               config_cli.user_path(_OUTPUT_DIR.value), _FORMAT.value,
                               _STEP.value, base, _OVERWRITE.value, eval_summary=summary,
                               model_name=name)
    print(json.dumps(written, indent=2))
    if _PUSH.value:
        local = {kind: storage.fetch(path) if storage.is_url(path) else path
                 for kind, path in written.items()}
        for url in model_card.push(model_card.push_plan(local, _PUSH.value), _PRIVATE.value):
            print(f"pushed: {url}")


if __name__ == "__main__":
    # Here, not at import: tests import this module under their own flags.
    flags.mark_flags_as_required(["run_dir", "output_dir"])
    cli.run(main)
