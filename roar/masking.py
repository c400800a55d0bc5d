"""ROAR / KAR / ROAD masks from saliency maps (docs/roar.md, "Masks"), as batched TensorFlow ops.

    replaced = feature_mask(saliency, ratio=0.5, keep_information=False)   # ROAR, top 50%
    images = replace(images, replaced, "mean")

* `ratio` r is always the fraction of features *replaced*: ROAR replaces the top r, KAR
  (`keep_information`) keeps the top 1 - r and replaces the rest. Counts are ROAR's
  `int(q / 100 * N)` with q an integer percentage (`records.ranking_cut`), so r = 0.3 gives the
  original's 45,158 of 150,528 elements.
* Ranking unit: `element` (original: every channel entry on its own) or `pixel` (sum over
  channels; a selected pixel loses all channels).
* Scores: e^2 (`squared`, the original's default) or e; rescaled to [0, 1] per map, as the
  original. Ties: `index` takes the lower flat index first (the original's `top_k`); `jitter`
  adds 1e-4 N(0, 1) drawn once per seed and shared by every image (ROAD).
* Fill: `mean` (a per-channel constant: the normalisation mean, ImageNet's by default, as the
  original for every dataset), `zero`, or `noisy_linear` (ROAD, pixel unit only).

Control maps: `random_scores` (a uniform score per feature keyed by (seed, example key), so the
same image gets the same mask in every epoch and run; or per read with an epoch) and
`oracle_scores` (the object mask of the record, for calibration).
"""
from typing import Any, Optional, Sequence

import numpy as np
import tensorflow as tf

from models.foundation.errors import whole_percent
from roar import imputation
from saliency_gen.pipelines import key_seeds
from saliency_gen.records import ranking_cut

UNITS = ("element", "pixel")
TIE_BREAKS = ("index", "jitter")
FILLS = ("mean", "zero", "noisy_linear")
JITTER = 1e-4


def percent(ratio: float) -> int:
    """`ratio` as an integer percentage (ROAR's thresholds are whole percents): the flags'
    own rule (`models.foundation.errors.whole_percent`), so a library caller gets the same one
    line."""
    return whole_percent("ratio", ratio)


def feature_scores(saliency: tf.Tensor, unit: str = "element", squared: bool = True,
                   tie_break: str = "index", seed: int = 0) -> tf.Tensor:
    """[N, F] ranking scores of maps [N, H, W, C] (F = H*W*C per element, H*W per pixel)."""
    if unit not in UNITS:
        raise ValueError(f"ranking unit must be one of {UNITS}; got {unit!r}")
    if tie_break not in TIE_BREAKS:
        raise ValueError(f"tie break must be one of {TIE_BREAKS}; got {tie_break!r}")
    saliency = tf.cast(saliency, tf.float32)
    scores = tf.square(saliency) if squared else saliency
    if unit == "pixel":
        scores = tf.reduce_sum(scores, axis=-1)
    features = 1
    for dimension in scores.shape[1:]:
        features *= int(dimension)  # static, so counts are Python ints even in tf.data
    flat = tf.reshape(scores, [-1, features])
    low = tf.reduce_min(flat, axis=1, keepdims=True)
    spread = tf.reduce_max(flat, axis=1, keepdims=True) - low
    if tie_break == "index":  # the original: / max(spread, 1e-5), then + 1e-5
        return (flat - low) / tf.maximum(spread, 1e-5) + 1e-5
    jitter = tf.random.stateless_normal(tf.shape(flat)[1:], [seed, 7919])  # one field per seed
    return (flat - low) / (spread + 1e-5) + JITTER * jitter[None]


def _top_rows(scores, count):
    """numpy: bool rows with the `count` largest values, the lower index first on ties.

    The same set as `tf.math.top_k` (the original's op), found by a linear-time partition
    instead of a sort: everything above the count-th largest value, then the tied values at
    it in index order."""
    num_features = scores.shape[1]
    kth = np.partition(scores, num_features - count, axis=1)[:, num_features - count, None]
    above = scores > kth
    ties = scores == kth
    needed = count - above.sum(axis=1, keepdims=True)
    return above | (ties & (np.cumsum(ties, axis=1) <= needed))


def top_mask(scores: tf.Tensor, count: int) -> tf.Tensor:
    """bool [N, F]: the `count` highest scores of each row, the lower index first on ties."""
    count = int(count)
    num_features = scores.shape[-1]
    if count <= 0:
        return tf.zeros_like(scores, tf.bool)
    if count >= num_features:
        return tf.ones_like(scores, tf.bool)
    selected = tf.numpy_function(lambda values: _top_rows(values, count), [scores], tf.bool,
                                 stateful=False)
    return tf.ensure_shape(selected, scores.shape)


def feature_mask(saliency: tf.Tensor, ratio: float, keep_information: bool = False,
                 unit: str = "element", squared: bool = True, tie_break: str = "index",
                 seed: int = 0) -> tf.Tensor:
    """bool mask of the replaced features: [N, H, W, C] (element) or [N, H, W] (pixel)."""
    q = percent(ratio)
    scores = feature_scores(saliency, unit, squared, tie_break, seed)
    num_features = scores.shape[-1]
    if keep_information:
        replaced = tf.logical_not(top_mask(scores, ranking_cut(100 - q, num_features)))
    else:
        replaced = top_mask(scores, ranking_cut(q, num_features))
    shape = tf.shape(saliency) if unit == "element" else tf.shape(saliency)[:3]
    return tf.reshape(replaced, shape)


def replace(images: tf.Tensor, replaced: tf.Tensor, fill: str = "mean",
            mean: Sequence[float] = imputation.IMAGENET_MEAN, noise_std: float = 0.01,
            seed: int = 0, keys: Optional[tf.Tensor] = None, **solver_options: Any) -> tf.Tensor:
    """`images` [N, H, W, C] with the `replaced` features filled.

    `replaced` is [N, H, W, C] (element) or [N, H, W] (pixel). `mean` is the fill of "mean"
    (in the images' units); "noisy_linear" needs a pixel mask and passes `noise_std`, `seed`,
    `keys` and `solver_options` to `imputation.noisy_linear_impute`.
    """
    if fill not in FILLS:
        raise ValueError(f"fill must be one of {FILLS}; got {fill!r}")
    images = tf.convert_to_tensor(images, tf.float32)
    if fill == "noisy_linear":
        if replaced.shape.rank != 3:
            raise ValueError("noisy_linear imputation needs a pixel mask (--ranking_unit=pixel)")
        return imputation.noisy_linear_impute(images, replaced, noise_std=noise_std, seed=seed,
                                              keys=keys, fallback=mean, **solver_options)
    if replaced.shape.rank == 3:
        replaced = replaced[..., None]
    value = tf.constant(mean, tf.float32) if fill == "mean" else tf.constant(0.0)
    return tf.where(replaced, value, images)


def random_map(key: tf.Tensor, shape: Sequence[int], seed: int = 0,
               epoch: Optional[tf.Tensor] = None) -> tf.Tensor:
    """The uniform random map of one example key: the same key, seed (and epoch) give the same
    map whatever the batch. `epoch=None` is the fixed default; an epoch id gives the original's
    re-drawn-per-read control."""
    return tf.random.stateless_uniform(shape, key_seeds(key[None], seed, epoch)[0])


def random_scores(keys: tf.Tensor, shape: Sequence[int], seed: int = 0,
                  epoch: Optional[tf.Tensor] = None) -> tf.Tensor:
    """`random_map` for a batch of keys: [N, *shape]."""
    return tf.map_fn(lambda key: random_map(key, shape, seed, epoch), keys,
                     fn_output_signature=tf.float32)


def oracle_scores(object_masks: tf.Tensor, channels: int = 3) -> tf.Tensor:
    """Maps [N, H, W, channels] that are 1 on the object and 0 elsewhere (calibration)."""
    values = tf.cast(object_masks, tf.float32)[..., None]
    return tf.tile(values, [1, 1, 1, channels])
