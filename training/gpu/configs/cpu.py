"""Default GPU-stack config: the tiny random Gemma 4 on the sample data, on CPU.

Same hyperparameters and data as training/tpu/configs/cpu.py (both from
training/common/hparams.py), one process.
"""

from training.common import hparams
from training.gpu import config_base


def get_config():
    return config_base.gpu_config(hparams.tiny(hparams.reference()), model="tiny-random-gemma4",
                                  dtype="float32", num_processes=1, machine="cpu")
