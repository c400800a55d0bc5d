"""Quantus's localisation family (docs/measures.md, "Localisation"): how a map agrees with a
ground-truth mask per image (`s_batch`, [N, H, W]), vectorised over the batch. Inputs are
prepared as Quantus prepares them (`arguments.prepared`: divided by the batch's largest |a|,
absolute values only where the measure's `abs` default says so). An image with an empty mask
gives NaN.

- pointing_game (Zhang et al. 2018): 1 when a feature of the map's maximum lies in the mask
  (quantus/metrics/localisation/pointing_game.py); `weighted` multiplies a hit by 1 - the
  mask's share of the image. Quantus 0.6 writes both into a bool array, so its weighted hits
  read True and its empty masks True (pointing_game.py, evaluate_batch): here a weighted hit is
  the number and an empty mask NaN, as the paper and the other measures.
- attribution_localisation (Kohlbrenner et al. 2020): the share of the attribution inside the
  mask, sum(a s) / (sum a + 1e-9), NaN above 1 (a mask holding more than all); `weighted`
  multiplies by the mask's share of the image. Quantus 0.6 takes that share against
  `x_batch[2:].size` (the images after the second, attribution_localisation.py), here against
  the image's own size; `positive_attributions` clips negative values first.
- top_k_intersection (Theiner et al. 2021): the share of the `k` highest features that lie in
  the mask; `concept_influence` divides by the mask's share of the features.
- relevance_mass_accuracy (Arras et al. 2021): sum(a s) / sum(a).
- relevance_rank_accuracy (Arras et al. 2021): the share of the |s| highest features that lie
  in the mask.
- auc (Fawcett 2006): the area under the ROC curve of the map's values as scores of the mask
  (sklearn's roc_curve + auc in Quantus), computed here as the Mann-Whitney statistic (ties
  count one half), which equals it.
- focus (Arias-Duart et al. 2022): on a mosaic of four images, the share of the map's positive
  relevance that lies in the quadrants holding the explained class, sum(a+ q) / (sum a+ +
  1e-9), where `custom_batch` [N, 4] marks those quadrants (top left, top right, bottom left,
  bottom right; quantus/metrics/localisation/focus.py, evaluate_batch); the top quadrants take
  H // 2 rows, the left ones W // 2 columns. It needs no `s_batch`: the mosaic is the ground
  truth (`mosaics` builds them from a binary's images).

Quantus sorts with numpy's default (unstable) sort for top_k_intersection and
relevance_rank_accuracy, so with tied values its choice among the ties is unspecified: here
the lower feature index (channel first) comes first. Values agree exactly on tie-free maps.
"""
from typing import Any

import numpy as np

from faithfulness import stats
from faithfulness.measures.arguments import Prepared, prepared
from models.foundation.errors import UserError
from models.foundation.metric_spec import MetricSpec

SPECS = (
    MetricSpec("pointing_game", True, about="the map's maximum lies in the mask",
               note="a constant map scores 1: every value is the maximum, so one of them lies "
                    "in the mask (Quantus's definition); read it beside sparseness."),
    MetricSpec("attribution_localisation", True, about="share of the attribution inside the "
                                                       "mask"),
    MetricSpec("top_k_intersection", True, about="share of the k highest features inside the "
                                                 "mask"),
    MetricSpec("relevance_mass_accuracy", True, about="share of the relevance mass inside the "
                                                      "mask"),
    MetricSpec("relevance_rank_accuracy", True, about="share of the |mask| highest features "
                                                      "inside the mask"),
    MetricSpec("auc", True, about="ROC AUC of the map's values as scores of the mask"),
    MetricSpec("focus", True, about="share of a mosaic's positive relevance in the explained "
                                    "class's quadrants"),
)


def _masked(x_batch: Any, a_batch: Any, s_batch: Any, abs: bool,  # noqa: A002
            normalise: bool) -> tuple[Prepared, np.ndarray, np.ndarray]:
    """(prepared inputs, mask bool [N, F], features in each mask [N])."""
    found = prepared(x_batch, a_batch, s_batch, abs=abs, normalise=normalise, needs_mask=True)
    assert found.s is not None
    return found, found.s, found.s.sum(axis=1)


def _empty_is_nan(values: np.ndarray, inside: np.ndarray) -> np.ndarray:
    return np.where(inside == 0, np.nan, values.astype(np.float64))


def _top_features(a: np.ndarray, counts: Any) -> np.ndarray:
    """bool [N, F]: each row's `counts` ([N], or one for all) highest values, the lower index
    first among equal ones: the first `counts` places of the stable order of decreasing value
    (`ordering.stable_order`), found without sorting the indices. Each row's threshold (its
    count-th largest value) comes from a partition (one count) or a sort of the values; the
    values above it are taken, then the values equal to it in index order until the count is
    reached (-0.0 equals 0.0, as in the stable order)."""
    rows, features = a.shape
    counts = np.broadcast_to(np.asarray(counts, np.int64), (rows,))
    places = np.clip(features - counts, 0, features - 1)
    if rows and (counts == counts[0]).all():
        thresholds = np.partition(a, int(places[0]), axis=1)[:, int(places[0])]
    else:
        thresholds = np.take_along_axis(np.sort(a, axis=1), places[:, None], axis=1)[:, 0]
    above = a > thresholds[:, None]
    equal = a == thresholds[:, None]
    room = counts - above.sum(axis=1)
    return (above | (equal & (np.cumsum(equal, axis=1) <= room[:, None]))) \
        & (counts > 0)[:, None]


def pointing_game(model: Any, x_batch: Any, y_batch: Any, a_batch: Any, s_batch: Any = None,
                  *, weighted: bool = False, abs: bool = False,  # noqa: A002
                  normalise: bool = True) -> np.ndarray:
    """[N] 1.0 where a feature at the map's maximum lies in the mask, else 0.0 (weighted: a
    hit scores 1 - the mask's share of the features)."""
    found, s, inside = _masked(x_batch, a_batch, s_batch, abs, normalise)
    at_max = found.a == found.a.max(axis=1, keepdims=True)
    hits = np.any(s & at_max, axis=1).astype(np.float64)
    if weighted:
        hits = hits * (1 - inside / s.shape[1])
    return _empty_is_nan(hits, inside)


def attribution_localisation(model: Any, x_batch: Any, y_batch: Any, a_batch: Any,
                             s_batch: Any = None, *, weighted: bool = False,
                             max_size: float = 1.0, positive_attributions: bool = False,
                             abs: bool = True, normalise: bool = True  # noqa: A002
                             ) -> np.ndarray:
    """[N] sum(a s) / (sum a + 1e-9), NaN where the mask is empty or the share exceeds 1."""
    if not 0 < max_size <= 1:
        raise UserError(f"max_size must be in (0, 1]; got {max_size}")
    found, s, inside = _masked(x_batch, a_batch, s_batch, abs, normalise)
    a = np.clip(found.a, 0, None) if positive_attributions else found.a
    share = (a * s).sum(axis=1) / (a.sum(axis=1) + 1e-9)
    share = np.where(share > 1, np.nan, share)
    if weighted:
        share = share * inside / s.shape[1]
    return _empty_is_nan(share, inside)


def top_k_intersection(model: Any, x_batch: Any, y_batch: Any, a_batch: Any,
                       s_batch: Any = None, *, k: int = 1000, concept_influence: bool = False,
                       abs: bool = False, normalise: bool = True  # noqa: A002
                       ) -> np.ndarray:
    """[N] the share of the k highest features inside the mask."""
    found, s, inside = _masked(x_batch, a_batch, s_batch, abs, normalise)
    pixels = int(np.prod(found.map_shape[1:]))
    if not 1 <= k < pixels:
        raise UserError(f"k must be at least 1 and smaller than the image's {pixels} pixels; "
                        f"got {k}")
    shares = (_top_features(found.a, k) & s).sum(axis=1) / k
    if concept_influence:
        with np.errstate(divide="ignore", invalid="ignore"):
            shares = shares * s.shape[1] / inside
    return _empty_is_nan(shares, inside)


def relevance_mass_accuracy(model: Any, x_batch: Any, y_batch: Any, a_batch: Any,
                            s_batch: Any = None, *, abs: bool = False,  # noqa: A002
                            normalise: bool = True) -> np.ndarray:
    """[N] sum(a s) / sum(a)."""
    found, s, inside = _masked(x_batch, a_batch, s_batch, abs, normalise)
    with np.errstate(divide="ignore", invalid="ignore"):
        return _empty_is_nan((found.a * s).sum(axis=1) / found.a.sum(axis=1), inside)


def relevance_rank_accuracy(model: Any, x_batch: Any, y_batch: Any, a_batch: Any,
                            s_batch: Any = None, *, abs: bool = False,  # noqa: A002
                            normalise: bool = True) -> np.ndarray:
    """[N] the share of the |s| highest features inside the mask."""
    found, s, inside = _masked(x_batch, a_batch, s_batch, abs, normalise)
    with np.errstate(divide="ignore", invalid="ignore"):
        return _empty_is_nan((_top_features(found.a, inside) & s).sum(axis=1) / inside,
                             inside)


def auc(model: Any, x_batch: Any, y_batch: Any, a_batch: Any, s_batch: Any = None, *,
        abs: bool = False, normalise: bool = True) -> np.ndarray:  # noqa: A002
    """[N] the ROC AUC of the map's values as scores of the mask (ties count one half)."""
    found, s, inside = _masked(x_batch, a_batch, s_batch, abs, normalise)
    ranks = stats.ranks(found.a)  # average ranks of ties (scipy's, to the byte)
    outside = s.shape[1] - inside
    with np.errstate(divide="ignore", invalid="ignore"):
        u = (ranks * s).sum(axis=1) - inside * (inside + 1) / 2
        return _empty_is_nan(u / (inside * outside), inside)


def focus(model: Any, x_batch: Any, y_batch: Any, a_batch: Any, s_batch: Any = None, *,
          custom_batch: Any = None, abs: bool = False,  # noqa: A002
          normalise: bool = True) -> np.ndarray:
    """[N] the share of the positive relevance in the quadrants `custom_batch` ([N, 4] of
    0 / 1: top left, top right, bottom left, bottom right) marks as the explained class's."""
    found = prepared(x_batch, a_batch, s_batch, abs=abs, normalise=normalise)
    if custom_batch is None:
        raise UserError("custom_batch is missing: focus needs the quadrants of the explained "
                        "class in each mosaic, [N, 4] of 0 / 1")
    quadrants = np.asarray(custom_batch)
    if quadrants.shape != (len(found.a), 4) or not np.isin(quadrants, (0, 1)).all():
        raise UserError(f"custom_batch has shape {quadrants.shape}; expected [{len(found.a)}, "
                        "4] of 0 / 1 (top left, top right, bottom left, bottom right)")
    channels, height, width = found.map_shape
    bottom = (np.arange(height) >= height // 2)[:, None]
    right = (np.arange(width) >= width // 2)[None, :]
    quadrant = (2 * bottom + right).astype(np.int64)  # [H, W]: 0..3 in custom_batch's order
    inside = np.broadcast_to(quadrants[:, quadrant][:, None], (len(quadrants), channels,
                                                                height, width))
    positive = np.clip(found.a, 0, None)
    target = (positive * inside.reshape(len(positive), -1)).sum(axis=1)
    return target / (positive.sum(axis=1) + 1e-9)
