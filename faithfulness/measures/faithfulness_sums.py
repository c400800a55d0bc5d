"""Quantus's faithfulness measures that compare the map's sums with the output's changes
(docs/measures.md, "Faithfulness"), every perturbation scored by the one batched computation
(`perturbation.band_scores`); features as in `faithfulness_family` (the map broadcast over the
image's channels, channel first).

- infidelity (Yeh et al. 2019): for each patch size of `perturb_patch_sizes`, the image's
  patches are replaced by the baseline one after another in raster order, cumulatively; the
  mean over the steps of (y - y_k - sum(a (x - x_k)))^2, averaged over the patch sizes
  (quantus/metrics/faithfulness/infidelity.py, evaluate_batch; `loss_func` "mse"). Each
  patch size must divide the image's sides (Quantus's padded indices fail otherwise). With
  Quantus's fixed baselines every one of its `n_perturb_samples` repetitions gives the same
  value, so here the setting is taken and does not change it. Lower is better.
- monotonicity_correlation (Nguyen & Martinez 2020): the Spearman correlation, per image,
  over steps of `features_in_step` values, least attributed first, of the step's attribution
  sum with the output's variance when only those values are replaced, mean((y_k - y)^2) over
  `nr_samples` replacements, divided by y^2 where |y| >= `eps`
  (monotonicity_correlation.py). With the default `perturb_baseline` "uniform" each (image,
  step, sample) draws its value from U(0, 1) (Quantus: one draw per image and call of its
  perturbation); the draws are keyed by (seed, image id), so values agree with Quantus's in
  distribution. A fixed baseline needs one sample. Higher is better (the more a step is
  attributed, the more replacing it moves the output).
- sensitivity_n (Ancona et al. 2018): for each n, the Pearson correlation across the call's
  images of the attribution summed over the n x `features_in_step` highest-ranked values with
  the output's drop when those are replaced (cumulatively, as pixel_flipping), for the first
  int(`n_max_percentage` x H W / `features_in_step`) steps: one curve per call, [K], as
  Quantus (sensitivity_n.py, custom_postprocess). Quantus 0.6 correlates the drop after the
  cumulative removal with the sum over the last step's values only (evaluate_batch, the
  `att_sums` of `a_ix`), which is not the paper's sum over the removed set: here the removed
  set's sum (`cumulative_sums=False` gives Quantus's). Quantus also scores only its first batch
  (`evaluation_scores[0]`); here the whole call. Higher is better.
"""
from typing import Any

import numpy as np

from faithfulness import stats, substrates
from faithfulness.measures import perturbation
from faithfulness.measures.arguments import image_ids, prepared
from models.foundation.errors import UserError
from models.foundation.metric_spec import MetricSpec

SPECS = (
    MetricSpec("infidelity", False, about="mean squared gap between the output drop and the "
                                          "map's sum over cumulatively replaced patches"),
    MetricSpec("monotonicity_correlation", True,
               about="rank correlation of each step's attribution with the output's variance "
                     "when it is replaced"),
    MetricSpec("sensitivity_n", True, unit="call",
               about="correlation across the images of the map's sum over the top n features "
                     "with the output drop",
               note="one value per group of images (a correlation across them): no interval, "
                    "no ranking by the bootstrap, no trust row."),
)
UNIFORM_SALT = 0x6D0C  # monotonicity_correlation's draws, apart from the others of a seed


def _contributions(found: Any, baseline: np.ndarray) -> np.ndarray:
    """float64 [N, C x H x W]: a (x - baseline) per image element, channel first."""
    x = np.transpose(found.x, (0, 3, 1, 2)).reshape(len(found.x), -1).astype(np.float64)
    return perturbation.broadcast_features(found) * (x - baseline[:, None])


def infidelity(model: Any, x_batch: Any, y_batch: Any, a_batch: Any, s_batch: Any = None, *,
               loss_func: str = "mse", perturb_patch_sizes: Any = (4,),
               n_perturb_samples: int = 10, abs: bool = False,  # noqa: A002
               normalise: bool = False, perturb_baseline: Any = "black", softmax: bool = False,
               batch_size: int = 64) -> np.ndarray:
    """[N] the mean squared gap between the output's drop and the map's sum over the replaced
    values, patches replaced cumulatively in raster order, averaged over the patch sizes."""
    if loss_func != "mse":
        raise UserError(f"loss_func must be 'mse' (Quantus's only one); got {loss_func!r}")
    if n_perturb_samples < 1:
        raise UserError(f"n_perturb_samples must be at least 1; got {n_perturb_samples}")
    found = prepared(x_batch, a_batch, s_batch, abs=abs, normalise=normalise)
    height, width = found.x.shape[1:3]
    baseline = perturbation.baseline_values(found.x, perturb_baseline)
    classes = perturbation.checked_classes(model, found.x, y_batch)
    contributions = _contributions(found, baseline.astype(np.float64))
    clean = perturbation.clean_scores(model, found.x, classes, softmax=softmax,
                                      batch_size=batch_size)
    losses = []
    for patch_size in perturb_patch_sizes:  # a few sizes: each one batched call
        patch_size = int(patch_size)
        if patch_size < 1 or height % patch_size or width % patch_size:
            raise UserError(f"perturb_patch_sizes: {patch_size} must divide the image's sides "
                            f"{height} and {width}")
        cols = width // patch_size
        block = ((np.arange(height) // patch_size)[:, None] * cols
                 + (np.arange(width) // patch_size)[None, :])  # [H, W], raster order
        count = (height // patch_size) * cols
        ranks = np.broadcast_to(block[None, :, :, None], found.x.shape).astype(np.int32)
        bands = np.stack([np.zeros(count, np.int64), np.arange(1, count + 1)], axis=1)
        scores = perturbation.band_scores(model, found.x, ranks, bands, baseline, classes,
                                          softmax=softmax, batch_size=batch_size)
        sums, _ = perturbation.region_sums(contributions, block.ravel(), count)
        losses.append(np.mean((clean[:, None] - scores - np.cumsum(sums, axis=1)) ** 2, axis=1))
    return np.mean(losses, axis=0)


def monotonicity_correlation(model: Any, x_batch: Any, y_batch: Any, a_batch: Any,
                             s_batch: Any = None, *, eps: float = 1e-5, nr_samples: int = 100,
                             features_in_step: int = 1, abs: bool = True,  # noqa: A002
                             normalise: bool = True, perturb_baseline: Any = "uniform",
                             softmax: bool = True, seed: int = 0, ids: Any = None,
                             batch_size: int = 64) -> np.ndarray:
    """[N] the Spearman correlation of each step's attribution sum (least attributed first)
    with the output's scaled variance when the step's values alone are replaced."""
    if nr_samples < 1:
        raise UserError(f"nr_samples must be at least 1; got {nr_samples}")
    found = prepared(x_batch, a_batch, s_batch, abs=abs, normalise=normalise)
    count = found.x[0].size
    lows = perturbation.step_starts(found, features_in_step)
    classes = perturbation.checked_classes(model, found.x, y_batch)
    drawn = isinstance(perturb_baseline, str) and perturb_baseline == "uniform"
    samples = nr_samples if drawn else 1  # a fixed baseline gives every sample the same
    if drawn:
        ids = image_ids(ids, len(found.x))
        keys = substrates.noise_keys(seed, ids, salt=UNIFORM_SALT)
        baseline = (np.asarray(substrates.uniform_noise(keys, [len(lows) * samples])) + 1) / 2
    else:
        baseline = perturbation.baseline_values(found.x, perturb_baseline)
    bands = np.repeat(np.stack([lows, np.minimum(lows + features_in_step, count)], axis=1),
                      samples, axis=0)
    scores = perturbation.band_scores(
        model, found.x, perturbation.element_ranks(found, descending=False), bands,
        np.asarray(baseline, np.float32), classes, softmax=softmax, batch_size=batch_size)
    clean = perturbation.clean_scores(model, found.x, classes, softmax=softmax,
                                      batch_size=batch_size)
    scale = np.where(np.abs(clean) >= eps, 1.0 / np.maximum(np.abs(clean), eps), 1.0) ** 2
    spread = ((scores.reshape(len(clean), len(lows), samples) - clean[:, None, None]) ** 2
              ).mean(axis=2) * scale[:, None]
    sums = perturbation.step_sums(found, features_in_step, len(lows), descending=False)
    return stats.spearman(sums, spread)  # NaN for a constant row


def sensitivity_n(model: Any, x_batch: Any, y_batch: Any, a_batch: Any, s_batch: Any = None,
                  *, n_max_percentage: float = 0.8, features_in_step: int = 1,
                  abs: bool = False, normalise: bool = True,  # noqa: A002
                  perturb_baseline: Any = "black", softmax: bool = True,
                  cumulative_sums: bool = True, batch_size: int = 64) -> np.ndarray:
    """[K] per n, the Pearson correlation across the images of the attribution over the
    removed values with the output's drop (one curve per call)."""
    if not 0 < n_max_percentage <= 1:
        raise UserError(f"n_max_percentage must be in (0, 1]; got {n_max_percentage}")
    found = prepared(x_batch, a_batch, s_batch, abs=abs, normalise=normalise)
    if len(found.x) < 2:
        raise UserError("sensitivity_n correlates across images: x_batch needs at least 2")
    height, width = found.x.shape[1:3]
    lows = perturbation.step_starts(found, features_in_step)
    steps = int(n_max_percentage * height * width // features_in_step)
    if steps < 1:
        raise UserError(f"n_max_percentage {n_max_percentage} keeps no step of "
                        f"{features_in_step} values")
    lows = lows[:steps]
    bands = np.stack([np.zeros_like(lows), lows + features_in_step], axis=1)
    scores = perturbation.scores_of_bands(
        model, found, y_batch, perturbation.element_ranks(found),
        np.concatenate([[[0, 0]], bands]), perturb_baseline, softmax=softmax,
        batch_size=batch_size)
    drops = scores[:, :1] - scores[:, 1:]
    sums = perturbation.step_sums(found, features_in_step, steps)
    if cumulative_sums:
        sums = np.cumsum(sums, axis=1)
    return stats.pearson(drops.T, sums.T)  # NaN for a constant row
