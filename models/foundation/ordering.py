"""Stable orders of maps' values (docs/architecture.md, "Stable orders"): NumPy's stable sort
is a merge sort, four times slower on a map than its vectorised sort, which leaves equal values
in any order. `stable_order` sorts with the fast one, then puts each run of equal values in
index order by one more fast sort of integer keys (run, index), all distinct; the order is
always `np.argsort(kind="stable")`'s."""
import numpy as np
from numpy.typing import ArrayLike


def stable_order(values: ArrayLike, descending: bool = False) -> np.ndarray:
    """int64 [..., n]: the indices that sort each row (the last axis) of `values` (floats or
    signed integers) ascending, or descending, the lower index first among equal values."""
    keys = np.asarray(values)
    if descending:
        keys = -keys
    if keys.dtype.kind != "f":
        return np.argsort(keys, axis=-1, kind="stable")
    order = np.argsort(keys, axis=-1)
    ordered = np.take_along_axis(keys, order, axis=-1)
    if np.isnan(ordered[..., -1:]).any():  # NaNs sort last, and equal none
        return np.argsort(keys, axis=-1, kind="stable")
    starts = ordered[..., 1:] != ordered[..., :-1]  # -0.0 and 0.0 are equal
    if starts.all():
        return order
    count = keys.shape[-1]
    runs = np.concatenate([np.zeros(starts.shape[:-1] + (1,), np.int64),
                           np.cumsum(starts, axis=-1, dtype=np.int64)], axis=-1)
    return np.sort(runs * count + order, axis=-1) % count


def places(values: ArrayLike, descending: bool = False) -> np.ndarray:
    """int64 [..., n]: each entry's place in `stable_order(values, descending)` of its row."""
    order = stable_order(values, descending)
    found = np.empty_like(order)
    np.put_along_axis(found, order, np.broadcast_to(np.arange(order.shape[-1]), order.shape),
                      axis=-1)
    return found
