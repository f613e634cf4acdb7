"""Converts a PEFT adapter (e.g. from the GPU stack) into the Orbax LoRA state
the TPU stack reads.

    bazel run //conversion:import_adapter -- --adapter=runs/h100x2/adapter \\
        --base_model=google/gemma-4-31B-it --output_dir=imported
    bazel run //training/tpu:sft -- --config.lora.init_from=imported ...

Writes OUTPUT_DIR/lora (Orbax, as in TPU checkpoints) and OUTPUT_DIR/adapter.json
(rank, alpha, targets, base). The map is exact both ways: exporting the result
again gives the adapter's tensors bit for bit. An adapter whose k_proj and
v_proj LoRA A differ on a layer where Tunix fuses K and V is refused.
"""

import json
import os

from absl import app
from absl import flags
from absl import logging as absl_logging

from common import cli
from common import config_cli
from common import storage
from gemma4 import adapter
from gemma4 import base_model
from gemma4 import gemma4_map
from gemma4 import lora_map
from gemma4 import orbax_lora

_ADAPTER = flags.DEFINE_string("adapter", None, "PEFT adapter directory.")
_BASE_MODEL = flags.DEFINE_string("base_model", None, "Base HF directory or Hub id (the "
                                  "adapter's base_model_name_or_path by default).")
_OUTPUT_DIR = flags.DEFINE_string("output_dir", None, "Where to write the Orbax LoRA state.")
_OVERWRITE = flags.DEFINE_bool("overwrite", False, "Replace an existing --output_dir.")


def import_adapter(adapter_dir, base, output_dir, overwrite=False):
    factors, config = adapter.read(adapter_dir)
    base_dir = base_model.resolve(base or config.get("base_model_name_or_path") or "",
                                  os.path.dirname(os.path.abspath(output_dir)))
    dims = gemma4_map.Dims.from_hf_config(base_model.read_config(base_dir))
    qwix = lora_map.peft_to_qwix(dims, factors)
    with storage.output_dir(output_dir, overwrite) as tmp:
        orbax_lora.write(tmp, qwix)
        storage.write_json(os.path.join(tmp, "adapter.json"), {
            "rank": config["r"], "alpha": config["lora_alpha"],
            "target_modules": lora_map.target_modules_of(factors),
            "base_model": base_dir, "adapter": os.path.abspath(adapter_dir)})
    return output_dir


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    absl_logging.set_verbosity(absl_logging.WARNING)
    base = _BASE_MODEL.value
    if base and os.path.exists(config_cli.user_path(base)):
        base = config_cli.user_path(base)
    out = import_adapter(config_cli.user_path(_ADAPTER.value), base,
                         config_cli.user_path(_OUTPUT_DIR.value), _OVERWRITE.value)
    print(json.dumps({"orbax_lora": out}))


if __name__ == "__main__":
    # Here, not at import: tests import this module under their own flags.
    flags.mark_flags_as_required(["adapter", "output_dir"])
    cli.run(main)
