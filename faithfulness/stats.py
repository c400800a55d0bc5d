"""Curve summaries and correlations on score matrices, row by row in float64 (docs/faithfulness.md,
"Curve summaries"): trapezoid AUC on x = t / K, Pearson (NaN for a constant row), Spearman with
average ranks, and the NaN policy used to aggregate per-image values."""
import logging
from typing import Callable

import numpy as np

from models.foundation import cluster, ordering
from models.foundation.errors import UserError
from models.foundation.lazy import lazy_module

scipy_stats = lazy_module("scipy.stats")  # 1.3 s to import: not before a binary's --help

NAN_POLICIES = ("propagate", "omit")


def trapezoid_auc(curves: np.ndarray) -> np.ndarray:
    """[N]: trapezoid area of each row y_0..y_K at x = t / K (NaN for a single point)."""
    curves = np.asarray(curves, np.float64)
    steps = curves.shape[1] - 1
    if steps < 1:
        return np.full(len(curves), np.nan)
    return (curves.sum(axis=1) - (curves[:, 0] + curves[:, -1]) / 2) / steps


def pearson(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """[N]: Pearson correlation of each row pair, NaN where either row is constant."""
    a = np.asarray(a, np.float64)
    b = np.asarray(b, np.float64)
    a = a - a.mean(axis=1, keepdims=True)
    b = b - b.mean(axis=1, keepdims=True)
    denominator = np.sqrt((a * a).sum(axis=1) * (b * b).sum(axis=1))
    with np.errstate(invalid="ignore", divide="ignore"):
        result = (a * b).sum(axis=1) / denominator
    return np.where(denominator > 0, np.clip(result, -1.0, 1.0), np.nan)


PARALLEL_VALUES = 1 << 15  # the row functions share out their rows among the cores from here


def _by_rows_on_cores(function: Callable[[np.ndarray], np.ndarray],
                      values: np.ndarray) -> np.ndarray:
    """`function(values)` for a function of each row alone, the rows shared out in blocks among
    threads, one a usable core (NumPy's sorts release the GIL), from `PARALLEL_VALUES` values;
    the same values either way."""
    threads = min(len(cluster.usable_cores()), len(values))
    if threads < 2 or values.size < PARALLEL_VALUES:
        return function(values)
    return np.concatenate(cluster.map_on_cores(function, np.array_split(values, threads)))


def ranks(a: np.ndarray) -> np.ndarray:
    """[N, D]: each row's ranks in float64 (average ranks for ties, as scipy.stats: the same
    values, 0.5 x (first place + end place + 1) of each run of equal values), the rows on the
    cores (`_by_rows_on_cores`); rows with a NaN go to scipy."""
    values = np.atleast_2d(np.asarray(a, np.float64))
    if values.shape[1] == 0 or np.isnan(values).any():
        return scipy_stats.rankdata(values, axis=1)
    return _by_rows_on_cores(_ranks_of_rows, values)


def sorted_rows(a: np.ndarray) -> np.ndarray:
    """[N, D]: each row of `a` sorted ascending, the rows on the cores (`_by_rows_on_cores`):
    the same values as `np.sort(a, axis=1)`."""
    return _by_rows_on_cores(lambda block: np.sort(block, axis=1), np.atleast_2d(np.asarray(a)))


def _ranks_of_rows(values: np.ndarray) -> np.ndarray:
    """`ranks` of float64 [N, D] without NaNs. The order within a run of equal values does not
    change its average, so any sorted order serves: `ordering.stable_places`'s, whose radix
    passes beat NumPy's comparison sort on a map (docs/architecture.md, "Stable orders"); the
    rows are read and written through flat indices (2-D fancy indexing cost 3x the sort)."""
    rows, width = values.shape
    places = ordering.stable_places(values)
    ordered = np.take(values.ravel(), places).reshape(rows, width)
    starts_run = np.empty((rows, width), bool)
    starts_run[:, 0] = True
    np.not_equal(ordered[:, 1:], ordered[:, :-1], out=starts_run[:, 1:])  # -0.0 == 0.0
    if starts_run.all():  # no ties
        average = np.tile(np.arange(1.0, width + 1), rows)
    else:
        starts = np.flatnonzero(starts_run)
        lengths = np.diff(starts, append=rows * width)
        average = np.repeat(starts % width + 0.5 * (lengths + 1), lengths)
    found = np.empty(rows * width)
    found[places] = average
    return found.reshape(rows, width)


def spearman(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """[N]: Spearman correlation of each row pair (average ranks for ties, as scipy.stats)."""
    return pearson(ranks(a), ranks(b))


def spearman_ranked(ranked: np.ndarray, b: np.ndarray) -> np.ndarray:
    """`spearman(a, b)` given `ranked` = `ranks(a)`: for one row set compared with many."""
    return pearson(ranked, ranks(b))


def aggregate(values: np.ndarray, nan_policy: str = "propagate",
              what: str = "value") -> tuple[float, int]:
    """(mean, number of non-finite values excluded) of per-image `values` under `nan_policy`."""
    if nan_policy not in NAN_POLICIES:
        raise UserError(f"unknown nan_policy {nan_policy!r}; use one of {', '.join(NAN_POLICIES)}")
    values = np.asarray(values, np.float64)
    finite = np.isfinite(values)
    excluded = int((~finite).sum())
    if nan_policy == "propagate":
        if excluded:  # the reference's mean: faithful, but never silently NaN
            logging.getLogger(__name__).warning(
                "%d of %d images have a non-finite %s (a constant map or curve), so the mean is "
                "NaN as in the reference; pass nan_policy='omit' to exclude them", excluded,
                values.size, what)
        return (float(values.mean()) if values.size else float("nan")), 0
    if excluded:
        logging.getLogger(__name__).warning("%d of %d images have a non-finite %s and are "
                                            "excluded from the mean", excluded, values.size, what)
    return (float(values[finite].mean()) if finite.any() else float("nan")), excluded
