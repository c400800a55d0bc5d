"""Orders, ranks and step schedules (docs/faithfulness.md, "Ranking and steps").

One stable sort per map: `ranks(maps, descending)` gives each cell its position in the order
(ties: lower row-major index first), and a step perturbs the cells whose rank lies in
`[lo_t, hi_t)`. Cumulative schedules have `lo_t = 0`, so every step's set contains the previous
one by construction.
"""
import math
from dataclasses import dataclass
from typing import Optional

import numpy as np

from models.foundation import ordering
from models.foundation.errors import UserError, first_non_finite

REMAINDERS = ("partial", "error")


def check_finite(maps: np.ndarray, what: str = "explanations") -> None:
    """Raises one clear error naming the first map with a NaN or infinite value."""
    bad = first_non_finite(maps)
    if bad is not None:
        raise UserError(f"{what}[{bad}] contains NaN or infinite values; fix or drop that map")


def orders(maps: np.ndarray, descending: bool = True) -> np.ndarray:
    """int64 [N, n]: the cells of each flattened map, most (or least) important first, stable."""
    flat = np.asarray(maps, np.float64).reshape(len(maps), -1)
    return ordering.stable_order(flat, descending)


def ranks(maps: np.ndarray, descending: bool = True) -> np.ndarray:
    """int32 [N, n]: each cell's position in `orders(maps, descending)`."""
    flat = np.asarray(maps, np.float64).reshape(len(maps), -1)
    return ordering.places(flat, descending).astype(np.int32)


@dataclass(frozen=True)
class Schedule:
    """Steps 0..K of a curve: step t perturbs the cells with rank in [lo[t], hi[t])."""

    lo: np.ndarray  # int32 [K + 1]
    hi: np.ndarray  # int32 [K + 1]

    @property
    def points(self) -> int:
        return len(self.hi)

    @property
    def steps(self) -> int:
        return len(self.hi) - 1


def cumulative(thresholds: np.ndarray) -> Schedule:
    """A schedule perturbing ranks < k_t at step t (k_0 = 0 is the clean image)."""
    hi = np.asarray(thresholds, np.int32)
    return Schedule(np.zeros_like(hi), hi)


def bands(thresholds: np.ndarray) -> Schedule:
    """A schedule perturbing only the cells of step t, ranks in [k_{t-1}, k_t)."""
    hi = np.asarray(thresholds, np.int32)
    return Schedule(np.concatenate([[0], hi[:-1]]).astype(np.int32), hi)


def gomez_thresholds(cells: int, bound_max_step: bool = True, max_step_nb: int = 196,
                     remainder: str = "partial",
                     map_shape: Optional[str] = None) -> np.ndarray:
    """k_0..k_K of saliency_maps_metrics: p = n // min(max_step_nb, n) cells per step,
    K = ceil(n / p) steps, the last one shorter when p does not divide n (`remainder="partial"`;
    `"error"` refuses that case, as the reference crashes on it)."""
    if remainder not in REMAINDERS:
        raise UserError(f"unknown remainder {remainder!r}; use one of {', '.join(REMAINDERS)}")
    steps = min(max_step_nb, cells) if bound_max_step else cells
    if steps < 1:
        raise UserError(f"max_step_nb must be at least 1; got {max_step_nb}")
    per_step = cells // steps
    if cells % per_step and remainder == "error":
        raise UserError(f"a {map_shape or cells} map has n = {cells} cells, not a multiple of "
                        f"p = {per_step} cells per step (the reference crashes here); use "
                        "remainder='partial' or another max_step_nb")
    count = math.ceil(cells / per_step)
    return np.minimum(np.arange(count + 1) * per_step, cells)


def rise_thresholds(pixels: int, step: int) -> np.ndarray:
    """k_0..k_K of RISE's CausalMetric: `step` pixels per step, the last step may be shorter."""
    if step < 1:
        raise UserError(f"the RISE step must be at least 1 pixel; got {step}")
    count = math.ceil(pixels / step)
    return np.minimum(np.arange(count + 1) * step, pixels)


def idsds_thresholds(pixels: int, steps: int) -> np.ndarray:
    """n_0..n_{S-1} of IDSDS incremental deletion: int(H W alpha), alpha = linspace(0, 1, S,
    endpoint=False) exactly as the reference computes it (alpha = 1 is never evaluated)."""
    if steps < 1:
        raise UserError(f"--id_steps must be at least 1; got {steps}")
    alphas = np.linspace(0, 1.0, num=steps, endpoint=False)
    return np.array([int(pixels * alpha) for alpha in alphas], np.int64)


def step_saliency(maps: np.ndarray, schedule: Schedule, descending: bool = True) -> np.ndarray:
    """float64 [N, K]: mean map value over the cells of each step t = 1..K (in rank order)."""
    flat = np.asarray(maps, np.float64).reshape(len(maps), -1)
    ordered = np.take_along_axis(flat, orders(flat, descending), axis=1)
    starts = schedule.hi[:-1]
    counts = np.diff(schedule.hi)
    if (counts <= 0).any():
        raise UserError("a step of the schedule removes no cell")
    return np.add.reduceat(ordered, starts, axis=1) / counts
