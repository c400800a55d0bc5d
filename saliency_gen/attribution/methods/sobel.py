"""Sobel edges, ROAR's model-free control (docs/saliency.md, "Sobel")."""
from typing import Any

import tensorflow as tf

from saliency_gen.attribution.units import Context, Method, Plan, register


def sobel(x: tf.Tensor) -> tf.Tensor:
    """`scipy.ndimage.sobel(x, axis=0)` per image of [B, H, W, C]: central difference along H,
    [1, 2, 1] smoothing along W and along C, half-sample symmetric borders."""
    padded = tf.pad(x, [[0, 0], [1, 1], [1, 1], [1, 1]], mode="SYMMETRIC")
    derivative = padded[:, 2:, :, :] - padded[:, :-2, :, :]
    smooth_w = derivative[:, :, :-2, :] + 2 * derivative[:, :, 1:-1, :] + derivative[:, :, 2:, :]
    return smooth_w[..., :-2] + 2 * smooth_w[..., 1:-1] + smooth_w[..., 2:]


@register
class Sobel(Method):
    name = "sobel"
    summary = "scipy.ndimage.sobel along the height axis (model-free control)"
    views = ()

    def plan(self, options: dict, context: Context) -> Any:
        return Plan(1, lambda items: sobel(items.x))
