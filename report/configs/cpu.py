"""Report settings. Prices and peaks come from the machine table
(common/machines.py), never from here."""

from ml_collections import config_dict


def get_config():
    c = config_dict.ConfigDict()
    # Hours of serving the cost-of-ownership table adds to a training run (the
    # reference quoted 1 h and a day).
    c.tco_hours = (1.0, 24.0)
    # The input length whose serving cost the per-token ownership uses (the
    # largest both platforms measured when they lack this one).
    c.tco_input_len = "4096"
    return c
