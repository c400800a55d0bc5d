"""Confidence intervals, paired comparisons and rankings of metric values (docs/report_card.md,
"Intervals").

Every aggregate is a mean over units (images, or training seeds for retraining benchmarks), and
its 95% interval is a seeded percentile bootstrap over those units (scipy.stats.bootstrap,
2,000 resamples). Two methods scored on the same units are compared by the bootstrap of the
per-unit differences (a paired bootstrap): A beats B only where that interval excludes 0.
Non-finite units (a constant map's NaN) are left out and counted. Percentile rather than BCa:
BCa's jackknife needs n x n memory, which 10,000 images would not fit, and for means of bounded
values the two agree to the third decimal in our coverage checks.
"""
import dataclasses
import warnings

import numpy as np
from numpy.typing import ArrayLike

from models.foundation.lazy import lazy_module

scipy_stats = lazy_module("scipy.stats")  # 1.3 s to import: not before a binary's --help

CONFIDENCE = 0.95
RESAMPLES = 2000


@dataclasses.dataclass(frozen=True)
class Estimate:
    """A mean with its interval: `low` <= `value` <= `high` (all NaN with no finite unit)."""

    value: float
    low: float
    high: float
    n: int  # finite units used
    n_excluded: int = 0  # non-finite units left out

    def excludes(self, point: float = 0.0) -> bool:
        """Does the interval lie strictly on one side of `point`?"""
        return bool(self.low > point or self.high < point)

    def overlaps(self, other: "Estimate") -> bool:
        return bool(self.low <= other.high and other.low <= self.high)


def interval(values: ArrayLike, seed: int = 0, confidence: float = CONFIDENCE,
             resamples: int = RESAMPLES) -> Estimate:
    """The mean of the finite `values` and its percentile-bootstrap interval (seeded: same
    values and seed, same interval). Constant values give the degenerate interval [v, v]."""
    values = np.asarray(values, np.float64).ravel()
    finite = values[np.isfinite(values)]
    excluded = int(values.size - finite.size)
    if finite.size == 0:
        return Estimate(float("nan"), float("nan"), float("nan"), 0, excluded)
    mean = float(finite.mean())
    if finite.size == 1 or np.all(finite == finite[0]):
        return Estimate(mean, mean, mean, int(finite.size), excluded)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # scipy's notes on few distinct values
        result = scipy_stats.bootstrap(
            (finite,), np.mean, n_resamples=resamples, vectorized=True, axis=-1,
            confidence_level=confidence, method="percentile", rng=np.random.default_rng(seed))
    low, high = result.confidence_interval
    return Estimate(mean, min(float(low), mean), max(float(high), mean), int(finite.size),
                    excluded)


def paired_difference(a: ArrayLike, b: ArrayLike, seed: int = 0,
                      confidence: float = CONFIDENCE) -> Estimate:
    """The mean of a - b over units where both are finite, with its paired-bootstrap interval.
    `a` and `b` hold the same units in the same order."""
    a, b = np.asarray(a, np.float64).ravel(), np.asarray(b, np.float64).ravel()
    if a.shape != b.shape:
        raise ValueError(f"paired values need the same units; got {a.size} and {b.size}")
    return interval(a - b, seed, confidence)


def beats(a: ArrayLike, b: ArrayLike, higher_is_better: bool, seed: int = 0) -> bool:
    """Is A better than B on the same units, with the difference's interval excluding 0?"""
    difference = paired_difference(a, b, seed)
    return difference.excludes(0.0) and (difference.value > 0) == higher_is_better


def comparisons(per_method: dict, higher_is_better: bool, seed: int = 0) -> list:
    """[(winner, loser, Estimate of winner - loser)] for every pair of methods that the paired
    bootstrap separates (the difference's interval excludes 0). `per_method` maps names to
    per-unit values (the same units for every method)."""
    found = []
    names = list(per_method)
    for i, first in enumerate(names):
        for second in names[i + 1:]:
            difference = paired_difference(per_method[first], per_method[second], seed)
            if not difference.excludes(0.0):
                continue
            if (difference.value > 0) == higher_is_better:
                found.append((first, second, difference))
            else:
                found.append((second, first, Estimate(-difference.value, -difference.high,
                                                      -difference.low, difference.n,
                                                      difference.n_excluded)))
    return found


def ranks(per_method: dict, higher_is_better: bool, seed: int = 0) -> dict:
    """{method: rank}: 1 + the number of methods that beat it (`comparisons`), so methods no
    comparison separates share a rank."""
    losses = {name: 0 for name in per_method}
    for _, loser, _ in comparisons(per_method, higher_is_better, seed):
        losses[loser] += 1
    return {name: 1 + count for name, count in losses.items()}


def kendall_matrix(orderings: dict) -> tuple:
    """(names, matrix): Kendall's tau-b between every two metrics' method scores, oriented so
    that higher is better (docs/report_card.md, "Reading the card", its Agreement paragraph).
    `orderings` maps metric names to {method: oriented score}; each pair counts the methods
    both metrics scored (finite). NaN where fewer than two such methods or one of the two
    cannot rank them (one distinct score)."""
    names = list(orderings)
    matrix = np.full((len(names), len(names)), np.nan)
    for i, first in enumerate(names):
        for j, second in enumerate(names):
            methods = [m for m, v in orderings[first].items()
                       if np.isfinite(v) and np.isfinite(orderings[second].get(m, np.nan))]
            x = [orderings[first][m] for m in methods]
            y = [orderings[second][m] for m in methods]
            if len(methods) >= 2 and len(set(x)) > 1 and len(set(y)) > 1:
                matrix[i, j] = scipy_stats.kendalltau(x, y).statistic
    return names, matrix
