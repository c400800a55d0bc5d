"""Quantus's faithfulness family (docs/measures.md, "Faithfulness"): how the model's output
follows the map when the features it ranks are perturbed, every perturbation of every image
scored by the one batched computation (`perturbation.band_scores`). Features are Quantus 0.6's:
the image's values, channel first (C x H x W), ranked by the map broadcast over the channels.

- pixel_flipping (Bach et al. 2015): the output for the explained class after each step that
  replaces the next `features_in_step` highest-ranked values by the baseline, cumulatively
  (quantus/metrics/faithfulness/pixel_flipping.py, `evaluate_batch`); the curve [N, K] with
  K = ceil(C H W / features_in_step), or its area (trapezoid, unit steps) with
  `return_auc_per_sample`. Lower is better.
"""
import math
from typing import Any

import numpy as np

from faithfulness.measures import perturbation
from faithfulness.measures.arguments import prepared
from models.foundation.errors import UserError
from models.foundation.metric_spec import MetricSpec

SPECS = (
    MetricSpec("pixel_flipping", False, about="output as the highest-ranked features are "
                                              "replaced, cumulatively (area per image)"),
)


def pixel_flipping(model: Any, x_batch: Any, y_batch: Any, a_batch: Any, s_batch: Any = None,
                   *, features_in_step: int = 1, abs: bool = False,  # noqa: A002
                   normalise: bool = True, perturb_baseline: Any = "black",
                   return_auc_per_sample: bool = False, softmax: bool = True,
                   batch_size: int = 64) -> np.ndarray:
    """[N, K] the curve of each image (or [N], its area, with `return_auc_per_sample`)."""
    found = prepared(x_batch, a_batch, s_batch, abs=abs, normalise=normalise)
    height, width, channels = found.x.shape[1:]
    if features_in_step < 1 or (height * width) % features_in_step:
        raise UserError(f"features_in_step must divide the image's {height * width} pixels; "
                        f"got {features_in_step}")
    features = height * width * channels
    steps = math.ceil(features / features_in_step)
    highs = np.minimum(np.arange(1, steps + 1) * features_in_step, features)
    bands = np.stack([np.zeros(steps, np.int64), highs], axis=1)
    curves = perturbation.band_scores(
        model, found.x, perturbation.element_ranks(found.a, (height, width, channels)), bands,
        perturbation.baseline_images(found.x, perturb_baseline),
        perturbation.checked_classes(model, found.x, y_batch), softmax=softmax,
        batch_size=batch_size)
    return perturbation.auc_per_sample(curves) if return_auc_per_sample else curves
