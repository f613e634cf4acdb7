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
