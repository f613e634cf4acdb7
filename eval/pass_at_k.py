"""The unbiased pass@k estimator (Chen et al. 2021), as VerilogEval reports it.

For a problem with n samples of which c pass, pass@k = 1 - C(n-c, k) / C(n, k):
the chance that k samples drawn without replacement from the n include a
passing one. The benchmark figure is its mean over problems.
"""

import math


def pass_at_k(n, c, k):
    """Unbiased pass@k of one problem with `n` samples, `c` of them passing."""
    if not 0 <= c <= n:
        raise ValueError(f"need 0 <= c <= n, got n={n}, c={c}")
    if not 1 <= k <= n:
        raise ValueError(f"need 1 <= k <= n, got k={k}, n={n}")
    if n - c < k:
        return 1.0
    # 1 - C(n-c, k) / C(n, k) as a product, exact enough and free of huge ints.
    return 1.0 - math.prod(1.0 - k / i for i in range(n - c + 1, n + 1))


def ks_for(n, asked=()):
    """The k values to report for n samples per problem: 1, n and those asked (<= n)."""
    return sorted({1, n, *(k for k in asked if 1 <= k <= n)})


def mean_pass_at_k(counts, ks):
    """{str(k): mean pass@k} over `counts` ({problem: (n, c)}); k must be <= every n."""
    if not counts:
        return {}
    result = {}
    for k in ks:
        values = [pass_at_k(n, c, k) for n, c in counts.values()]
        result[str(k)] = sum(values) / len(values)
    return result


def bootstrap_interval(counts, k, resamples=2000, seed=0, level=0.95):
    """[low, high]: the `level` percentile interval of mean pass@k over problems
    resampled with replacement (seeded, so a summary is reproducible).

    It measures how much the figure depends on which problems were drawn, not
    the sampling noise within a problem (pass@k's estimator handles that).
    """
    import numpy as np  # pylint: disable=import-outside-toplevel
    values = np.asarray([pass_at_k(n, c, k) for n, c in counts.values()])
    if values.size == 0:
        return None
    rng = np.random.default_rng(seed)
    means = values[rng.integers(0, values.size, size=(resamples, values.size))].mean(axis=1)
    tail = (1.0 - level) / 2 * 100
    low, high = np.percentile(means, [tail, 100 - tail])
    return [float(low), float(high)]
