"""Quantus's robustness family (docs/measures.md, "Robustness"): how much a map changes when the
input changes a little, re-explaining every perturbed input through `explaining.explainer` (the
attribution engine, batched) in groups of many images.

- avg_sensitivity / max_sensitivity (Yeh et al. 2019): over `nr_samples` inputs x + noise
  (uniform in [-lower_bound, lower_bound], or [lower_bound, upper_bound]), the mean / largest
  ||a - a'|| / ||a|| (Frobenius norms; quantus/metrics/robustness/avg_sensitivity.py,
  max_sensitivity.py); a sample whose prediction changes is left out (NaN), or makes the value
  NaN with `return_nan_when_prediction_changes`. Lower is better. Quantus draws the noise with
  `np.random`; here each (image, sample) draw is keyed by `seed`, the image's id and the
  sample, so values agree with Quantus's in distribution, and a run is reproducible.
"""
import warnings
from typing import Any, Optional

import numpy as np
import tensorflow as tf

from faithfulness import scorer as scoring
from faithfulness import substrates
from faithfulness.measures import perturbation
from faithfulness.measures.arguments import prepared
from faithfulness.measures.explaining import explainer
from models.foundation.errors import UserError
from models.foundation.metric_spec import MetricSpec

SPECS = (
    MetricSpec("avg_sensitivity", False, about="mean relative change of the map under small "
                                               "input noise"),
    MetricSpec("max_sensitivity", False, about="largest relative change of the map under "
                                               "small input noise"),
)

GROUP_BYTES = 1 << 28  # perturbed images held at once


def noisy_copies(x: np.ndarray, ids: np.ndarray, samples: range, *, seed: int,
                 low: float, high: float) -> np.ndarray:
    """float32 [len(samples) x N, H, W, C], sample-major: x plus uniform noise in [low, high]
    per element, keyed by (seed, sample, image id)."""
    keys = np.stack([np.repeat(int(seed) * 1_000_003 + np.asarray(samples, np.int64), len(x)),
                     np.tile(np.asarray(ids, np.int64), len(samples))], axis=1)
    unit = substrates.uniform_noise(tf.constant(keys), list(x.shape[1:])).numpy()  # U(-1, 1)
    noise = low + (unit + 1.0) * 0.5 * (high - low)
    return (np.tile(x, (len(samples), 1, 1, 1)) + noise).astype(np.float32)


def sensitivities(model: Any, x_batch: Any, y_batch: Any, a_batch: Any, *, explain_func: Any,
                  explain_func_kwargs: Optional[dict], nr_samples: int, lower_bound: float,
                  upper_bound: Optional[float], abs: bool, normalise: bool,  # noqa: A002
                  seed: int, ids: Any, batch_size: int) -> tuple[np.ndarray, np.ndarray]:
    """(float64 [N, S] ||a - a'|| / ||a|| per noisy sample, bool [N, S] prediction changed)."""
    if nr_samples < 1:
        raise UserError(f"nr_samples must be at least 1; got {nr_samples}")
    if upper_bound is not None and upper_bound <= lower_bound:
        raise UserError(f"upper_bound ({upper_bound}) must exceed lower_bound ({lower_bound})")
    low, high = (-lower_bound, lower_bound) if upper_bound is None else (lower_bound,
                                                                         upper_bound)
    found = prepared(x_batch, a_batch, abs=abs, normalise=normalise)
    classes = perturbation.checked_classes(model, found.x, y_batch)
    ids = np.arange(len(found.x)) if ids is None else np.asarray(ids, np.int64)
    explain = explainer(model, explain_func, explain_func_kwargs, abs=abs, normalise=normalise,
                        map_shape=found.map_shape, batch_size=batch_size, seed=seed)
    predict = scoring.Scorer(model, None, batch_size)
    predicted = np.argmax(predict.predict(tf.constant(found.x)), axis=1)
    per_group = max(1, GROUP_BYTES // max(1, found.x.nbytes))
    ratios, changed = [], []
    for start in range(0, nr_samples, per_group):  # groups of many images
        samples = range(start, min(nr_samples, start + per_group))
        noisy = noisy_copies(found.x, ids, samples, seed=seed, low=low, high=high)
        count = len(samples)
        maps = explain(noisy, np.tile(classes, count),
                       np.tile(ids, count) * nr_samples + np.repeat(np.asarray(samples), len(ids)))
        gaps = np.linalg.norm(np.tile(found.a, (count, 1)) - maps, axis=1)
        with np.errstate(divide="ignore", invalid="ignore"):
            ratios.append((gaps / np.tile(np.linalg.norm(found.a, axis=1), count))
                          .reshape(count, -1).T)
        moved = np.argmax(predict.predict(tf.constant(noisy)), axis=1) != np.tile(predicted,
                                                                                   count)
        changed.append(moved.reshape(count, -1).T)
    return np.concatenate(ratios, axis=1), np.concatenate(changed, axis=1)


def _sensitivity(reduce: Any, model: Any, x_batch: Any, y_batch: Any, a_batch: Any,
                 s_batch: Any, return_nan_when_prediction_changes: bool,
                 **settings: Any) -> np.ndarray:
    if s_batch is not None:
        raise UserError("s_batch is given but this measure takes no mask; leave it out")
    ratios, changed = sensitivities(model, x_batch, y_batch, a_batch, **settings)
    ratios = np.where(changed, np.nan, ratios)
    if return_nan_when_prediction_changes:
        return reduce(ratios, axis=1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # an image whose samples all moved
        return (np.nanmean if reduce is np.mean else np.nanmax)(ratios, axis=1)


def avg_sensitivity(model: Any, x_batch: Any, y_batch: Any, a_batch: Any, s_batch: Any = None,
                    *, explain_func: Any = None, explain_func_kwargs: Optional[dict] = None,
                    nr_samples: int = 200, lower_bound: float = 0.2,
                    upper_bound: Optional[float] = None, abs: bool = False,  # noqa: A002
                    normalise: bool = False, return_nan_when_prediction_changes: bool = False,
                    seed: int = 0, ids: Any = None, batch_size: int = 64) -> np.ndarray:
    """[N] the mean ||a - a'|| / ||a|| over the noisy samples."""
    return _sensitivity(np.mean, model, x_batch, y_batch, a_batch, s_batch,
                        return_nan_when_prediction_changes, explain_func=explain_func,
                        explain_func_kwargs=explain_func_kwargs, nr_samples=nr_samples,
                        lower_bound=lower_bound, upper_bound=upper_bound, abs=abs,
                        normalise=normalise, seed=seed, ids=ids, batch_size=batch_size)


def max_sensitivity(model: Any, x_batch: Any, y_batch: Any, a_batch: Any, s_batch: Any = None,
                    *, explain_func: Any = None, explain_func_kwargs: Optional[dict] = None,
                    nr_samples: int = 200, lower_bound: float = 0.2,
                    upper_bound: Optional[float] = None, abs: bool = False,  # noqa: A002
                    normalise: bool = False, return_nan_when_prediction_changes: bool = False,
                    seed: int = 0, ids: Any = None, batch_size: int = 64) -> np.ndarray:
    """[N] the largest ||a - a'|| / ||a|| over the noisy samples."""
    return _sensitivity(np.max, model, x_batch, y_batch, a_batch, s_batch,
                        return_nan_when_prediction_changes, explain_func=explain_func,
                        explain_func_kwargs=explain_func_kwargs, nr_samples=nr_samples,
                        lower_bound=lower_bound, upper_bound=upper_bound, abs=abs,
                        normalise=normalise, seed=seed, ids=ids, batch_size=batch_size)
