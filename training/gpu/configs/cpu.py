"""Default GPU-stack config: the tiny random Gemma 4 on the sample data, on CPU."""

from ml_collections import config_dict

from training.common import hparams


def get_config():
    c = hparams.tiny(hparams.reference())
    c.model = config_dict.ConfigDict()
    c.model.name = "tiny-random-gemma4"
    c.model.dtype = "float32"
    c.num_processes = 1
    return c
