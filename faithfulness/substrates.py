"""Replacement images ("substrates") of the references, in model-input space (docs/faithfulness.md,
"Substrates").

All blurs are per channel, stride 1, zero padding of half the kernel (so borders darken, as in the
references) and separable, applied as two depthwise convolutions with 1-D weights computed once
in numpy:

* `box_blur`: GOMEZ's "blur", a box of side `max(H // 5, 9)` (+1 if even), weights 1 / k^2;
* `rise_blur`: RISE's `gkern(11, 5)`, an impulse through scipy's `gaussian_filter(sigma=5)` in an
  11 x 11 window (the tails fold back, so it is almost flat); it sums to 1;
* `idsds_blur`: IDSDS's `GaussianSmoothing(kernel, sigma)`, weights `exp(-((i - c) / (2 sigma))^2)`
  (note the 2 sigma) normalised to sum 1; default kernel 51, sigma 41.

`uniform_noise(keys, shape)` is IDSDS's U(-1, 1) baseline, one stateless draw per int64 key pair,
so that a draw never depends on what else is in the batch.
"""
from typing import Sequence, Union

import numpy as np
import scipy.ndimage
import tensorflow as tf
from numpy.typing import ArrayLike

from models.foundation.errors import UserError
from models.foundation.tracing import quiet_retracing


def box_kernel_1d(height: int) -> np.ndarray:
    """GOMEZ's box: side max(H // 5, 9), made odd; the 1-D factor of weights 1 / k^2."""
    side = max(height // 5, 9)
    side += 1 - side % 2
    return np.full(side, 1.0 / side)


def rise_kernel_1d(size: int = 11, sigma: float = 5.0) -> np.ndarray:
    """The 1-D factor of RISE's gkern(size, sigma): an impulse through scipy's gaussian_filter."""
    impulse = np.zeros(size)
    impulse[size // 2] = 1.0
    return scipy.ndimage.gaussian_filter(impulse, sigma)


def idsds_kernel_1d(size: int = 51, sigma: float = 41.0) -> np.ndarray:
    """The 1-D factor of IDSDS's GaussianSmoothing(size, sigma) (effective std sigma * sqrt 2)."""
    if size < 1 or size % 2 == 0:
        raise UserError(f"the blur kernel size must be a positive odd number; got {size}")
    weights = np.exp(-(((np.arange(size) - (size - 1) / 2) / (2 * sigma)) ** 2))
    return weights / weights.sum()


def separable_blur(images: tf.Tensor, kernel_1d: np.ndarray) -> tf.Tensor:
    """Per-channel blur of NHWC `images` by the outer product of `kernel_1d`, zero padding."""
    images = tf.convert_to_tensor(images, tf.float32)
    channels = images.shape[-1]
    kernel = tf.constant(np.asarray(kernel_1d, np.float32))
    size = int(kernel.shape[0])
    rows = tf.tile(tf.reshape(kernel, [size, 1, 1, 1]), [1, 1, channels, 1])
    cols = tf.tile(tf.reshape(kernel, [1, size, 1, 1]), [1, 1, channels, 1])
    blurred = tf.nn.depthwise_conv2d(images, rows, [1, 1, 1, 1], "SAME")
    return tf.nn.depthwise_conv2d(blurred, cols, [1, 1, 1, 1], "SAME")


def box_blur(images: tf.Tensor) -> tf.Tensor:
    """GOMEZ's "blur" substrate."""
    return separable_blur(images, box_kernel_1d(int(images.shape[1])))


def rise_blur(images: tf.Tensor) -> tf.Tensor:
    """RISE's insertion substrate, gkern(11, 5)."""
    return separable_blur(images, rise_kernel_1d())


def idsds_blur(images: tf.Tensor, kernel: int = 51, sigma: float = 41.0) -> tf.Tensor:
    """IDSDS's "blur" baseline, GaussianSmoothing(kernel, sigma)."""
    return separable_blur(images, idsds_kernel_1d(kernel, sigma))


def _rows_drawn(keys: tf.Tensor, shape: tuple, normal: bool) -> tf.Tensor:
    """float32 [N, *shape]: one stateless draw per row of `keys`, U(-1, 1) or N(0, 1)."""
    if normal:
        return tf.map_fn(lambda key: tf.random.stateless_normal(shape, key), keys,
                         fn_output_signature=tf.float32)
    return tf.map_fn(lambda key: tf.random.stateless_uniform(shape, key, -1.0, 1.0), keys,
                     fn_output_signature=tf.float32)


# An eager caller's draws run as one traced loop (one trace per shape); run eagerly, map_fn is a
# Python loop over the rows (320 rows of a robustness measure: 0.77 s of its 1.2 s).
_rows_traced = quiet_retracing(tf.function(_rows_drawn, autograph=False, reduce_retracing=True))


def _rows(keys: tf.Tensor, shape: Sequence[int], normal: bool) -> tf.Tensor:
    keys = tf.convert_to_tensor(keys, tf.int64)
    draw = _rows_traced if tf.executing_eagerly() else _rows_drawn
    return draw(keys, tuple(int(size) for size in shape), normal)


def uniform_noise(keys: tf.Tensor, shape: Sequence[int]) -> tf.Tensor:
    """float32 [N, *shape]: U(-1, 1) per row of int64 `keys` [N, 2] (stateless, batch-free)."""
    return _rows(keys, shape, normal=False)


def normal_noise(keys: tf.Tensor, shape: Sequence[int]) -> tf.Tensor:
    """float32 [N, *shape]: N(0, 1) per row of int64 `keys` [N, 2] (stateless, batch-free)."""
    return _rows(keys, shape, normal=True)


def noise_keys(seed: int, ids: tf.Tensor, salt: int = 0) -> tf.Tensor:
    """int64 [N, 2] keys (seed mixed with a salt, id) for `uniform_noise`."""
    ids = tf.cast(tf.convert_to_tensor(ids), tf.int64)
    mixed = tf.cast(int(seed) * 1_000_003 + int(salt), tf.int64)
    return tf.stack([tf.fill(tf.shape(ids), mixed), ids], axis=1)


SUBSTRATES = {"black": None, "zeros": None, "blur": box_blur, "rise_blur": rise_blur,
              "idsds_blur": idsds_blur}


def substrate(name: Union[str, ArrayLike], images: tf.Tensor) -> tf.Tensor:
    """The replacement images for a substrate name ("black"/"zeros", "blur", "rise_blur",
    "idsds_blur") or an array of the images' shape, in model-input space."""
    images = tf.convert_to_tensor(images, tf.float32)
    if not isinstance(name, str):
        replacement = tf.convert_to_tensor(name, tf.float32)
        if replacement.shape != images.shape:
            raise UserError(f"replacement data have shape {replacement.shape}; the images "
                            f"{images.shape}")
        return replacement
    if name not in SUBSTRATES:
        raise UserError(f"unknown replacement {name!r}; use one of {', '.join(SUBSTRATES)} or "
                        "pass an array")
    function = SUBSTRATES[name]
    return tf.zeros_like(images) if function is None else function(images)
