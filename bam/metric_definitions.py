"""BAM's metrics on region scores g (docs/bam.md, "Metrics"): sampling, the correct set, MCS, IDR
and IIR.

| Metric | (model1, data1) | (model2, data2) | per image | aggregate |
| MCS | (obj, obj) | (scene, scene) | g1 - g2 | mean |
| IDR | (scene, scene_only) | (scene, scene) | g1 - g2 > 0 | fraction |
| IIR | (scene_only, bamboo_forest) | (scene_only, bamboo_forest_patch) | |g1-g2| < 0.1 g1 | share |

Only images both models classify correctly (each on its own labels) count.
"""
import random

import numpy as np
from numpy.typing import ArrayLike

from models.foundation.errors import UserError

PAIRS = {
    "MCS": (("obj", "obj"), ("scene", "scene")),
    "IDR": (("scene", "scene_only"), ("scene", "scene")),
    "IIR": (("scene_only", "bamboo_forest"), ("scene_only", "bamboo_forest_patch")),
}
METRICS = tuple(PAIRS)
METHODS = ("GC", "VG", "SG", "IG", "IG-SG", "GxI", "GB", "GGC")  # BAM's reporting order
ORIGINAL_NAMES = {"GC": "GradCam", "VG": "Vanilla Gradient", "SG": "Gradient SmoothGrad",
                  "IG": "Integrated Gradient", "IG-SG": "Integrated Gradient SmoothGrad",
                  "GxI": "Gradient x Input", "GB": "Guided Backprop", "GGC": "Guided GradCam"}


def sample_indices(count: int, num_imgs: int, seed: int) -> list:
    """BAM's sample: sorted(random.Random(seed).sample(range(count), num_imgs))."""
    if num_imgs > count:
        raise UserError(f"--num_imgs={num_imgs} exceeds the {count} images of this metric; "
                        f"use at most {count}")
    if num_imgs < 1:
        raise UserError(f"--num_imgs must be at least 1; got {num_imgs}")
    return sorted(random.Random(seed).sample(range(count), num_imgs))


def correct_set(predictions1: ArrayLike, labels1: ArrayLike, predictions2: ArrayLike,
                labels2: ArrayLike) -> np.ndarray:
    """Positions (into the sample) where both models predict their own labels."""
    both = (np.asarray(predictions1) == np.asarray(labels1)) & (
        np.asarray(predictions2) == np.asarray(labels2))
    return np.flatnonzero(both)


def per_image(metric: str, g1: np.ndarray, g2: np.ndarray) -> np.ndarray:
    """[n] float: the metric's value on each image of the correct set (its mean is the
    metric)."""
    g1, g2 = np.asarray(g1, np.float64), np.asarray(g2, np.float64)
    if metric == "MCS":
        return g1 - g2
    if metric == "IDR":
        return (g1 - g2 > 0).astype(np.float64)
    if metric == "IIR":
        return (np.abs(g1 - g2) < 0.1 * g1).astype(np.float64)
    raise UserError(f"unknown metric {metric!r}; choose from {', '.join(METRICS)}")


def metric_value(metric: str, g1: np.ndarray, g2: np.ndarray) -> float:
    """The metric on the g values of the correct set (arrays of equal length > 0)."""
    if np.asarray(g1).size == 0:
        raise UserError(f"{metric}: no image is classified correctly by both models; check the "
                        "models and data, or raise --num_imgs")
    return float(np.mean(per_image(metric, g1, g2)))
