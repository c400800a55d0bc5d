"""Deletion and insertion curves (docs/faithfulness.md, "Deletion and insertion"): DAUC, IAUC,
DC and IC with the API of `saliency_maps_metrics`, and Petsiuk et al.'s RISE deletion and
insertion; one stable sort per map, nested masks, every perturbed image of every curve scored in
fixed-size chunks inside one traced function.

    metric = Deletion()                     # "black" substrate, <= 196 steps
    metric(model, data, explanations, class_to_explain)   # {"dauc": .., "dc": ..}
    result = metric.compute_scores(model, data, explanations, class_to_explain)
    result.curves, result.step_saliency, result.auc, result.calibration   # per image

Scores are the model's output as is (`output_activation=None`: the reference's contract is a
model that already ends in a softmax) or its softmax (`output_activation="softmax"`, for a model
that returns logits).
"""
from dataclasses import dataclass
from typing import Any, Optional

import numpy as np
import tensorflow as tf

from faithfulness import inputs, protocols, ranking, resample, stats, substrates
from faithfulness.metric_base import Metric
from models.foundation.errors import UserError

CLASS_SOURCES = ("original", "start")


@dataclass
class CurveResult:
    """Per-image results of a deletion / insertion metric."""

    curves: np.ndarray         # float64 [N, K + 1], y_0 (the start image) first
    step_saliency: np.ndarray  # float64 [N, K], mean map value of each step's cells
    auc: np.ndarray            # float64 [N]
    calibration: np.ndarray    # float64 [N], DC or IC (NaN where undefined)
    classes: np.ndarray        # int32 [N]


class _CurveMetric(Metric):
    """Deletion (start x, end b) or insertion (start b, end x) along a ranked schedule."""

    inserts = False
    keys: tuple[str, ...] = ("auc", "calibration")

    def __init__(self, data_replace_method, cumulative, batch_size, output_activation,
                 nan_policy, jit_compile, class_source="original"):
        super().__init__(batch_size, output_activation, nan_policy, jit_compile)
        if class_source not in CLASS_SOURCES:
            raise UserError(f"unknown class_source {class_source!r}; use one of "
                            f"{', '.join(CLASS_SOURCES)}")
        self.data_replace_method = data_replace_method
        self.cumulative = cumulative
        self.class_source = class_source

    def thresholds(self, maps):
        raise NotImplementedError

    def grid(self, maps, data):
        """(rows, cols) source indices that blow a map-cell mask up to the image."""
        return (resample.torch_nearest_indices(maps.shape[1], int(data.shape[1])),
                resample.torch_nearest_indices(maps.shape[2], int(data.shape[2])))

    def compute_scores(self, model, data, explanations, class_to_explain=None,
                       masking_data=None):
        """A `CurveResult` for every image."""
        data = inputs.images(data)
        maps = inputs.maps(explanations, int(data.shape[0]))
        scorer = self.scorer(model)
        replace = self.data_replace_method if masking_data is None else masking_data
        if not self.inserts and isinstance(replace, str) and replace in ("black", "zeros"):
            substrate = tf.zeros([1, *data.shape[1:]])  # one image, shared by all (scorer)
        else:
            substrate = substrates.substrate(replace, data)
        start, end = (substrate, data) if self.inserts else (data, substrate)
        source = start if self.class_source == "start" else data
        classes = self.classes(scorer, source, class_to_explain,
                               "the start images" if self.class_source == "start"
                               else "the original images")
        thresholds = self.thresholds(maps)
        schedule = (ranking.cumulative if self.cumulative else ranking.bands)(thresholds)
        rows, cols = self.grid(maps, data)
        curves = scorer.ranked_curves(start, end, ranking.ranks(maps), schedule, classes, rows,
                                      cols, maps.shape[1:3]).astype(np.float64)
        saliency = ranking.step_saliency(maps, ranking.bands(thresholds))
        if self.cumulative:
            auc = stats.trapezoid_auc(curves)
            change = curves[:, 1:] - curves[:, :-1]
        else:
            auc = stats.trapezoid_auc(curves[:, 1:])
            change = curves[:, 1:] - curves[:, :1]
        calibration = stats.pearson(change if self.inserts else -change, saliency)
        return CurveResult(curves, saliency, auc, calibration, classes)

    def __call__(self, model, data, explanations, class_to_explain=None, masking_data=None):
        result = self.compute_scores(model, data, explanations, class_to_explain, masking_data)
        values = {self.keys[0]: result.auc}
        if len(self.keys) > 1:
            values[self.keys[1]] = result.calibration
        return {key: stats.aggregate(value, self.nan_policy, key)[0]
                for key, value in values.items()}


class _GomezCurve(_CurveMetric):
    def __init__(self, data_replace_method, bound_max_step=True, batch_size=20, max_step_nb=196,
                 cumulative=True, *, remainder="partial", class_source="original",
                 output_activation=None, nan_policy="propagate", jit_compile=False):
        super().__init__(data_replace_method, cumulative, batch_size, output_activation,
                         nan_policy, jit_compile, class_source)
        self.bound_max_step = bound_max_step
        self.max_step_nb = int(max_step_nb)
        self.remainder = remainder
        ranking.gomez_thresholds(1, remainder=remainder)  # validates the option early

    def thresholds(self, maps):
        cells = maps.shape[1] * maps.shape[2]
        return ranking.gomez_thresholds(cells, self.bound_max_step, self.max_step_nb,
                                        self.remainder, f"{maps.shape[1]}x{maps.shape[2]}")


class Deletion(_GomezCurve):
    """DAUC and DC: cells removed most salient first (default substrate "black" = 0)."""

    keys = protocols.names("deletion")  # ("dauc", "dc")

    def __init__(self, data_replace_method: Any = "black", bound_max_step: bool = True,
                 batch_size: int = 20, max_step_nb: int = 196, cumulative: bool = True,
                 **options: Any):
        super().__init__(data_replace_method, bound_max_step, batch_size, max_step_nb,
                         cumulative, **options)


class Insertion(_GomezCurve):
    """IAUC and IC: cells revealed most salient first on the substrate (default "blur")."""

    keys = protocols.names("insertion")  # ("iauc", "ic")
    inserts = True

    def __init__(self, data_replace_method: Any = "blur", bound_max_step: bool = True,
                 batch_size: int = 20, max_step_nb: int = 196, cumulative: bool = True,
                 **options: Any):
        super().__init__(data_replace_method, bound_max_step, batch_size, max_step_nb,
                         cumulative, **options)


class RiseDeletion(_CurveMetric):
    """Petsiuk et al.'s deletion (RISE `CausalMetric`): full-resolution maps, `step` pixels per
    step, zeros substrate; `{"auc": ...}`. Pass `output_activation="softmax"` for a logits model
    (RISE scores probabilities)."""

    keys = ("auc",)

    def __init__(self, step: int = 224, substrate: Any = "zeros", *, batch_size: int = 64,
                 output_activation: Optional[str] = None, nan_policy: str = "propagate",
                 jit_compile: bool = False):
        super().__init__(substrate, True, batch_size, output_activation, nan_policy, jit_compile)
        self.step = int(step)

    def thresholds(self, maps: np.ndarray) -> np.ndarray:
        return ranking.rise_thresholds(maps.shape[1] * maps.shape[2], self.step)

    def grid(self, maps: np.ndarray, data: tf.Tensor) -> tuple[np.ndarray, np.ndarray]:
        inputs.same_size(maps, data, "explanations")
        return np.arange(maps.shape[1]), np.arange(maps.shape[2])


class RiseInsertion(RiseDeletion):
    """Petsiuk et al.'s insertion: pixels revealed on RISE's blurred image, `{"auc": ...}`."""

    inserts = True

    def __init__(self, step: int = 224, substrate: Any = "rise_blur", **options: Any):
        super().__init__(step, substrate, **options)
