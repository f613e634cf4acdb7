"""The cost arithmetic of the comparison, written once (prices: common/machines.py).

    training cost        = hours x $/hour
    $ per 1M tokens      = $/hour / (tokens/s x 3600 / 1e6)
    cost of ownership    = training cost + hours of serving x serving $/hour
    per-token ownership  = training cost + millions of output tokens x serving $ per 1M
The last one counts what serving produces, which the reference's hourly
figure ignores: a machine that serves twice as fast needs half the hours.

The prices are the machine table's for one region, with a team's own price file
on top (`use_prices`: the plan's and the report's --region and --prices).
"""

from absl import flags

from common import machines
from common import storage


def define_price_flags():
    """The --region and --prices flags of a binary that prices machines."""
    region = flags.DEFINE_string(
        "region", machines.PRICE_REGION, "The Google Cloud region whose prices are used "
        f"(built-in: {', '.join(machines.REGIONS)}: TPUs where SkyPilot's catalog lists them, "
        f"GPUs in {machines.PRICE_REGION} only).")
    prices = flags.DEFINE_string(
        "prices", "", "A JSON file (or gs:// object) of your own prices per chip-hour "
        "(a committed-use discount, another region): docs/compare-and-plan.md, \"Prices\". "
        "They replace the built-in ones they name.")
    return region, prices


def use_prices(region, path):
    """Prices this process's machine table for `region` and the price file at `path`
    (local or in a bucket; empty: none); returns the region as checked."""
    text = None
    if path:
        try:
            text = storage.read_text(path)
        except Exception as e:  # pylint: disable=broad-except
            # A local file's OSError, or whatever a bucket's client raises (an HTTP
            # status, credentials): one line either way.
            raise machines.PriceError(f"--prices={path}: cannot read it "
                                      f"({type(e).__name__}: {e})") from None
    return machines.use_prices(region, path or None, text)


def training_cost(hours, dollars_per_hour):
    if hours is None or dollars_per_hour is None:
        return None
    return hours * dollars_per_hour


def dollars_per_million_tokens(tokens_per_s, dollars_per_hour):
    if not tokens_per_s or dollars_per_hour is None:
        return None
    return dollars_per_hour / (tokens_per_s * 3600 / 1e6)


def ownership(train_cost, serving_dollars_per_hour, hours):
    """Training plus `hours` of serving, in dollars."""
    if train_cost is None or serving_dollars_per_hour is None:
        return None
    return train_cost + hours * serving_dollars_per_hour


def crossover(a_fixed, a_rate, b_fixed, b_rate):
    """Where a_fixed + a_rate x = b_fixed + b_rate x (x >= 0), or None if never."""
    if None in (a_fixed, a_rate, b_fixed, b_rate) or a_rate == b_rate:
        return None
    x = (b_fixed - a_fixed) / (a_rate - b_rate)
    return x if x >= 0 else None


def ratio(a, b):
    """a / b, None when either is unknown or b is 0."""
    if a is None or not b:
        return None
    return a / b
