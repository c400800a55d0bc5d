"""Noise wrappers around any additive method unit: SmoothGrad, SmoothGrad² and VarGrad
(docs/saliency.md, "Noise wrappers").

`NoisePlan(plan, wrapper, ...)` is itself a plan: each of the inner plan's items is repeated for
J noisy copies x + sigma * eta_j of its image, and the per-image statistics are reduced inside
the traced function: SmoothGrad = mean, SmoothGrad² = mean of squares, VarGrad = population
variance (float64, clamped at 0). Over a one-item method (gradient) the J sample maps are never
stored: float64 sums of the maps and of their squares are accumulated per image. Over a
multi-item method (IG) each (image, sample) has its own float32 map, reduced at the end.

Noise is stateless, keyed on (seed, base method, image id, sample), never on chunk position, so
results do not depend on the chunk size and SmoothGrad, SmoothGrad² and VarGrad of one base use
the same samples (VarGrad = SG² - SG² exactly).
"""
import zlib
from typing import Any, Sequence

import numpy as np
import tensorflow as tf

from saliency_gen.attribution.units import Items, Param, Plan

WRAPPERS = ("smoothgrad", "smoothgrad_sq", "vargrad")
WRAPPER_PARAMS = {
    "nsamples": Param(25, minimum=1, doc="noise samples per image"),
    "noise": Param("spread", choices=("spread", "absolute"),
                   doc="sigma = stdev_spread * (max x - min x) per image, or stdev"),
    "stdev_spread": Param(0.15, doc="sigma as a fraction of the image's value range"),
    "stdev": Param(1.0, doc="absolute sigma (noise='absolute')"),
}


def method_code(seed: int, base: str) -> int:
    """The noise key of a method: seed and base method name (CRC-32)."""
    return zlib.crc32(f"{seed}:{base}".encode()) & 0x7FFFFFFF


def group_noise(ids: tf.Tensor, samples: int, code: int, shape: Sequence[int]) -> tf.Tensor:
    """Standard normal noise [G, J, H, W, C]: one stateless stream per (method, image id), from
    which sample j is the j-th slice; so it never depends on chunking or batch mates."""
    seeds = tf.stack([ids, tf.fill(tf.shape(ids), tf.cast(code, tf.int64))], axis=1)
    return tf.map_fn(lambda seed: tf.random.stateless_normal([samples, *shape], seed), seeds,
                     fn_output_signature=tf.float32)


def sigmas(images: np.ndarray, options: dict) -> np.ndarray:
    """float32 [N]: each image's noise standard deviation."""
    if options["noise"] == "absolute":
        return np.full(len(images), options["stdev"], np.float32)
    spread = images.reshape(len(images), -1)
    return (options["stdev_spread"] * (spread.max(axis=1) - spread.min(axis=1))).astype(np.float32)


class NoisePlan(Plan):
    """`wrapper` over the additive `inner` plan, with `samples` noise draws per image."""

    def __init__(self, inner: Plan, wrapper: str, samples: int, code: int,
                 shape: Sequence[int]):
        super().__init__(samples * inner.steps, aux=inner.aux)
        self.inner, self.wrapper, self.samples, self.code = inner, wrapper, samples, code
        self.shape = tuple(shape)
        self.per_sample = inner.steps > 1
        self.slots_per_image = samples if self.per_sample else 1
        self.sum_dtypes = (tf.float32,) if self.per_sample else (tf.float64,) * 2

    def start(self, images: tf.Tensor, targets: tf.Tensor, ids: tf.Tensor,
              scales: Any) -> Any:
        noise = group_noise(ids, self.samples, self.code, self.shape)
        return (self.inner.start(images, targets, ids, scales),
                noise * scales[:, None, None, None, None])

    def slot(self, image: tf.Tensor, step: tf.Tensor) -> tf.Tensor:
        return image * self.samples + step // self.inner.steps if self.per_sample else image

    def shares(self, state: Any, items: Items) -> tuple:
        inner_state, noise = state
        sample = items.step // self.inner.steps
        noisy = items._replace(x=items.x + tf.gather_nd(noise, tf.stack([items.image, sample],
                                                                        axis=1)),
                               step=items.step % self.inner.steps)
        share = self.inner.shares(inner_state, noisy)[0]
        if self.per_sample:
            return (share,)
        share = tf.cast(share, tf.float64)
        return share, tf.square(share)

    def finish(self, state: Any, sums: tuple) -> tf.Tensor:
        if self.per_sample:
            maps = tf.cast(sums[0], tf.float64)
            maps = tf.reshape(maps, [-1, self.samples, *self.shape])
            mean = tf.reduce_mean(maps, axis=1)
            mean_square = tf.reduce_mean(tf.square(maps), axis=1)
        else:
            mean = sums[0] / self.samples
            mean_square = sums[1] / self.samples
        if self.wrapper == "smoothgrad":
            return tf.cast(mean, tf.float32)
        if self.wrapper == "smoothgrad_sq":
            return tf.cast(mean_square, tf.float32)
        return tf.cast(tf.maximum(mean_square - tf.square(mean), 0.0), tf.float32)
