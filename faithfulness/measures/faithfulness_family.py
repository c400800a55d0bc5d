"""Quantus's faithfulness family (docs/measures.md, "Faithfulness"): how the model's output
follows the map when the features it ranks are perturbed, every perturbation of every image
scored by the one batched computation (`perturbation.band_scores`). Features are Quantus 0.6's:
the image's values, channel first (C x H x W), ranked by the map broadcast over the channels.

- pixel_flipping (Bach et al. 2015): the output for the explained class after each step that
  replaces the next `features_in_step` highest-ranked values by the baseline, cumulatively
  (quantus/metrics/faithfulness/pixel_flipping.py, `evaluate_batch`); the curve [N, K] with
  K = ceil(C H W / features_in_step), or its area (trapezoid, unit steps) with
  `return_auc_per_sample`. Lower is better.
- faithfulness_estimate (Alvarez-Melis & Jaakkola 2018): the Pearson correlation, per image,
  of the attribution of each step's `features_in_step` values with the output's drop when
  only those are replaced (not cumulatively; faithfulness_estimate.py). Logits by default
  (`softmax=False`, as Quantus). Higher is better.
- monotonicity (Arya et al. 2019): 1.0 when the output never falls as the values are put back
  on the baseline image, least attributed first, `features_in_step` at a time. Quantus 0.6
  writes the baseline into the baseline image, so its input never changes and every image
  scores True (monotonicity.py, `evaluate_batch`); here the paper's values go back in.
- selectivity (Montavon et al. 2018): the output after each `patch_size` patch is replaced,
  most attributed patch first, cumulatively (the curve [N, P]; selectivity.py). The patch
  grid is centred as Quantus pads (half the remainder before, half after). Lower is better.
- region_perturbation (Samek et al. 2015): the output's drop y - y_k after each of the first
  `regions_evaluation` patches is replaced, cumulatively, in `order` "morf" (most attributed
  first), "lerf" or "random" (a permutation per image keyed by `seed` and the image's index,
  so it agrees with Quantus's `np.random` only in distribution); region_perturbation.py.
  Higher is better for morf.
- faithfulness_correlation (Bhatt et al. 2020): the Pearson correlation, per image, over
  `nr_runs` random subsets of `subset_size` values, of the map's sum over the subset with the
  output's drop when the subset alone is replaced (faithfulness_correlation.py). Logits by
  default (`softmax=False`). Quantus draws the subsets with `np.random.choice`; here each
  (image, run) subset is drawn in the graph from a key (seed, image id, run), so the values
  agree with Quantus's in distribution. Higher is better.
- sufficiency (Dasgupta et al. 2022): for each image, the share of the other images of the
  call whose map lies within `threshold` of its own (the `distance_func` distance between the
  flattened maps, divided by the largest distance of the call) that the model predicts as the
  same class; 0 with no such image (sufficiency.py). Quantus compares the images within each
  of its batches (64 by default); here within the call. Higher is better.
"""
from typing import Any

import numpy as np
import scipy.spatial.distance

from faithfulness import stats, substrates
from faithfulness.measures import perturbation, subsets
from faithfulness.measures.arguments import Prepared, image_ids, prepared
from models.foundation.errors import UserError, check_one_of
from models.foundation.metric_spec import MetricSpec

SPECS = (
    MetricSpec("pixel_flipping", False, about="output as the highest-ranked features are "
                                              "replaced, cumulatively (area per image)"),
    MetricSpec("faithfulness_estimate", True, about="correlation of each step's attribution "
                                                    "with the output drop it causes"),
    MetricSpec("monotonicity", True, about="the output never falls as features are put back, "
                                           "least attributed first"),
    MetricSpec("selectivity", False, about="output as the most attributed patches are "
                                           "replaced, cumulatively (area per image)"),
    MetricSpec("region_perturbation", True, about="output drop as the most attributed "
                                                  "patches are replaced (area per image)"),
    MetricSpec("faithfulness_correlation", True, about="correlation of random subsets' "
                                                       "attribution with the output drop"),
    MetricSpec("sufficiency", True, about="share of the images with a close map that the model "
                                          "predicts as the same class"),
)


def pixel_flipping(model: Any, x_batch: Any, y_batch: Any, a_batch: Any, s_batch: Any = None,
                   *, features_in_step: int = 1, abs: bool = False,  # noqa: A002
                   normalise: bool = True, perturb_baseline: Any = "black",
                   return_auc_per_sample: bool = False, softmax: bool = True,
                   batch_size: int = 64) -> np.ndarray:
    """[N, K] the curve of each image (or [N], its area, with `return_auc_per_sample`)."""
    found = prepared(x_batch, a_batch, s_batch, abs=abs, normalise=normalise)
    height, width, channels = found.x.shape[1:]
    lows = perturbation.step_starts(found, features_in_step)
    bands = np.stack([np.zeros_like(lows), np.minimum(lows + features_in_step,
                                                      height * width * channels)], axis=1)
    curves = perturbation.scores_of_bands(
        model, found, y_batch, perturbation.element_ranks(found), bands, perturb_baseline,
        softmax=softmax, batch_size=batch_size)
    return perturbation.auc_per_sample(curves) if return_auc_per_sample else curves


def faithfulness_estimate(model: Any, x_batch: Any, y_batch: Any, a_batch: Any,
                          s_batch: Any = None, *, features_in_step: int = 1,
                          abs: bool = False, normalise: bool = True,  # noqa: A002
                          perturb_baseline: Any = "black", softmax: bool = False,
                          batch_size: int = 64) -> np.ndarray:
    """[N] the Pearson correlation of the steps' attribution sums with their output drops."""
    found = prepared(x_batch, a_batch, s_batch, abs=abs, normalise=normalise)
    lows = perturbation.step_starts(found, features_in_step)
    bands = np.stack([lows, lows + features_in_step], axis=1)
    scores = perturbation.scores_of_bands(
        model, found, y_batch, perturbation.element_ranks(found),
        np.concatenate([[[0, 0]], bands]), perturb_baseline, softmax=softmax,
        batch_size=batch_size)
    drops = scores[:, :1] - scores[:, 1:]
    sums = perturbation.step_sums(found, features_in_step, len(lows))
    return stats.pearson(sums, drops)  # NaN for a constant row


def monotonicity(model: Any, x_batch: Any, y_batch: Any, a_batch: Any, s_batch: Any = None,
                 *, features_in_step: int = 1, abs: bool = True,  # noqa: A002
                 normalise: bool = True, perturb_baseline: Any = "black",
                 softmax: bool = True, batch_size: int = 64) -> np.ndarray:
    """[N] 1.0 where the output never falls as values return, least attributed first."""
    found = prepared(x_batch, a_batch, s_batch, abs=abs, normalise=normalise)
    lows = perturbation.step_starts(found, features_in_step)
    bands = np.stack([np.zeros_like(lows), lows + features_in_step], axis=1)
    curves = perturbation.scores_of_bands(
        model, found, y_batch, perturbation.element_ranks(found, descending=False), bands,
        perturb_baseline, keep=True, softmax=softmax, batch_size=batch_size)
    return np.all(np.diff(curves, axis=1) >= 0, axis=1).astype(np.float64)


ORDERS = ("morf", "lerf", "random")
SUBSET_SALT = 0x5B5E7  # faithfulness_correlation's draws, apart from the others of a seed


def patch_ranks(found: Prepared, patch_size: int, order: str = "morf", *, seed: int = 0,
                ids: Any = None) -> tuple[np.ndarray, int]:
    """(int32 [N, H, W, C]: each element's patch's place in `order`, number of patches): the
    `patch_size` grid centred as Quantus pads it, patches ranked by the sum of the map over
    their part of the image (the lower patch index first on ties)."""
    check_one_of("order", order, ORDERS)
    height, width = found.x.shape[1:3]
    if not 1 <= patch_size <= min(height, width):
        raise UserError(f"patch_size must be between 1 and the image's side "
                        f"{min(height, width)}; got {patch_size}")
    # Quantus pads each side to a multiple of the patch, the smaller half before
    top, left = ((-height) % patch_size) // 2, ((-width) % patch_size) // 2
    rows, cols = -(-height // patch_size), -(-width // patch_size)
    block = (((np.arange(height) + top) // patch_size)[:, None] * cols
             + ((np.arange(width) + left) // patch_size)[None, :])  # [H, W]
    count = rows * cols
    sums, _ = perturbation.region_sums(perturbation.broadcast_features(found), block.ravel(),
                                       count)
    if order == "random":
        ids = image_ids(ids, len(sums))
        keys = substrates.noise_keys(seed, ids, salt=count)
        sums = np.asarray(substrates.uniform_noise(keys, [count]), np.float64)
    return perturbation.region_ranks(found, block.ravel(), sums, order != "lerf"), count


def selectivity(model: Any, x_batch: Any, y_batch: Any, a_batch: Any, s_batch: Any = None,
                *, patch_size: int = 8, abs: bool = False, normalise: bool = True,  # noqa: A002
                perturb_baseline: Any = "black", softmax: bool = True,
                return_auc_per_sample: bool = False, batch_size: int = 64) -> np.ndarray:
    """[N, P] the output after each patch is replaced, most attributed first, cumulatively
    (or [N], its area, with `return_auc_per_sample`)."""
    found = prepared(x_batch, a_batch, s_batch, abs=abs, normalise=normalise)
    ranks, count = patch_ranks(found, patch_size)
    bands = np.stack([np.zeros(count, np.int64), np.arange(1, count + 1)], axis=1)
    curves = perturbation.scores_of_bands(
        model, found, y_batch, ranks, bands, perturb_baseline, softmax=softmax,
        batch_size=batch_size)
    return perturbation.auc_per_sample(curves) if return_auc_per_sample else curves


def region_perturbation(model: Any, x_batch: Any, y_batch: Any, a_batch: Any,
                        s_batch: Any = None, *, patch_size: int = 8, order: str = "morf",
                        regions_evaluation: int = 100, abs: bool = False,  # noqa: A002
                        normalise: bool = True, perturb_baseline: Any = "black",
                        softmax: bool = True, return_auc_per_sample: bool = False,
                        seed: int = 0, ids: Any = None, batch_size: int = 64) -> np.ndarray:
    """[N, R] the output's drop after each of the first R = min(`regions_evaluation`, P)
    patches is replaced (or [N], its area, with `return_auc_per_sample`)."""
    if regions_evaluation < 1:
        raise UserError(f"regions_evaluation must be at least 1; got {regions_evaluation}")
    found = prepared(x_batch, a_batch, s_batch, abs=abs, normalise=normalise)
    ranks, count = patch_ranks(found, patch_size, order, seed=seed, ids=ids)
    steps = min(regions_evaluation, count)
    bands = np.stack([np.zeros(steps + 1, np.int64), np.arange(steps + 1)], axis=1)
    scores = perturbation.scores_of_bands(
        model, found, y_batch, ranks, bands, perturb_baseline, softmax=softmax,
        batch_size=batch_size)
    curves = scores[:, :1] - scores[:, 1:]
    return perturbation.auc_per_sample(curves) if return_auc_per_sample else curves


def faithfulness_correlation(model: Any, x_batch: Any, y_batch: Any, a_batch: Any,
                             s_batch: Any = None, *, nr_runs: int = 100, subset_size: int = 224,
                             abs: bool = False, normalise: bool = True,  # noqa: A002
                             perturb_baseline: Any = "black", softmax: bool = False,
                             seed: int = 0, ids: Any = None,
                             batch_size: int = 64) -> np.ndarray:
    """[N] the Pearson correlation over random subsets of their attribution with the output's
    drop when they are replaced."""
    found = prepared(x_batch, a_batch, s_batch, abs=abs, normalise=normalise)
    height, width, channels = found.x.shape[1:]
    if not 1 <= subset_size < height * width:
        raise UserError(f"subset_size must be at least 1 and smaller than the image's "
                        f"{height * width} pixels; got {subset_size}")
    if nr_runs < 2:
        raise UserError(f"nr_runs must be at least 2 (a correlation); got {nr_runs}")
    classes = perturbation.checked_classes(model, found.x, y_batch)
    ids = image_ids(ids, len(found.x))
    features = np.transpose(perturbation.broadcast_features(found).reshape(
        len(found.x), channels, height, width), (0, 2, 3, 1))
    keys = substrates.noise_keys(seed, ids, salt=SUBSET_SALT).numpy()
    clean = perturbation.clean_scores(model, found.x, classes, softmax=softmax,
                                      batch_size=batch_size)
    scores, sums = subsets.subset_scores(
        model, found.x, features, perturbation.baseline_values(found.x, perturb_baseline),
        classes, keys, runs=nr_runs, subset_size=subset_size, softmax=softmax,
        batch_size=batch_size)
    return stats.pearson(sums, clean[:, None] - scores)


def sufficiency(model: Any, x_batch: Any, y_batch: Any, a_batch: Any, s_batch: Any = None, *,
                threshold: float = 0.6, distance_func: str = "seuclidean",
                abs: bool = True, normalise: bool = True,  # noqa: A002
                batch_size: int = 64) -> np.ndarray:
    """[N] the share of the call's images with a map within `threshold` that share the
    image's predicted class."""
    found = prepared(x_batch, a_batch, s_batch, abs=abs, normalise=normalise)
    try:
        with np.errstate(divide="ignore", invalid="ignore"):
            distances = _pair_distances(found.a, distance_func)
    except ValueError as error:
        raise UserError(f"distance_func {distance_func!r}: {error}") from None
    largest = np.max(np.abs(distances))
    if largest > 0:
        distances = distances / largest
    close = (distances <= threshold) & ~np.eye(len(distances), dtype=bool)
    predicted = np.argmax(perturbation.outputs(model, found.x, batch_size), axis=1)
    same = predicted[None, :] == predicted[:, None]
    counts = close.sum(axis=1)
    return np.where(counts == 0, 0.0, (close & same).sum(axis=1) / np.maximum(counts, 1))


def _pair_distances(a: np.ndarray, distance_func: str) -> np.ndarray:
    """float64 [N, N]: scipy's cdist(a, a, distance_func), Quantus's call. For "seuclidean"
    the same bytes from pdist, which computes each pair once, given the variances cdist takes
    (over a stacked on itself, ddof 1)."""
    if distance_func != "seuclidean":
        return scipy.spatial.distance.cdist(a, a, distance_func)
    variances = np.var(np.vstack([a, a]).astype(np.float64, copy=False), axis=0, ddof=1)
    return scipy.spatial.distance.squareform(
        scipy.spatial.distance.pdist(a, "seuclidean", V=variances))
