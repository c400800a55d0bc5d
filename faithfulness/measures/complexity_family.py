"""Quantus's complexity family (docs/measures.md, "Complexity"): how concentrated a map is,
from the map alone, vectorised over the batch. Inputs are prepared as Quantus prepares them
(`arguments.prepared`: by default absolute values divided by the batch's largest |a|).

- sparseness (Chalasani et al. 2020): the Gini index of the map's features (sorted ascending
  after adding 1e-7), as quantus/metrics/complexity/sparseness.py:255-265; 1 when one feature
  holds everything, about 0 for a constant map. Higher is sparser.
- complexity (Bhatt et al. 2020): the entropy of the features' shares |a| / sum |a| (natural
  log, + 1e-12 inside it), as complexity.py:250-256; log(F) for a constant map of F features.
- effective_complexity (Nguyen & Martinez 2020): the number of features above `eps`
  (effective_complexity.py:251-254).
"""
from typing import Any

import numpy as np

from faithfulness import stats
from faithfulness.measures.arguments import prepared
from models.foundation.metric_spec import MetricSpec

SPECS = (
    MetricSpec("sparseness", True, about="Gini index of the map's features",
               note="rewards concentration whatever the map explains: on the synthetic world's "
                    "card the product Guided Grad-CAM ranks first and a constant map last (0); "
                    "read it beside a faithfulness metric."),
    MetricSpec("complexity", False, about="entropy of the features' shares of the map"),
    MetricSpec("effective_complexity", False, about="number of features above eps"),
)


def sparseness(model: Any, x_batch: Any, y_batch: Any, a_batch: Any, s_batch: Any = None, *,
               abs: bool = True, normalise: bool = True) -> np.ndarray:  # noqa: A002
    """[N] the Gini index of each map's features (Quantus's `Sparseness`)."""
    a = stats.sorted_rows(prepared(x_batch, a_batch, s_batch, abs=abs,
                                   normalise=normalise).a + 1e-7)
    features = a.shape[1]
    weights = 2 * np.arange(1, features + 1) - features - 1
    return (weights * a).sum(axis=1) / (features * a.sum(axis=1))


def complexity(model: Any, x_batch: Any, y_batch: Any, a_batch: Any, s_batch: Any = None, *,
               abs: bool = True, normalise: bool = True) -> np.ndarray:  # noqa: A002
    """[N] the entropy of each map's feature shares (Quantus's `Complexity`)."""
    a = prepared(x_batch, a_batch, s_batch, abs=abs, normalise=normalise).a
    with np.errstate(divide="ignore", invalid="ignore"):
        shares = a / np.abs(a).sum(axis=1, keepdims=True)
        return -(shares * np.log(shares + 1e-12)).sum(axis=1)


def effective_complexity(model: Any, x_batch: Any, y_batch: Any, a_batch: Any,
                         s_batch: Any = None, *, eps: float = 1e-5, abs: bool = True,
                         normalise: bool = True) -> np.ndarray:  # noqa: A002
    """[N] how many features of each map exceed `eps` (Quantus's `EffectiveComplexity`)."""
    a = prepared(x_batch, a_batch, s_batch, abs=abs, normalise=normalise).a
    return (a > eps).sum(axis=1).astype(np.int64)
