"""ROAR / KAR / ROAD masks from saliency maps (docs/roar.md, "Masks"), as batched TensorFlow ops.

    config = MaskConfig(ratio=0.5)                       # ROAR, top 50%, mean fill
    images = replace(images, feature_mask(saliency, config), config)

`MaskConfig` (declared in `roar.mask_settings`) holds every setting below; its values are
checked once, when it is built, by the same rules and words as the binaries' flags, and the
functions here trust it.

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
from typing import Optional, Sequence

import numpy as np
import tensorflow as tf

from models.foundation import provenance
from roar.mask_settings import FILLS, TIE_BREAKS, UNITS, MaskConfig  # noqa: F401 (its users')
from saliency_gen.data import imputation
from saliency_gen.data.pipelines import key_seeds
from saliency_gen.data.records import ranking_cut

JITTER = 1e-4


def solver_setting(fill: str) -> dict:
    """{IMPUTATION_SOLVER: the solver's name} for the origin of an output imputed by
    `fill` = "noisy_linear", else {} (docs/architecture.md, "Outputs and provenance")."""
    return {provenance.IMPUTATION_SOLVER: imputation.SOLVER} if fill == "noisy_linear" else {}


def feature_scores(saliency: tf.Tensor, config: MaskConfig) -> tf.Tensor:
    """[N, F] ranking scores of maps [N, H, W, C] (F = H*W*C per element, H*W per pixel), as
    `config` ranks them."""
    unit, squared, tie_break, seed = (config.ranking, config.squared, config.tie_break,
                                      config.seed)
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


def feature_mask(saliency: tf.Tensor, config: MaskConfig) -> tf.Tensor:
    """bool mask of the features `config` replaces: [N, H, W, C] (element) or [N, H, W]
    (pixel)."""
    scores = feature_scores(saliency, config)
    num_features = scores.shape[-1]
    if config.keep_information:
        kept = top_mask(scores, ranking_cut(100 - config.percent, num_features))
        replaced = tf.logical_not(kept)
    else:
        replaced = top_mask(scores, ranking_cut(config.percent, num_features))
    shape = tf.shape(saliency) if config.ranking == "element" else tf.shape(saliency)[:3]
    return tf.reshape(replaced, shape)


def replace(images: tf.Tensor, replaced: tf.Tensor, config: MaskConfig,
            keys: Optional[tf.Tensor] = None,
            mean: Sequence[float] = imputation.IMAGENET_MEAN) -> tf.Tensor:
    """`images` [N, H, W, C] ([0, 1] pixels) with the `replaced` features filled as `config`
    says.

    `replaced` is [N, H, W, C] (element) or [N, H, W] (pixel). `mean` (a colour in the images'
    units, also a tensor) is the fill of "mean" and noisy linear's fallback for an image with
    no kept pixel; "noisy_linear" (pixel masks only, which `config` ensures) keys its noise per
    image by the int `keys` (`imputation.noisy_linear_impute`)."""
    return replace_counted(images, replaced, config, keys, mean)[0]


def replace_counted(images: tf.Tensor, replaced: tf.Tensor, config: MaskConfig,
                    keys: Optional[tf.Tensor] = None,
                    mean: Sequence[float] = imputation.IMAGENET_MEAN,
                    noise: Optional[tf.Tensor] = None) -> tuple:
    """(`replace`'s images, int32 iterations of ROAD's solver for them: 0 for other fills); a
    profile counts the solver's work as images x iterations (`models.foundation.workload`).
    `noise`: noisy linear's standard normal draws for `images`, when drawn beforehand
    (`noise_draws`), in place of drawing them by `keys`."""
    images = tf.convert_to_tensor(images, tf.float32)
    if config.fill == "noisy_linear":
        filled, info = imputation.noisy_linear_impute(
            images, replaced, noise_std=config.road_noise, seed=config.seed, keys=keys,
            fallback=mean, tol=config.cg_tol, max_iters=config.cg_max_iters, return_info=True,
            noise=noise)
        return filled, tf.convert_to_tensor(info["iterations"], tf.int32)
    if replaced.shape.rank == 3:
        replaced = replaced[..., None]
    value = tf.convert_to_tensor(mean, tf.float32) if config.fill == "mean" else tf.constant(0.0)
    return tf.where(replaced, value, images), tf.constant(0, tf.int32)


def noise_draws(images: tf.Tensor, config: MaskConfig, keys: tf.Tensor) -> Optional[tf.Tensor]:
    """The standard normal draws `replace` adds (times the noise) to the imputed pixels of
    `images` [N, H, W, C] keyed by `keys` [N], or None when `config` adds none: the same
    values `replace` draws itself, for a caller that imputes each image several times."""
    if config.fill != "noisy_linear" or not config.road_noise:
        return None
    return imputation.keyed_noise(tf.shape(images), tf.float32, config.seed, keys)


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
