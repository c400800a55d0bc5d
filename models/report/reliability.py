"""How far a metric's ranking of methods can be trusted (docs/report_card.md, "How far to trust
each metric"): the reliability checks of Tomsett et al. 2020 on a metric's per-unit values.

A metric scores every method on the same units (images); each image then ranks the methods.
- Inter-rater reliability: Krippendorff's alpha at the ordinal level, with the images as raters
  and the methods as the rated units (the `krippendorff` package): 1 when every image ranks
  the methods alike, about 0 when images agree no more than chance, negative below chance.
- Split-half reliability: the images are split at random into two halves; the Spearman
  correlation between the two halves' rankings of the methods' means, averaged over seeded
  splits, is stepped up to the whole set by Spearman-Brown (2r / (1 + r), clipped to [-1, 1]).
- Separation: the share of method pairs the paired bootstrap separates
(`models.report.uncertainty`). Alpha and split-half come with seeded percentile-bootstrap intervals
over images. Units with a non-finite value for any method are left out.
"""
import krippendorff
import numpy as np
from numpy.typing import ArrayLike

from models.foundation.lazy import lazy_module
from models.report.uncertainty import CONFIDENCE, Estimate

scipy_stats = lazy_module("scipy.stats")  # 1.3 s to import: not before a binary's --help

SPLITS = 200  # random halvings per split-half estimate
RESAMPLES = 200  # bootstrap resamples of the images for the intervals


def unit_ranks(values: ArrayLike, higher_is_better: bool) -> np.ndarray:
    """[units, methods] values -> each unit's ranks of the methods (1 = best, ties share their
    mean rank); a unit with a non-finite value is a row of NaN."""
    values = np.asarray(values, np.float64)
    oriented = -values if higher_is_better else values
    ranks = scipy_stats.rankdata(np.nan_to_num(oriented), axis=1)
    ranks[~np.isfinite(values).all(axis=1)] = np.nan
    return ranks


def ordinal_alpha(ratings: ArrayLike) -> float:
    """Krippendorff's alpha, ordinal level, of `ratings` [raters, rated units] (NaN: missing);
    NaN when fewer than two values can be paired or all values are equal."""
    ratings = np.asarray(ratings, np.float64)
    finite = ratings[np.isfinite(ratings)]
    pairable = (np.isfinite(ratings).sum(axis=0) >= 2).sum()
    if pairable < 1 or np.unique(finite).size < 2:
        return float("nan")
    return float(krippendorff.alpha(reliability_data=ratings, level_of_measurement="ordinal"))


def _complete(values) -> np.ndarray:
    values = np.asarray(values, np.float64)
    return values[np.isfinite(values).all(axis=1)]


def alpha(values: ArrayLike, higher_is_better: bool) -> float:
    """Krippendorff's ordinal alpha of the images' rankings of the methods ([units, methods])."""
    return ordinal_alpha(unit_ranks(_complete(values), higher_is_better))


def _row_spearman(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Spearman correlation of each row of `a` with the same row of `b` (NaN if constant)."""
    a, b = scipy_stats.rankdata(a, axis=1), scipy_stats.rankdata(b, axis=1)
    a, b = a - a.mean(axis=1, keepdims=True), b - b.mean(axis=1, keepdims=True)
    scale = np.sqrt((a * a).sum(axis=1) * (b * b).sum(axis=1))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(scale > 0, (a * b).sum(axis=1) / scale, np.nan)


def split_half(values: ArrayLike, seed: int = 0, splits: int = SPLITS) -> float:
    """Spearman-Brown split-half reliability of the methods' ranking ([units, methods]; the
    direction of the metric does not change a correlation): NaN with fewer than 2 units or 2
    methods, or when no split ranks the methods."""
    values = _complete(values)
    units, methods = values.shape
    if units < 2 or methods < 2:
        return float("nan")
    half = units // 2
    rng = np.random.default_rng(seed)
    orders = rng.permuted(np.tile(np.arange(units), (splits, 1)), axis=1)
    first = values[orders[:, :half]].mean(axis=1)  # [splits, methods]
    second = values[orders[:, half:2 * half]].mean(axis=1)
    correlations = _row_spearman(first, second)
    if not np.isfinite(correlations).any():
        return float("nan")
    r = float(np.nanmean(correlations))
    return float(np.clip(2 * r / (1 + r), -1.0, 1.0)) if r > -1 else -1.0


def _bootstrap(statistic, values, seed: int, resamples: int = RESAMPLES) -> Estimate:
    """`statistic(values)` with a percentile interval over images resampled with replacement
    (one call per resample: Krippendorff's alpha is not batched; a few ms each at card sizes)."""
    values = _complete(values)
    point = statistic(values)
    if not np.isfinite(point):
        return Estimate(point, point, point, len(values))
    rng = np.random.default_rng(seed)
    draws = np.array([statistic(values[rng.integers(0, len(values), len(values))])
                      for _ in range(resamples)])
    draws = draws[np.isfinite(draws)]
    tail = 100 * (1 - CONFIDENCE) / 2
    low, high = np.percentile(draws, [tail, 100 - tail]) if draws.size else (point, point)
    return Estimate(point, min(float(low), point), max(float(high), point), len(values))


def metric_reliability(values: ArrayLike, higher_is_better: bool, separated_pairs: int,
                       seed: int = 0) -> dict:
    """{"alpha", "split_half": Estimate, "separated": share of method pairs} of one metric's
    [units, methods] values; `separated_pairs` is the number of pairs the paired bootstrap
    separates (the card's `beats` of this metric)."""
    methods = np.asarray(values).shape[1]
    pairs = methods * (methods - 1) // 2
    return {"alpha": _bootstrap(lambda v: alpha(v, higher_is_better), values, seed),
            "split_half": _split_half_estimate(values, seed),
            "separated": separated_pairs / pairs if pairs else float("nan")}


def _split_half_estimate(values, seed) -> Estimate:
    """Split-half reliability with its bootstrap interval (fewer splits per resample)."""
    point = split_half(values, seed)
    interval = _bootstrap(lambda v: split_half(v, seed, splits=20), values, seed)
    return Estimate(point, min(interval.low, point), max(interval.high, point), interval.n)
