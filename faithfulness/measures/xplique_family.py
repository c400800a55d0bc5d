"""Xplique's metrics (docs/measures.md, "Xplique"), under their names in snake_case, in the
same shape as Quantus's: one value per image (Xplique's `evaluate` returns their mean).

- average_stability (Xplique's `AverageStability`, Bhatt et al. 2020): the mean over
  `nb_samples` neighbours x + U(0, `radius`) (every value moved up by its own draw) of the
  `distance` ("l2" or "l1") between the map and the neighbour's map, both as the explainer
  gives them (xplique/metrics/stability.py). Lower is better. Xplique draws one set of
  neighbour offsets for all images with `tf.random.uniform`; here each (image, sample) draw is
  keyed by `seed`, the sample and the image's id (`robustness_family.noisy_ratios`), so the
  values agree with Xplique's in distribution.
"""
from typing import Any, Optional

import numpy as np

from faithfulness.measures import robustness_family
from models.foundation.errors import check_one_of
from models.foundation.metric_spec import MetricSpec

SPECS = (
    MetricSpec("average_stability", False, about="mean distance of the map from its "
                                                 "neighbours' maps (Xplique)"),
)
DISTANCES = ("l2", "l1")


def average_stability(model: Any, x_batch: Any, y_batch: Any, a_batch: Any,
                      s_batch: Any = None, *, explain_func: Any = None,
                      explain_func_kwargs: Optional[dict] = None, nb_samples: int = 20,
                      radius: float = 0.1, distance: str = "l2", seed: int = 0,
                      ids: Any = None, batch_size: int = 64) -> np.ndarray:
    """[N] the mean distance between the map and the maps of `nb_samples` neighbours."""
    check_one_of("distance", distance, DISTANCES)
    order = 2 if distance == "l2" else 1

    def objective(x, moved, a, maps, logits, moved_logits):
        return np.linalg.norm(a - maps, ord=order, axis=1)

    values, changed = robustness_family.noisy_ratios(
        model, x_batch, y_batch, a_batch, s_batch, objective=objective,
        noise=robustness_family.Noise(0.0, radius), nr_samples=nb_samples,
        explain_func=explain_func, explain_func_kwargs=explain_func_kwargs, abs=False,
        normalise=False, seed=seed, ids=ids, batch_size=batch_size)
    return values.mean(axis=1)
