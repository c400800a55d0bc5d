"""Quantus's randomisation family (docs/measures.md, "Randomisation"): a map that explains the
model changes when the model or the class explained changes. Every explanation goes through
`explaining.explainer` (the attribution engine, batched over the images).

- mprt (Adebayo et al. 2018, Quantus's `MPRT`): the weighted layers are re-initialised one at a
  time, cumulatively from the output (`layer_order="top_down"`) or the input ("bottom_up"),
  or each alone ("independent"); after each, the Spearman correlation of each image's map
  with the map the randomised model gives (quantus/metrics/randomisation/mprt.py). The values
  [N, layers], or their mean per image (`return_average_correlation`; over the re-initialised
  layers: Quantus's mean also counts the unrandomised model, its key "original" against the
  "orig" it skips) or the last (`return_last_correlation`). Lower is better. The layers are
  re-initialised by `faithfulness.randomisation.cascade` (each from its own initialiser with a
  seed of its own), through which the report card's cascading check randomises too; Quantus
  calls PyTorch's `reset_parameters`, so the values agree in distribution only.
- smooth_mprt (Hedstroem et al. 2023): mprt with each randomised model's map the mean over
  `nr_samples` copies of the image, the last clean and the others plus Gaussian noise of
  deviation `noise_magnitude` x the image's range (smooth_mprt.py, `explain_smooth_batch`),
  keyed by (seed, sample, image id). Lower is better.
- efficient_mprt (Hedstroem et al. 2023): the relative rise of the map's discrete entropy
  (`n_bins` equal bins) from the model to the fully re-initialised one, (H(a') - H(a)) / H(a)
  (efficient_mprt.py); the given `a_batch` is the model's map. Higher is better.
- random_logit (Sixt et al. 2020): the SSIM of each image's map with the map of a random other
  class (random_logit.py; scikit-image's structural similarity over the flattened maps, window
  7, the pair's value range). Lower is better. The other class is drawn per image from a key
  (`seed`, the image's id); Quantus draws a batch with `np.random.seed(seed)`. `num_classes`
  defaults to the model's classes (Quantus's default, 1000, names classes a smaller model has
  not).
"""
import functools
from typing import Any, Callable, Iterator, Optional

import keras
import numpy as np
import tensorflow as tf

from faithfulness import randomisation, stats, substrates
from faithfulness.measures import perturbation, robustness_family
from faithfulness.measures.arguments import image_ids, prepared, scaled
from faithfulness.measures.explaining import explainer, kept_copy
from models.foundation import cluster
from models.foundation.errors import UserError, check_one_of
from models.foundation.metric_spec import MetricSpec
from models.foundation.tracing import quiet_retracing

SPECS = (
    MetricSpec("mprt", False, about="correlation of the maps with those of a model whose "
                                    "layers are re-initialised one by one (mean per image)"),
    MetricSpec("smooth_mprt", False, about="mprt with each map averaged over noisy copies of "
                                           "the image (mean per image)"),
    MetricSpec("efficient_mprt", True, about="relative rise of the map's entropy when the "
                                             "whole model is re-initialised"),
    MetricSpec("random_logit", False, about="similarity of the map with a random other "
                                            "class's map"),
)
LAYER_ORDERS = randomisation.LAYER_ORDERS


def randomisable(model: Any) -> Any:
    """A Keras copy of `model` whose weights the measure may change, kept with `model` and
    given its current weights at each call (`explaining.kept_copy`)."""
    return kept_copy(model, "randomisable", "mprt re-initialises the model's layers",
                     keras.models.clone_model)


def _randomised_maps(model: Any, found: Any, classes: np.ndarray, ids: np.ndarray, *,
                     explain_func: Any, explain_func_kwargs: Optional[dict], layer_order: str,
                     seed: int, abs: bool, normalise: bool,  # noqa: A002
                     batch_size: int, smoothing: Optional[tuple] = None,
                     last_only: bool = False) -> Iterator[np.ndarray]:
    """The prepared maps [N, F] of the model after each step of `layer_order`'s
    re-initialisation (only the last with `last_only`); each map the mean over `smoothing` =
    (nr_samples, noise_magnitude) noisy copies where given (`_smoothed`)."""
    check_one_of("layer_order", layer_order, LAYER_ORDERS)
    randomised = randomisable(model)
    explain = explainer(randomised, explain_func, explain_func_kwargs, abs=abs,
                        normalise=normalise, map_shape=found.map_shape,
                        batch_size=batch_size, seed=seed)
    # every image in one batched explanation; the noisy copies drawn once for every model
    maps = (functools.partial(explain, found.x, classes, ids) if smoothing is None else
            _smoothed(explain, found.x, classes, ids, *smoothing, seed=seed, abs=abs,
                      normalise=normalise))
    count = len(randomisation.weighted_layers(randomised))
    steps = [count - 1] if last_only else None
    for _ in randomisation.cascade(randomised, layer_order, seed, steps):
        yield maps()


def _smoothed(explain: Callable, x: np.ndarray, classes: np.ndarray, ids: np.ndarray,
              nr_samples: int, noise_magnitude: float, *, seed: int, abs: bool,  # noqa: A002
              normalise: bool) -> Callable[[], np.ndarray]:
    """`maps()`: `explain` of the images `x` averaged over `nr_samples` copies of each, the
    last one clean, the others plus N(0, (noise_magnitude (max - min))^2) per image (Quantus's
    `explain_smooth_batch`), keyed by (seed, sample, image id); normalised and made absolute
    after the mean, as Quantus. The copies are drawn once, here: every model of the cascade
    explains the same ones (the draws do not read the model; docs/measures.md, "Speed")."""
    if nr_samples == 1:  # the clean image alone
        return functools.partial(explain, x, classes, ids)
    spread = noise_magnitude * (x.max(axis=(1, 2, 3)) - x.min(axis=(1, 2, 3)))
    unit = robustness_family.noisy_copies(  # N(0, 1) draws: copies of zero images
        np.zeros_like(x), ids, range(nr_samples - 1), seed=seed,
        noise=robustness_family.Noise(mean=0.0, std=1.0))
    noisy = np.tile(x, (nr_samples - 1, 1, 1, 1)) + unit * np.tile(
        spread, nr_samples - 1)[:, None, None, None]
    images = np.concatenate([noisy, x]).astype(np.float32)
    targets, keys = np.tile(classes, nr_samples), np.tile(ids, nr_samples)

    def maps() -> np.ndarray:
        raw = explain(images, targets, keys, unscaled=True)
        mean = raw.reshape(nr_samples, len(x), -1).mean(axis=0)
        return scaled(mean, abs=abs, normalise=normalise)
    return maps


def _check_reduction(average: bool, last: bool) -> None:
    if average and last:
        raise UserError("return_average_correlation and return_last_correlation exclude each "
                        "other; set one")


def _reduced_layers(correlations: np.ndarray, average: bool, last: bool) -> np.ndarray:
    """[N, layers] as asked: their mean per image, the last, or all."""
    if average:
        return correlations.mean(axis=1)
    return correlations[:, -1] if last else correlations


def mprt(model: Any, x_batch: Any, y_batch: Any, a_batch: Any, s_batch: Any = None, *,
         explain_func: Any = None, explain_func_kwargs: Optional[dict] = None,
         layer_order: str = "top_down", seed: int = 42,
         return_average_correlation: bool = False, return_last_correlation: bool = False,
         abs: bool = True, normalise: bool = True,  # noqa: A002
         ids: Any = None, batch_size: int = 64) -> np.ndarray:
    """[N, layers] the Spearman correlation of each map with the randomised model's, per
    layer re-initialised (or [N]: their mean, or the last)."""
    return _layer_correlations(locals(), smoothing=None)


def _layer_correlations(given: dict, smoothing: Optional[tuple]) -> np.ndarray:
    """mprt's and smooth_mprt's values from the call's arguments (`given`: its locals)."""
    average, last = given["return_average_correlation"], given["return_last_correlation"]
    _check_reduction(average, last)
    found = prepared(given["x_batch"], given["a_batch"], given["s_batch"], abs=given["abs"],
                     normalise=given["normalise"])
    classes = perturbation.checked_classes(given["model"], found.x, given["y_batch"])
    ids = image_ids(given["ids"], len(found.x))
    ranked = stats.ranks(found.a)  # once for every layer
    # each model's Spearman ranks on the host beside the next model's maps
    correlations = np.stack(cluster.overlapped(
        functools.partial(stats.spearman_ranked, ranked), _randomised_maps(
            given["model"], found, classes, ids, explain_func=given["explain_func"],
            explain_func_kwargs=given["explain_func_kwargs"], layer_order=given["layer_order"],
            seed=given["seed"], abs=given["abs"], normalise=given["normalise"],
            batch_size=given["batch_size"], smoothing=smoothing)), axis=1)
    return _reduced_layers(correlations, average, last)


def smooth_mprt(model: Any, x_batch: Any, y_batch: Any, a_batch: Any, s_batch: Any = None, *,
                explain_func: Any = None, explain_func_kwargs: Optional[dict] = None,
                layer_order: str = "bottom_up", seed: int = 42, nr_samples: int = 50,
                noise_magnitude: float = 0.1, return_average_correlation: bool = False,
                return_last_correlation: bool = False, abs: bool = True,  # noqa: A002
                normalise: bool = True, ids: Any = None, batch_size: int = 64) -> np.ndarray:
    """mprt with each randomised model's map the mean over `nr_samples` noisy copies of the
    image (the last clean): [N, layers], or their mean, or the last."""
    if nr_samples < 1:
        raise UserError(f"nr_samples must be at least 1; got {nr_samples}")
    return _layer_correlations(locals(), smoothing=(nr_samples, noise_magnitude))


def discrete_entropy(a: np.ndarray, n_bins: int = 100) -> np.ndarray:
    """[N]: the entropy of each row's histogram of `n_bins` equal bins over its range
    (Quantus's `discrete_entropy`: np.histogram, then scipy.stats.entropy); a constant row
    falls in one bin (entropy 0)."""
    low, high = a.min(axis=1, keepdims=True), a.max(axis=1, keepdims=True)
    width = np.where(high > low, high - low, 1.0)
    bins = np.clip(np.floor((a - low) / width * n_bins), 0, n_bins - 1).astype(np.int64)
    keyed = (np.arange(len(a))[:, None] * n_bins + bins).ravel()
    counts = np.bincount(keyed, minlength=len(a) * n_bins).reshape(len(a), n_bins)
    shares = counts / a.shape[1]
    with np.errstate(divide="ignore", invalid="ignore"):
        return -np.sum(np.where(shares > 0, shares * np.log(shares), 0.0), axis=1)


def efficient_mprt(model: Any, x_batch: Any, y_batch: Any, a_batch: Any, s_batch: Any = None,
                   *, explain_func: Any = None, explain_func_kwargs: Optional[dict] = None,
                   layer_order: str = "bottom_up", seed: int = 42, n_bins: int = 100,
                   abs: bool = False, normalise: bool = True,  # noqa: A002
                   ids: Any = None, batch_size: int = 64) -> np.ndarray:
    """[N] the relative rise of the map's discrete entropy from the model to the fully
    randomised model, (H(a') - H(a)) / H(a)."""
    if n_bins < 2:
        raise UserError(f"n_bins must be at least 2; got {n_bins}")
    found = prepared(x_batch, a_batch, s_batch, abs=abs, normalise=normalise)
    classes = perturbation.checked_classes(model, found.x, y_batch)
    ids = image_ids(ids, len(found.x))
    (randomised,) = _randomised_maps(
        model, found, classes, ids, explain_func=explain_func,
        explain_func_kwargs=explain_func_kwargs, layer_order=layer_order, seed=seed, abs=abs,
        normalise=normalise, batch_size=batch_size, last_only=True)
    before = discrete_entropy(found.a, n_bins)
    with np.errstate(divide="ignore", invalid="ignore"):
        return (discrete_entropy(randomised, n_bins) - before) / before


SSIM_ROWS = 16  # `ssim_rows` compiles one program per multiple of this many rows (and per
# power of two from 2 below it)


def ssim_rows(a: np.ndarray, b: np.ndarray, win_size: int = 7) -> np.ndarray:
    """[N]: scikit-image's structural similarity of each pair of rows (1-D signals: uniform
    window `win_size`, sample covariance, K1 0.01, K2 0.03, the pair's value range), averaged
    over the windows that lie inside the row (scikit-image crops the window's half at both
    ends, so its reflected edges never count), as Quantus's `ssim` on flattened maps. One XLA
    program in float64 (`_traced_ssim`) rather than scikit-image's filters on the host, the
    same values to about 1e-13 relative (a window's sum is taken in another order); a pair of
    rows with no range (one constant) is NaN, the formula's 0 / 0. The rows are padded with
    zeros to a power of two from 2 up to `SSIM_ROWS`, then to a multiple of it, so calls of
    1-16 images share four compiled programs and a call pads at most as many rows as it has
    (random_logit on Lite0's 4 maps, padded to 16 before: docs/measures.md, "Speed"); a row's
    value is the same bytes at these paddings but one row alone, which rounds otherwise."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    if a.shape[1] < win_size:
        raise UserError(f"the maps have {a.shape[1]} values, fewer than the SSIM window "
                        f"{win_size}")
    rows = max(2, 1 << (len(a) - 1).bit_length()) if len(a) <= SSIM_ROWS \
        else -(-len(a) // SSIM_ROWS) * SSIM_ROWS  # not 1: XLA's program for one row rounds
    padding = [(0, rows - len(a)), (0, 0)]
    return _traced_ssim(int(win_size))(tf.constant(np.pad(a, padding)),
                                       tf.constant(np.pad(b, padding))).numpy()[:len(a)]


@functools.lru_cache(maxsize=None)
def _traced_ssim(win_size: int) -> Any:
    """The traced (a, b float64 [N, D]) -> [N] of `ssim_rows` for one window size."""
    cov_norm = win_size / (win_size - 1)

    @tf.function(jit_compile=True, reduce_retracing=True)
    def similarity(a: tf.Tensor, b: tf.Tensor) -> tf.Tensor:
        windows = tf.shape(a)[1] - win_size + 1

        def mean(values):  # the mean of each window inside the row: [N, windows]
            total = values[:, :windows]
            for shift in range(1, win_size):
                total += values[:, shift:shift + windows]
            return total / win_size

        data_range = tf.abs(tf.maximum(tf.reduce_max(a, 1), tf.reduce_max(b, 1))
                            - tf.minimum(tf.reduce_min(a, 1), tf.reduce_min(b, 1)))[:, None]
        ux, uy = mean(a), mean(b)
        vx = cov_norm * (mean(a * a) - ux * ux)
        vy = cov_norm * (mean(b * b) - uy * uy)
        vxy = cov_norm * (mean(a * b) - ux * uy)
        c1, c2 = (0.01 * data_range) ** 2, (0.03 * data_range) ** 2
        found = tf.reduce_mean((2 * ux * uy + c1) * (2 * vxy + c2)
                               / ((ux ** 2 + uy ** 2 + c1) * (vx + vy + c2)), axis=1)
        # one constant pair: 0 / 0 (scikit-image's rounding gives 1 or NaN by the constant)
        return tf.where(data_range[:, 0] > 0, found, tf.constant(np.nan, tf.float64))
    return quiet_retracing(similarity)


def random_logit(model: Any, x_batch: Any, y_batch: Any, a_batch: Any, s_batch: Any = None, *,
                 explain_func: Any = None, explain_func_kwargs: Optional[dict] = None,
                 num_classes: Optional[int] = None, seed: int = 42,
                 abs: bool = False, normalise: bool = True,  # noqa: A002
                 ids: Any = None, batch_size: int = 64) -> np.ndarray:
    """[N] the SSIM of each map with the map of a random other class."""
    found = prepared(x_batch, a_batch, s_batch, abs=abs, normalise=normalise)
    classes = perturbation.checked_classes(model, found.x, y_batch)
    outputs = perturbation.class_count(model, found.x)
    count = outputs if num_classes is None else int(num_classes)
    if not 2 <= count <= outputs:
        raise UserError(f"num_classes must be between 2 and the model's {outputs} classes; "
                        f"got {count}")
    ids = image_ids(ids, len(found.x))
    draws = np.asarray(substrates.uniform_noise(substrates.noise_keys(seed, ids, salt=0x106),
                                                [1]))[:, 0]  # U(-1, 1) per image
    offset = np.minimum(((draws + 1) / 2 * (count - 1)).astype(np.int64), count - 2)
    other = np.where(offset >= classes, offset + 1, offset)  # uniform over the other classes
    explain = explainer(model, explain_func, explain_func_kwargs, abs=abs,
                        normalise=normalise, map_shape=found.map_shape,
                        batch_size=batch_size, seed=seed)
    return ssim_rows(found.a, explain(found.x, other.astype(np.int32), ids))
