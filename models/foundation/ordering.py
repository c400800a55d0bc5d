"""Stable orders of maps' values (docs/architecture.md, "Stable orders"): NumPy's stable sort of
floats, a comparison sort, runs 1.4-2.4x slower on a map than the way below
(`scripts.bench_ordering`, the docs' table). `stable_order` sorts a long row of floats by two
radix passes of 16 bits over its values rounded to float32 (NumPy's stable sort of 16-bit keys is
a radix sort), then sorts by value the few runs that rounding merged; a short row with its
vectorised sort, which leaves equal values in any order, then puts each run of equal values in
index order by one more sort of integer keys (run, index), all distinct. The order is always
`np.argsort(kind="stable")`'s."""
from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import ArrayLike

from models.foundation.lazy import lazy_module

if TYPE_CHECKING:  # the type checker's view of the same module
    import tensorflow as tf
else:
    tf = lazy_module("tensorflow")  # top_order only: not at a binary's start

RADIX_WIDTH = 1024  # rows of this many floats or more are sorted in radix passes


def stable_order(values: ArrayLike, descending: bool = False) -> np.ndarray:
    """int64 [..., n]: the indices that sort each row (the last axis) of `values` (floats or
    signed integers) ascending, or descending, the lower index first among equal values."""
    keys = np.asarray(values)
    if descending:
        keys = -keys
    if keys.dtype.kind != "f":
        return np.argsort(keys, axis=-1, kind="stable")
    count = keys.shape[-1]
    if count >= RADIX_WIDTH and keys.dtype.itemsize <= 8 and not np.isnan(keys).any():
        rows = keys.reshape(-1, count)
        offsets = (np.arange(len(rows)) * count)[:, None]
        return (stable_places(rows).reshape(rows.shape) - offsets).reshape(keys.shape)
    order = np.argsort(keys, axis=-1)
    ordered = np.take_along_axis(keys, order, axis=-1)
    if np.isnan(ordered[..., -1:]).any():  # NaNs sort last, and equal none
        return np.argsort(keys, axis=-1, kind="stable")
    starts = ordered[..., 1:] != ordered[..., :-1]  # -0.0 and 0.0 are equal
    if starts.all():
        return order
    # keys (run, numbered over all rows) x n + index: distinct integers, in the order wanted
    row_start = np.zeros(starts.shape[:-1] + (1,), bool)
    row_start.reshape(-1)[1:] = True  # each row's first entry starts a run (not the first's)
    runs = np.cumsum(np.concatenate([row_start, starts], axis=-1), axis=None, dtype=np.int64)
    tied = np.zeros(order.shape, bool)  # the entries of runs of two or more
    tied[..., 1:] = ~starts
    tied[..., :-1] |= ~starts
    if np.count_nonzero(tied) * 4 > tied.size:  # many: sort the rows' keys again
        return np.sort(runs.reshape(order.shape) * count + order, axis=-1) % count
    flat = order.ravel().copy()  # few: sort the tied entries' keys among themselves
    at = tied.ravel()
    flat[at] = np.sort(runs[at] * count + flat[at]) % count
    return flat.reshape(order.shape)


def stable_places(rows: np.ndarray) -> np.ndarray:
    """int64 [N x D]: the flat indices of float [N, D] without NaNs (float64 at most), row by
    row in `stable_order`: rows under `RADIX_WIDTH` values through `stable_order`, the others
    sorted by their values rounded to float32 in two stable radix passes of 16 bits. Rounding
    keeps every order but may merge distinct values: runs of one rounded value whose values
    fall are then sorted by value, stably (docs/architecture.md, "Stable orders")."""
    count, width = rows.shape
    offsets = (np.arange(count) * width)[:, None]
    if width < RADIX_WIDTH:
        return (stable_order(rows) + offsets).ravel()
    with np.errstate(over="ignore"):  # beyond float32's range: infinite, a key beside inf's
        bits = (rows + 0.0).astype(np.float32).view(np.int32)  # + 0.0: -0.0 takes 0.0's key
    keys = bits >> 31  # unsigned keys in the values' order: a negative value's bits inverted,
    keys |= np.int32(-1 << 31)  # a positive value's with the sign bit set
    keys ^= bits
    keys = keys.view(np.uint32)
    low_first = np.argsort(keys.astype(np.uint16), axis=1, kind="stable")  # the low 16 bits
    places = (low_first + offsets).ravel()
    high = (keys >> 16).astype(np.uint16).ravel()[places].reshape(count, width)
    places = places[(np.argsort(high, axis=1, kind="stable") + offsets).ravel()]
    if rows.dtype.itemsize <= 4:  # the rounding was exact: nothing merged
        return places
    ordered = rows.ravel()[places]
    falls = np.flatnonzero(ordered[1:] < ordered[:-1])
    falls = falls[(falls + 1) % width != 0]  # not from one row's last value to the next's first
    if falls.size:
        _sort_merged_runs(places, ordered, falls, width)
    return places


def _sort_merged_runs(places: np.ndarray, ordered: np.ndarray, falls: np.ndarray,
                      width: int) -> None:
    """Sorts by value, stably and in place, the runs of `places` (flat; `ordered`, their
    values) of one float32 rounding that hold a fall (`falls`: i where ordered[i + 1] <
    ordered[i], within a row of `width`); only the rows that hold a fall are read."""
    rows = np.unique(falls // width)
    with np.errstate(over="ignore"):  # as the keys: beyond float32, infinite
        rounded = ordered.reshape(-1, width)[rows].astype(np.float32)  # -0.0 == 0.0
    starts = np.empty(rounded.shape, bool)
    starts[:, 0] = True
    np.not_equal(rounded[:, 1:], rounded[:, :-1], out=starts[:, 1:])
    run_starts = np.flatnonzero(starts)  # places in these rows, flat
    at = np.searchsorted(rows, falls // width) * width + falls % width
    held = np.unique(np.searchsorted(run_starts, at, side="right") - 1)  # the runs with a fall
    first = run_starts[held]
    ends = np.where(held + 1 < len(run_starts),
                    run_starts[np.minimum(held + 1, len(run_starts) - 1)], starts.size)
    run = np.repeat(np.arange(len(first)), ends - first)
    inside = first[run] + np.arange(len(run)) - (np.cumsum(ends - first) - (ends - first))[run]
    inside = rows[inside // width] * width + inside % width  # back to the places of all rows
    places[inside] = places[inside[np.lexsort((ordered[inside], run))]]


def top_order(values: ArrayLike, n: int, descending: bool = False) -> np.ndarray:
    """int64 [..., n]: `stable_order(values, descending)[..., :n]`, the first n of each row,
    by TensorFlow's `top_k` instead of a sort of the whole row: it returns the largest values
    with the lower index first among equal ones (-0.0 and 0.0 equal), the stable order's
    first n, on all cores (docs/architecture.md, "Stable orders"). Values with a NaN or a
    subnormal number (TensorFlow's kernels read those as 0) take `stable_order`."""
    keys = np.asarray(values)
    count = keys.shape[-1]
    if keys.dtype.kind != "f" or n >= count or np.any(
            (keys != 0) & ~(np.abs(keys) >= np.finfo(keys.dtype).tiny)):  # NaN, subnormal
        return stable_order(keys, descending)[..., :n]
    return tf.math.top_k(keys if descending else -keys, n).indices.numpy().astype(np.int64)


def places(values: ArrayLike, descending: bool = False) -> np.ndarray:
    """int64 [..., n]: each entry's place in `stable_order(values, descending)` of its row."""
    return _inverse(stable_order(values, descending))


def _inverse(order: np.ndarray) -> np.ndarray:
    """int64 [..., n]: each entry's place in `order` (each row a permutation of its indices)."""
    found = np.empty_like(order)
    np.put_along_axis(found, order, np.broadcast_to(np.arange(order.shape[-1]), order.shape),
                      axis=-1)
    return found


def places_repeated(values: ArrayLike, copies: int, descending: bool = False) -> np.ndarray:
    """int64 [..., copies, n]: `places` of each row of `values` ([..., n]) repeated `copies`
    times end to end (entry c x n + p of the longer row is `values[..., p]`), without sorting
    the longer rows: an entry's place is copies x (the entries of higher rank, ties apart)
    + c x (its run of equal values' length) + its place within the run (docs/architecture.md,
    "Stable orders")."""
    keys = np.asarray(values)
    order = stable_order(keys, descending)
    ordered = np.take_along_axis(keys, order, axis=-1)
    count = keys.shape[-1]
    same = ordered[..., 1:] == ordered[..., :-1]
    if keys.dtype.kind == "f":  # NaNs sort last and, in the stable order, by index: one run
        same |= np.isnan(ordered[..., 1:]) & np.isnan(ordered[..., :-1])
    position = np.broadcast_to(np.arange(count), order.shape)
    if not same.any():  # no ties: each run one entry
        run_start, run_length = position, np.ones_like(order)
    else:
        run_start, run_end = runs(same)
        run_length = run_end - run_start
    first = copies * run_start + (position - run_start)  # the first copy's place, in order
    inverse = _inverse(order)
    copy = np.arange(copies).reshape((1,) * (keys.ndim - 1) + (copies, 1))
    return (np.take_along_axis(first, inverse, axis=-1)[..., None, :]
            + copy * np.take_along_axis(run_length, inverse, axis=-1)[..., None, :])


def runs(same: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    """(first place, end place: int64 [..., n]) of the run of equal entries that each place of
    a sorted row belongs to (the end one past its last place), from `same` ([..., n - 1]: entry
    i equals entry i + 1)."""
    same = np.asarray(same, bool)
    count = same.shape[-1] + 1
    position = np.broadcast_to(np.arange(count), same.shape[:-1] + (count,))
    edge = np.ones(same.shape[:-1] + (1,), bool)
    first = np.maximum.accumulate(
        np.where(np.concatenate([edge, ~same], axis=-1), position, 0), axis=-1)
    end = np.flip(np.minimum.accumulate(np.flip(np.where(
        np.concatenate([~same, edge], axis=-1), position + 1, count), axis=-1), axis=-1), axis=-1)
    return first, end
