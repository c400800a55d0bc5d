"""BAM's metrics on region scores g (docs/bam.md, "Metrics"): sampling, the correct set, MCS, IDR
and IIR.

| Metric | (model1, data1) | (model2, data2) | per image | aggregate |
| MCS | (obj, obj) | (scene, scene) | g1 - g2 | mean |
| IDR | (scene, scene_only) | (scene, scene) | g1 - g2 > 0 | fraction |
| IIR | (scene_only, bamboo_forest) | (scene_only, bamboo_forest_patch) | |g1-g2| < 0.1 g1 | share |

Only images both models classify correctly (each on its own labels) count.
"""
import random
from typing import Callable, Sequence

import numpy as np
from numpy.typing import ArrayLike

from models.foundation.errors import UserError
from models.foundation.metric_spec import MetricSpec, specs_named

PAIRS = {
    "MCS": (("obj", "obj"), ("scene", "scene")),
    "IDR": (("scene", "scene_only"), ("scene", "scene")),
    "IIR": (("scene_only", "bamboo_forest"), ("scene_only", "bamboo_forest_patch")),
}
METRICS = tuple(PAIRS)
METHODS = ("GC", "VG", "SG", "IG", "IG-SG", "GxI", "GB", "GGC")  # BAM's reporting order
SPECS = (MetricSpec("MCS", True, about="object attribution of the object model minus the scene "
                                    "model's"),
         MetricSpec("IDR", True, about="share of images whose object attribution drops when the "
                                  "object goes"),
         MetricSpec("IIR", True, about="share of images whose attribution stays within 10% when a "
                                  "patch of no importance is added",
                    note="a map that does not change with the input scores 1 by construction: "
                         "the random control draws its map from the image's file name, which the "
                         "patched and the plain image share, so both get the same map. IIR "
                         "rewards insensitivity to the patch; read it beside IDR (sensitivity to "
                         "the object)."))
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
    return average(metric, per_image(metric, g1, g2))


def average(metric: str, values: np.ndarray) -> float:
    """The metric's value: the mean of its per-image values (at least one image)."""
    if np.asarray(values).size == 0:
        raise UserError(f"{metric}: no image is classified correctly by both models; check the "
                        "models and data, or raise --num_imgs")
    return float(np.mean(values))


class PairMetrics:
    """MCS, IDR and IIR as a measure (the project's one metric protocol,
    `models.foundation.metric_spec.Measure`) whose subject is a method: `metrics` (their specs)
    and `score(method)`, each metric's value on every image of its correct set (the metrics
    sample their own images); `bam.metrics` averages them (`values` scores several methods at
    once), the report card compares them image by image.

    `scores_of(model, data, indices, methods)` is the batched computation: (predictions [n],
    {method: g [n]}, {method: constant maps}) of the chosen images of one (model, data) pair,
    asked once per pair, images and methods (MCS and IDR share (scene, scene)).
    `labels_of(data)` gives a data set's labels, `indices_of(metric)` the metric's images."""

    def __init__(self, names: Sequence[str], scores_of: Callable, labels_of: Callable,
                 indices_of: Callable):
        self.metrics = specs_named(SPECS, names)
        self.scores_of, self.labels_of, self.indices_of = scores_of, labels_of, indices_of
        self._pairs: dict = {}

    def _pair(self, model: str, data: str, indices: list, methods: tuple) -> tuple:
        key = (model, data, tuple(indices), methods)
        if key not in self._pairs:
            self._pairs[key] = self.scores_of(model, data, indices, list(methods))
        return self._pairs[key]

    def values(self, metric: str, methods: Sequence[str]) -> dict:
        """{method: (values on the correct set [n], n, images sampled, constant maps)}."""
        indices = list(self.indices_of(metric))
        (m1, d1), (m2, d2) = PAIRS[metric]
        p1, g1, c1 = self._pair(m1, d1, indices, tuple(methods))
        p2, g2, c2 = self._pair(m2, d2, indices, tuple(methods))
        correct = correct_set(p1, np.asarray(self.labels_of(d1))[indices], p2,
                              np.asarray(self.labels_of(d2))[indices])
        return {method: (per_image(metric, np.asarray(g1[method])[correct],
                                   np.asarray(g2[method])[correct]),
                         len(correct), len(indices), c1.get(method, 0) + c2.get(method, 0))
                for method in methods}

    def score(self, method: str) -> dict:
        """{metric: [n] float}: `method`'s value on each image of each metric's correct set."""
        return {spec.name: self.values(spec.name, [method])[method][0] for spec in self.metrics}
