"""Change points in one series of boot times over many nights: E-divisive means as Apache Otava (formerly Hunter, by
DataStax) does it, then a minimum magnitude so that run-to-run noise is not news.

A boot time over 30 nights is a short, noisy series with steps in it (a slower weight load since a new image). The
method is the one Otava publishes (Fleming et al., "Hunter: Using Change Point Detection to Hunt for Performance
Regressions", ICPE 2023), written again here in plain Python because the `apache-otava` package pins numpy and scipy
to exact minors and pulls BigQuery, Postgres and Slack clients; nothing below needs more than the standard library.

1. **Split.** Windows of `WINDOW` points, each starting half a window after the last (or at the last point found):
   in each, Matteson & James' E-divisive divergence (α = 1) picks the split `τ` (and end `κ`) of a segment that
   maximises q̂ = mn/(m+n)·(2/mn·Σ|x−y| − Σ|xᵢ−xₖ|/C(n,2) − Σ|yⱼ−yₖ|/C(m,2)); the candidate is kept when a two-sided
   Student's t-test between its two sides (harness.analysis.student_t) gives p ≤ `FIRST_PASS_PVALUE`, and the search
   recurses on the segments.
   Otava's test replaces Matteson & James' random permutations, so the answer is the same on every run. Like
   Otava, the t-test takes each side's standard deviation with ddof = 0 (its `np.std`) into the pooled variance.
2. **Merge.** Every candidate is tested again between its neighbours; the weakest failing one is dropped and the
   rest retested (Otava 0.8.0 retests only the right neighbour, so it can keep a point on a stale p-value), until
   all pass: p < `MAX_PVALUE` (Otava's test), each side at least `MIN_SEGMENT` points, and
   `|after − before| ≥ max(min_absolute, min_relative · before)` on the segments' **medians** (ours: Otava's own
   filter is relative only, on means; a median is not moved by one bad night).

Defaults, and why:

- `WINDOW` = 50, `MAX_PVALUE` = 0.001, `FIRST_PASS_PVALUE` = 0.01: Otava's own (window 50, p 0.001, first pass 10×).
  p < 0.001 on nights roughly normal within a segment is about one false step in a thousand tests (a little more
  with ddof = 0); the magnitude below is what keeps a shared runner's noise out.
- `MIN_SEGMENT` = 2: one night alone cannot be told from an outlier (a cold page cache); two in a row can be a level.
- `MIN_POINTS` = 6: with fewer, a step needs two nights on each side and t > 8.6 (df 4 at 6 points, more below):
  the answer would be "no change" out of blindness, not evidence, so it is `TooFew` instead.
- `min_relative` = 0.25 and `min_absolute` = 2.0 s: both must be reached, so 0.02 s → 0.05 s (+150 %) is noise and
  so is 600 s → 610 s; 41 s → 118 s is news. The same two-sided tolerance as `compare`'s time tolerance
  (harness.analysis.tolerance), reached rather than exceeded.

Inputs: the values a cell has, in time order, nights it did not run left out — the caller maps `ChangePoint.index`
back to its run. An empty series is `TooFew(needed, 0)`. A NaN, infinite or negative value is no duration: a
`UsageError` naming its position (the caller, who knows the run's path, should refuse it first). Cost: O(w²) per
window of w points, about n/25 windows (here: 0.5 ms for 30 nights, 13 ms for 365); pure, no I/O, deterministic.
"""

from __future__ import annotations

import functools
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import accumulate, repeat
from operator import add, itemgetter, mul, sub, truediv

from harness.analysis.student_t import betainc, pvalue
from harness.analysis.tolerance import Tolerance
from harness.errors import UsageError

WINDOW = 50
MAX_PVALUE = 0.001
FIRST_PASS_PVALUE = 0.01
MIN_SEGMENT = 2
MIN_POINTS = 6


@dataclass(frozen=True)
class ChangePoint:
    index: int
    """The first point of the new segment."""
    before: float
    """Median of the segment before."""
    after: float
    """Median of the segment after."""


@dataclass(frozen=True)
class TooFew:
    """Too few points for the method to tell a step from noise: said, never guessed."""

    needed: int
    got: int


def find_change_points(values: Sequence[float], *, min_relative: float = 0.25, min_absolute: float = 2.0,
                       min_points: int = MIN_POINTS) -> list[ChangePoint] | TooFew:
    """The steps in `values` (time order), each at the first point of its new level, with both levels' medians.

    `TooFew` below `min_points` values, and never below 2·MIN_SEGMENT whatever `min_points` says."""
    _check_parameters(min_relative, min_absolute, min_points)
    series = _series(values)
    needed = max(min_points, 2 * MIN_SEGMENT)
    if len(series) < needed:
        return TooFew(needed, len(series))
    return _merge(series, _split(series), Tolerance.of_seconds(min_relative, min_absolute))


def _check_parameters(min_relative: float, min_absolute: float, min_points: int) -> None:
    for name, value in (("min_relative", min_relative), ("min_absolute", min_absolute)):
        if not (isinstance(value, (int, float)) and math.isfinite(value) and value >= 0):
            raise UsageError(f"change points: {name} {value!r} must be a finite number ≥ 0")
    if isinstance(min_points, bool) or not isinstance(min_points, int) or min_points < 1:
        raise UsageError(f"change points: min_points {min_points!r} must be a whole number ≥ 1")


def _series(values: Sequence[float]) -> list[float]:
    """The values as floats, each refused as `_checked` would; all of them checked at once where all are plain."""
    values = list(values)
    if values and set(map(type, values)) <= {float, int} and min(values) >= 0 and math.isfinite(sum(values)):
        return list(map(float, values))  # a NaN or ∞ makes the sum not finite; a negative shows in the minimum
    return [_checked(i, v) for i, v in enumerate(values)]


def _checked(i: int, value: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise UsageError(f"change points: value #{i} is {value!r}: a boot time is a finite number of seconds ≥ 0")
    return float(value)


# --- split: E-divisive in sliding windows ----------------------------------------------------------------------------
#
# The answer is defined by the straightforward arithmetic of `_ExactDivergence` (O(w²) Python steps per segment). Two
# shortcuts keep its answer while skipping most of that work, both provably:
#
# - a segment none of whose splits can reach `FIRST_PASS_PVALUE` (t-tests of every split at once from prefix sums,
#   with rounding bounds; a doubtful split counts as able to pass) cannot add a point, whichever split q̂ would pick;
#   when that holds for every segment the window is done without q̂ at all (most windows of a steady cell);
# - elsewhere `_Divergence` evaluates q̂ in another rounding (a table of within-sums, C-level loops); its result
#   is trusted only where it beats every rival by more than both roundings can err together (`tol`), and
#   near-ties (repeated values, flat segments) go to `_ExactDivergence`.

_U = 2.0 ** -53
"""The unit roundoff of a float: every error bound below is a multiple of it."""
_HUGE = 2.0 ** 900
"""Above this, sums of a window's values could overflow; such a window takes the exact path throughout."""


class _ExactDivergence:
    """Matteson & James' q̂ over one window, from per-column running sums of |yᵢ − yₖ|: O(1) per (τ, κ)."""

    def __init__(self, window: Sequence[float]):
        # cum[k][r] = Σ_{i<r} |y_i − y_k|
        self.cum = [list(accumulate((abs(yi - yk) for yi in window), initial=0.0)) for yk in window]

    def best(self, s: int, e: int) -> tuple[float, int]:
        """(q̂, τ) maximising over s < τ < κ ≤ e, the first maximum with τ outer, κ inner (Otava's argmax order)."""
        cum = self.cum
        best_q, best_tau = -math.inf, s + 1
        within_left = 0.0
        for tau in range(s + 1, e):
            n = tau - s
            col = cum[tau - 1]
            within_left += col[tau - 1] - col[s]
            left_term = 2 * within_left / (n - 1) if n > 1 else 0.0
            between = within_right = 0.0
            for kappa in range(tau + 1, e + 1):
                col = cum[kappa - 1]
                between += col[tau] - col[s]
                within_right += col[kappa - 1] - col[tau]
                m = kappa - tau
                q = 2 * between - m * left_term
                if m > 1:
                    q -= 2 * n * within_right / (m - 1)
                q /= m + n
                if q > best_q:
                    best_q, best_tau = q, tau
        return best_q, best_tau


def _next_column(column: list[float], suffix: list[float]) -> list[float]:
    """P(τ, κ+1) from P(τ, κ) and Σ_{τ≤i<κ} |yᵢ − y_κ| (`suffix`, last τ first), with P(κ, κ+1) = 0."""
    return [*map(add, column, reversed(suffix)), 0.0]


def _spreads(column: list[float]) -> list[float]:
    """P(τ, κ)/(m−1) for m = κ − τ, 0 for m = 1."""
    return [*map(truediv, column, range(len(column) - 1, 0, -1)), 0.0]


class _Divergence:
    """`_ExactDivergence`'s answers from a cheaper evaluation of the same q̂, trusted only beyond its rounding.

    With P(a, b) = Σ_{a≤i<j<b} |yᵢ − yⱼ| (a table built once per window, a column per κ), q̂ is
    2·P(s,κ)/N − 2(N−1)/N · (P(s,τ)/(n−1) + P(τ,κ)/(m−1)) with N = n + m: per κ, one minimum over τ. Both this and
    `_ExactDivergence` are within 16·w³·u·D and 17·w³·u·D of the real q̂ (D the window's range, u the unit roundoff:
    sums of ≤ 2w roundings of terms ≤ w²·D); `tol` = 4096·w³·u·D is over 60 times the 2·33·w³·u·D by which the two
    can order a pair differently, so a split found here with no rival within `tol` is the one the exact arithmetic
    finds, and a q̂ more than `tol` above another is above it there too."""

    def __init__(self, window: Sequence[float]):
        self.window = window
        w = len(window)
        self.tol = 4096 * w ** 3 * _U * (max(window) - min(window)) + 2.0 ** -1000  # + underflow, ≪ 2^-1000
        self.fast = max(window) < _HUGE
        self._exact: _ExactDivergence | None = None
        self._exact_best: dict[tuple[int, int], tuple[float, int]] = {}
        self._columns: dict[int, list[float]] = {}  # s → q̂'s maximum over τ for κ = s+2, s+3, …
        self.within, self.spread = self._within(window) if self.fast else ([], [])

    @staticmethod
    def _within(window: Sequence[float]) -> tuple[list[list[float]], list[list[float]]]:
        """within[κ][τ] = P(τ, κ) for τ < κ (column κ+1 is column κ plus the suffix sums of |yᵢ − y_κ|), and
        spread[κ][τ] = P(τ, κ)/(m−1), m = κ − τ (0 for m = 1)."""
        w = len(window)
        suffixes = map(list, map(accumulate, map(map, repeat(abs), map(map, repeat(sub),
                   [window[kappa - 1::-1] for kappa in range(1, w)], map(repeat, window[1:])))))
        within = [[], *accumulate(suffixes, _next_column, initial=[0.0])]
        spread = [[], [0.0], *map(_spreads, within[2:])]
        return within, spread

    def exact(self, s: int, e: int) -> tuple[float, int]:
        if (s, e) not in self._exact_best:
            if self._exact is None:
                self._exact = _ExactDivergence(self.window)
            self._exact_best[(s, e)] = self._exact.best(s, e)
        return self._exact_best[(s, e)]

    def best(self, s: int, e: int) -> tuple[float, int]:
        """(q̂, τ) as `_ExactDivergence.best` answers: τ exactly, q̂ within `tol / 2` (exactly where it had to ask)."""
        if not self.fast:
            return self.exact(s, e)
        columns = self._columns_from(s, e)[:e - s - 1]
        top = max(columns)
        taus = {tau for k, q in enumerate(columns) if q >= top - self.tol
                for tau in self._near_taus(s, s + 2 + k, top - self.tol)}
        if len(taus) == 1:
            return top, taus.pop()
        return self.exact(s, e)

    def _columns_from(self, s: int, e: int) -> list[float]:
        """q̂'s maximum over τ for each κ in s+2..e, computed once per s (a split only shrinks segments): per κ the
        minimum over τ of P(s,τ)/(n−1) + P(τ,κ)/(m−1), all in C-level loops."""
        done = self._columns.get(s, [])
        if len(done) < e - s - 1:
            ps, left = self._left(s, e)
            first = s + 2 + len(done)
            rows = map(itemgetter(slice(s + 1, None)), self.spread[first:e + 1])
            xs = map(min, map(map, repeat(add), repeat(left), rows))
            sizes = range(first - s, e - s + 1)
            g = map(truediv, map(mul, repeat(2), ps[first - s:]), sizes)
            h = map(truediv, map(mul, repeat(2), range(first - s - 1, e - s)), sizes)
            done.extend(map(sub, g, map(mul, h, xs)))
            self._columns[s] = done
        return done

    def _left(self, s: int, e: int) -> tuple[list[float], list[float]]:
        """P(s, s+N) for N = 0..e−s, and P(s, τ)/(n−1) (0 for n = 1) for n = τ − s = 1..e−s−1."""
        ps = [0.0, *(self.within[kappa][s] for kappa in range(s + 1, e + 1))]
        return ps, [0.0, *(ps[n] / (n - 1) for n in range(2, e - s))]

    def _near_taus(self, s: int, kappa: int, floor: float) -> list[int]:
        """The τ whose q̂ (this arithmetic) at κ is at least `floor`."""
        ps, left = self._left(s, kappa)
        size = kappa - s
        g, h = 2 * ps[size] / size, 2 * (size - 1) / size
        rights = self.spread[kappa][s + 1:]
        return [s + 1 + k for k, (lt, rt) in enumerate(zip(left, rights, strict=False)) if g - h * (lt + rt) >= floor]

    def pick(self, segments: list[tuple[int, int]], found: dict[tuple[int, int], tuple[float, int]]) -> tuple[int, int]:
        """The segment of the largest q̂, the first of equals, as `max` over exact values would pick it."""
        top = max(found[seg][0] for seg in segments)
        near = [seg for seg in segments if found[seg][0] >= top - self.tol]
        if len(near) == 1:
            return near[0]
        return max(near, key=lambda seg: self.exact(*seg)[0])


class _Sides:
    """The first-pass t-test of every split of a segment at once, from a window's prefix sums of x and x².

    It answers only "can no split reach `FIRST_PASS_PVALUE`?": each split's t² is bounded from above, over both this
    rounding and `pvalue`'s (sums of ≤ 2w roundings: 5·w·u·Σx for a side's sum, 35·w²·u·Σx² for the pooled squares,
    doubled), and compared with a t² every smaller value of which `pvalue` puts above the level (`_t2_below`)."""

    def __init__(self, window: Sequence[float]):
        w = len(window)
        self.sums = list(accumulate(window, initial=0.0))
        self.squares = list(accumulate(map(mul, window, window), initial=0.0))
        self.mean_error = 10 * w * _U * self.sums[-1]
        self.pooled_error = 70 * w * w * _U * self.squares[-1]

    def may_pass(self, s: int, e: int) -> bool:
        df = e - s - 2
        if df < 1:
            return False  # two points: pvalue is 1
        if self.squares[-1] >= _HUGE:
            return True
        sums, squares, mean_error, pooled_error = self.sums, self.squares, self.mean_error, self.pooled_error
        bound = _t2_below(df) / (df * (1 + 1e-9))
        s1, s2, e1, e2 = sums[s], squares[s], sums[e], squares[e]
        for a1, a2, n1, n2 in zip(sums[s + 1:e], squares[s + 1:e], range(1, e - s), range(e - s - 1, 0, -1),
                                  strict=False):
            l1, r1 = a1 - s1, e1 - a1
            m1, m2 = l1 / n1, r1 / n2
            pooled = (a2 - s2 - l1 * m1) * (n1 - 1) / n1 + (e2 - a2 - r1 * m2) * (n2 - 1) / n2
            k = 1 / n1 + 1 / n2
            d = abs(m1 - m2) + mean_error * k
            if d * d >= bound * k * (pooled - pooled_error):
                return True
        return False


@functools.cache
def _t2_below(df: int) -> float:
    """A t² under which `pvalue`'s p (df degrees of freedom) is above FIRST_PASS_PVALUE: its crossing, less 10⁻⁶.

    p falls with t², and `betainc` is good to ~10⁻¹³ while 10⁻⁶ of t² moves p by over 10⁻⁷: the margin is safe."""
    def above(log_t2: float) -> float:
        p = betainc(df / 2, 0.5, df / (df + math.exp(log_t2)))
        return math.log(max(p, 1e-300)) - math.log(FIRST_PASS_PVALUE)

    lo, hi = math.log(1e-6), math.log(1e6)  # p ≈ 1, and p < 10⁻³ for every df ≥ 1 (df 1: t = 1000)
    f_lo, f_hi = above(lo), above(hi)
    side = 0
    while hi - lo > 1e-9:  # Illinois regula falsi: a handful of steps
        mid = hi - f_hi * (hi - lo) / (f_hi - f_lo)
        if not lo < mid < hi:
            mid = (lo + hi) / 2
        f_mid = above(mid)
        if f_mid > 0:
            lo, f_lo = mid, f_mid
            if side == -1:
                f_hi /= 2
            side = -1
        else:
            hi, f_hi = mid, f_mid
            if side == 1:
                f_lo /= 2
            side = 1
    return math.exp(lo) * (1 - 1e-6)


def _window_points(window: Sequence[float]) -> list[int]:
    """E-divisive with Otava's t-test in one window: split the best segment while the split is significant."""
    sides = _Sides(window)
    divergence: _Divergence | None = None
    points: list[int] = []
    cache: dict[tuple[int, int], tuple[float, int]] = {}
    open_: dict[tuple[int, int], bool] = {}
    while True:
        bounds = [0, *points, len(window)]
        segments = [(bounds[k], bounds[k + 1]) for k in range(len(bounds) - 1) if bounds[k + 1] - bounds[k] > 1]
        for seg in segments:
            if seg not in open_:
                open_[seg] = sides.may_pass(*seg)
        if not any(open_[seg] for seg in segments):
            return points  # no split anywhere can pass, so neither can the one q̂ picks
        if divergence is None:
            divergence = _Divergence(window)
        for seg in segments:
            if seg not in cache:
                cache[seg] = divergence.best(*seg)
        s, e = divergence.pick(segments, cache)
        tau = cache[(s, e)][1]
        if pvalue(window[s:tau], window[tau:e]) > FIRST_PASS_PVALUE:
            return points
        points = sorted([*points, tau])


def _split(series: Sequence[float]) -> list[int]:
    """The weak change points: the union over windows of half a window's step (Otava's split)."""
    step = WINDOW // 2
    found: set[int] = set()
    start = 0
    while start < len(series):
        end = min(start + WINDOW, len(series))
        new = [start + p for p in _window_points(series[start:end])]
        found.update(new)
        start = max(max(new, default=0), start + step)
    return sorted(found)


# --- merge: drop the weakest failing point until every one passes ----------------------------------------------------

@dataclass(frozen=True)
class _Evidence:
    """One point tested between its neighbours."""

    pvalue: float
    short: bool
    """A side has fewer than MIN_SEGMENT points."""
    large: bool
    """The medians moved by the minimum magnitude."""
    ratio: float
    before: float
    after: float


def _evidence(left: Sequence[float], right: Sequence[float], magnitude: Tolerance) -> _Evidence:
    before, after = statistics.median(left), statistics.median(right)
    return _Evidence(pvalue(left, right), min(len(left), len(right)) < MIN_SEGMENT,
                     magnitude.reached(before, after), magnitude.ratio(before, after), before, after)


def _merge(series: Sequence[float], points: list[int], magnitude: Tolerance) -> list[ChangePoint]:
    """Otava's merge order: the highest p-value at or above MAX_PVALUE goes first; then (ours) a point with a short
    side, the highest p first; then the smallest change below the magnitude. Every point is retested each time (a
    test depends only on the point and its two neighbours, so one already made is looked up, not made again)."""
    points = list(points)
    known: dict[tuple[int, int, int], _Evidence] = {}

    def test(lo: int, p: int, hi: int) -> _Evidence:
        if (lo, p, hi) not in known:
            known[(lo, p, hi)] = _evidence(series[lo:p], series[p:hi], magnitude)
        return known[(lo, p, hi)]

    while points:
        bounds = [0, *points, len(series)]
        tests = [test(bounds[k], p, bounds[k + 2]) for k, p in enumerate(points)]
        ks = range(len(points))
        weakest = max(ks, key=lambda k: tests[k].pvalue)
        if tests[weakest].pvalue < MAX_PVALUE:
            short = [k for k in ks if tests[k].short]
            small = [k for k in ks if not tests[k].large]
            if short:
                weakest = max(short, key=lambda k: tests[k].pvalue)
            elif small:
                weakest = min(small, key=lambda k: tests[k].ratio)
            else:
                return [ChangePoint(index=p, before=t.before, after=t.after)
                        for p, t in zip(points, tests, strict=False)]
        del points[weakest]
    return []
