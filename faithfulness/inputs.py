"""Checks and conversions of the arrays the metrics take, each failing with one clear line."""
from typing import Union

import numpy as np
import tensorflow as tf
from numpy.typing import ArrayLike

from faithfulness import ranking
from models.foundation.errors import ShapeError, UserError

TRANSFORMS = ("raw", "abs", "relu")


def images(data: Union[tf.Tensor, ArrayLike], what: str = "data") -> tf.Tensor:
    """float32 tf.Tensor [N, H, W, C] from a numpy array or tensor (model-input space)."""
    if isinstance(data, tf.Tensor):
        data = tf.cast(data, tf.float32)
        finite = None
    else:  # checked on the host, before the copy into a tensor
        data = np.asarray(data, np.float32)
        finite = bool(np.isfinite(data).all())
        data = tf.convert_to_tensor(data)
    if len(data.shape) != 4:
        raise ShapeError(f"{what} has shape {tuple(data.shape)}; expected NHWC [N, H, W, C]")
    if data.shape[0] == 0:
        raise UserError(f"{what} holds no images")
    if finite is None:
        finite = bool(tf.reduce_all(tf.math.is_finite(data)))
    if not finite:
        raise UserError(f"{what} contains NaN or infinite values")
    return data


def maps(explanations: ArrayLike, count: int, what: str = "explanations") -> np.ndarray:
    """float64 numpy [N, h, w] from `[N, h, w]` or `[N, h, w, 1]` maps, finite, one per image."""
    explanations = np.asarray(explanations, np.float64)
    if explanations.ndim == 4 and explanations.shape[-1] == 1:
        explanations = explanations[..., 0]
    if explanations.ndim != 3:
        raise ShapeError(f"{what} have shape {explanations.shape}; expected [N, H', W'] or "
                         "[N, H', W', 1]")
    if len(explanations) != count:
        raise ShapeError(f"there are {len(explanations)} {what} for {count} images")
    ranking.check_finite(explanations, what)
    return explanations


def attributions(values: np.ndarray, count: int, transform: str = "raw",
                 what: str = "attributions") -> np.ndarray:
    """float64 [N, H, W]: `transform` (raw / abs / relu) of `[N, H, W]` or `[N, H, W, C]`
    attributions, then the channel sum (what the IDSDS explainers hand to the protocols)."""
    if transform not in TRANSFORMS:
        raise UserError(f"unknown attribution_transform {transform!r}; use one of "
                        f"{', '.join(TRANSFORMS)}")
    values = np.asarray(values, np.float64)
    if values.ndim == 4 and values.shape[-1] == 1:
        values = values[..., 0]
    if values.ndim == 3:  # one channel: nothing to sum
        values = values[..., None]
        summed = True
    else:
        summed = False
    if values.ndim != 4:
        raise ShapeError(f"{what} have shape {values.shape}; expected [N, H, W] or [N, H, W, C]")
    if len(values) != count:
        raise ShapeError(f"there are {len(values)} {what} for {count} images")
    ranking.check_finite(values, what)
    if transform == "abs":
        values = np.abs(values)
    elif transform == "relu":
        values = np.maximum(values, 0.0)
    return values[..., 0] if summed else values.sum(axis=-1)


def same_size(maps_: np.ndarray, data: tf.Tensor, what: str = "attributions") -> None:
    """Raises unless full-resolution maps `[N, H, W]` match the images' H x W."""
    if tuple(maps_.shape[1:3]) != tuple(data.shape[1:3]):
        raise ShapeError(f"{what} are {maps_.shape[1]}x{maps_.shape[2]} but the images "
                         f"{data.shape[1]}x{data.shape[2]}; pass full-resolution maps")
