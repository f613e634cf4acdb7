"""The recipe //report:plan plans: the reference's (training/common/hparams.py) on
Gemma 4 31B, packed as every machine config packs it. Only the recipe's fields
are set on each machine's config (report/planning.py's RECIPE_FIELDS: data,
LoRA, optimizer, effective batch, checkpoint and validation intervals, base);
mesh, micro-batch, remat and attention stay each machine config's.

    --config.data.source=my.jsonl --config.lora.rank=32 --config.data.epochs=2
"""

from training.common import hparams


def get_config():
    c = hparams.reference()
    c.model = hparams.model("google/gemma-4-31B-it", "bfloat16")
    c.data.packing = True
    return c
