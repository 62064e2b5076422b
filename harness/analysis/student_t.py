"""Student's two-sample t-test as Apache Otava computes it, in plain Python (harness.analysis.changepoints tests its
change points with it): the pooled t statistic, its two tails through the regularized incomplete beta function (a
continued fraction by the modified Lentz method), good to ~10⁻¹³; no numpy or scipy."""

from __future__ import annotations

import math
from collections.abc import Sequence
from itertools import repeat
from operator import sub


def pvalue(left: Sequence[float], right: Sequence[float]) -> float:
    """The two-sided p of Student's t between `left` and `right` (pooled variance, each side's with ddof = 0, as
    Otava's np.std): 1 for fewer than three points, and where both sides are constant, 1 if equal, else 0."""
    n1, n2 = len(left), len(right)
    if n1 + n2 <= 2:
        return 1.0
    m1, m2 = math.fsum(left) / n1, math.fsum(right) / n2
    v1 = math.fsum(map(pow, map(sub, left, repeat(m1)), repeat(2))) / n1  # Σ(x − m)², ddof = 0 as Otava's np.std
    v2 = math.fsum(map(pow, map(sub, right, repeat(m2)), repeat(2))) / n2
    df = n1 + n2 - 2
    pooled = ((n1 - 1) * v1 + (n2 - 1) * v2) / df
    scale = math.sqrt(pooled * (1 / n1 + 1 / n2))
    if scale == 0:
        return 1.0 if m1 == m2 else 0.0
    t = (m1 - m2) / scale
    return betainc(df / 2, 0.5, df / (df + t * t))


def betainc(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta I_x(a, b): the t distribution's two tails are I_{df/(df+t²)}(df/2, 1/2)."""
    if x <= 0:
        return 0.0
    if x >= 1:
        return 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1) / (a + b + 2):
        return front * _beta_fraction(a, b, x) / a
    return 1.0 - front * _beta_fraction(b, a, 1 - x) / b


def _beta_fraction(a: float, b: float, x: float) -> float:
    """The continued fraction of I_x(a, b), by the modified Lentz method (converges fast where it is used)."""
    tiny, eps = 1e-300, 1e-15
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        for numerator in (m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
                          -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))):
            d = 1.0 + numerator * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + numerator / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < eps:
            break
    return h
