"""Deletion and insertion with the API of `saliency_maps_metrics` (docs/faithfulness.md,
"Deletion and insertion"): DAUC, IAUC, DC and IC, and Petsiuk et al.'s RISE deletion and
insertion. These classes are façades: they hold the reference's constructor options as a
`curve_computation.CurveSettings` and call its one computation, `curve_computation.curve_scores`
(the one `faithfulness.evaluate`'s deletion / insertion measure calls).

    metric = Deletion()                     # "black" substrate, <= 196 steps
    metric(model, data, explanations, class_to_explain)   # {"dauc": .., "dc": ..}
    result = metric.compute_scores(model, data, explanations, class_to_explain)
    result.curves, result.step_saliency, result.auc, result.calibration   # per image

Scores are the model's output as is (`output_activation=None`: the reference's contract is a
model that already ends in a softmax) or its softmax (`output_activation="softmax"`, for a model
that returns logits).
"""
from typing import Any, Optional

from faithfulness import protocols, stats
from faithfulness.curve_computation import CurveResult, CurveSettings, curve_scores
from faithfulness.metric_base import Metric


class _CurveMetric(Metric):
    """A curve metric: its settings and the options every metric shares."""

    keys: tuple[str, ...] = ("auc", "calibration")

    def __init__(self, settings: CurveSettings, batch_size: int, output_activation: Optional[str],
                 nan_policy: str, jit_compile: bool):
        super().__init__(batch_size, output_activation, nan_policy, jit_compile)
        self.settings = settings

    def compute_scores(self, model: Any, data: Any, explanations: Any,
                       class_to_explain: Any = None, masking_data: Any = None) -> CurveResult:
        """A `CurveResult` for every image."""
        return curve_scores(self.settings, self.scorer(model), data, explanations,
                            class_to_explain, masking_data)

    def __call__(self, model: Any, data: Any, explanations: Any, class_to_explain: Any = None,
                 masking_data: Any = None) -> dict:
        result = self.compute_scores(model, data, explanations, class_to_explain, masking_data)
        values = {self.keys[0]: result.auc}
        if len(self.keys) > 1:
            values[self.keys[1]] = result.calibration
        return {key: stats.aggregate(value, self.nan_policy, key)[0]
                for key, value in values.items()}


class _GomezCurve(_CurveMetric):
    inserts = False

    def __init__(self, data_replace_method: Any, bound_max_step: bool = True,
                 batch_size: int = 20, max_step_nb: int = 196, cumulative: bool = True, *,
                 remainder: str = "partial", class_source: str = "original",
                 output_activation: Optional[str] = None, nan_policy: str = "propagate",
                 jit_compile: bool = False):
        settings = CurveSettings(data_replace_method, self.inserts, cumulative, class_source,
                                 "gomez", bound_max_step, int(max_step_nb), remainder)
        super().__init__(settings, batch_size, output_activation, nan_policy, jit_compile)


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
    inserts = False

    def __init__(self, step: int = 224, substrate: Any = "zeros", *, batch_size: int = 64,
                 output_activation: Optional[str] = None, nan_policy: str = "propagate",
                 jit_compile: bool = False):
        settings = CurveSettings(substrate, self.inserts, schedule="rise", step=int(step))
        super().__init__(settings, batch_size, output_activation, nan_policy, jit_compile)


class RiseInsertion(RiseDeletion):
    """Petsiuk et al.'s insertion: pixels revealed on RISE's blurred image, `{"auc": ...}`."""

    inserts = True

    def __init__(self, step: int = 224, substrate: Any = "rise_blur", **options: Any):
        super().__init__(step, substrate, **options)
