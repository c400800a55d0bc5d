"""A fixed centre Gaussian, a model- and image-free control of the metrics (docs/saliency.md,
"Methods"): the same map for every image, peaked at the centre, where photographed and
synthetic objects tend to sit; a metric that ranks it high rewards a centre prior."""
from typing import Any

import tensorflow as tf

from saliency_gen.attribution.units import Context, Method, Plan, register

SIGMA_SIDE_FRACTION = 0.25  # sigma of the Gaussian, as a fraction of each side


def centre_gaussian(x: tf.Tensor) -> tf.Tensor:
    """exp(-(dy² / 2σ_h² + dx² / 2σ_w²)) with σ = side / 4, from the image centre, for every
    image and channel of `x` [B, H, W, C]."""
    shape = tf.shape(x)
    height, width = tf.cast(shape[1], x.dtype), tf.cast(shape[2], x.dtype)
    rows = tf.range(height, dtype=x.dtype) - (height - 1) / 2
    columns = tf.range(width, dtype=x.dtype) - (width - 1) / 2
    rows = tf.square(rows / (SIGMA_SIDE_FRACTION * height))[:, None]
    columns = tf.square(columns / (SIGMA_SIDE_FRACTION * width))[None, :]
    bump = tf.exp(-0.5 * (rows + columns))
    return tf.broadcast_to(bump[None, :, :, None], shape)


@register
class CentreGaussian(Method):
    name = "centre_gaussian"
    summary = "a fixed Gaussian of sigma = side / 4 at the image centre (model-free control)"
    views = ()

    def plan(self, options: dict, context: Context) -> Any:
        return Plan(1, lambda items: centre_gaussian(items.x))
