"""IIC, AD and ADD with the API of `saliency_maps_metrics` (docs/faithfulness.md, "Single-step
metrics"). These classes are façades: they hold the reference's constructor options as a
`single_step_computation.SingleStepSettings` and call its one computation,
`single_step_computation.single_step_scores` (the one `faithfulness.evaluate`'s IIC / AD and ADD
measures call).

    IIC_AD()(model, data, explanations, class_to_explain)    # {"iic": .., "ad": ..}
    ADD()(model, data, explanations, class_to_explain)       # {"add": ..}

`mode="reference"` reproduces the reference's min-max normalisation over the whole explanations
tensor of the call; the default `mode="paper"` normalises each map.
"""
from typing import Any, Optional

import numpy as np

from faithfulness import single_step_computation as computation
from faithfulness import stats
from faithfulness.metric_base import Metric


class _SingleStep(Metric):
    protocol = ""  # "iic_ad" or "add" (`single_step_computation.VALUES`)
    removes_salient = False

    def __init__(self, data_replace_method: Any = "black", *, mode: str = "paper",
                 upsample: str = "torch_bicubic", output_activation: Optional[str] = None,
                 batch_size: int = 64, nan_policy: str = "propagate", jit_compile: bool = False):
        super().__init__(batch_size, output_activation, nan_policy, jit_compile)
        self.settings = computation.SingleStepSettings(data_replace_method,
                                                       self.removes_salient, mode, upsample)

    def compute_scores(self, model: Any, data: Any, explanations: Any,
                       class_to_explain: Any = None,
                       data_to_replace_with: Any = None) -> tuple[np.ndarray, np.ndarray]:
        """(Y, O): per-image scores of the clean and the masked images, float64 [N] each."""
        return computation.single_step_scores(self.settings, self.scorer(model), data,
                                              explanations, class_to_explain,
                                              data_to_replace_with)

    def per_image(self, clean: np.ndarray, masked: np.ndarray) -> dict:
        """{metric: per-image values} of the (clean, masked) scores."""
        return computation.VALUES[self.protocol](clean, masked)

    def __call__(self, model: Any, data: Any, explanations: Any, class_to_explain: Any = None,
                 data_to_replace_with: Any = None) -> dict:
        values = self.per_image(*self.compute_scores(model, data, explanations,
                                                     class_to_explain, data_to_replace_with))
        return {key: stats.aggregate(value, self.nan_policy, key)[0]
                for key, value in values.items()}


class IIC_AD(_SingleStep):  # noqa: N801 (the reference's name)
    """Increase in confidence (fraction with O > Y) and average drop (mean max(Y - O, 0) / Y),
    keeping the salient region: x M + b (1 - M)."""

    protocol = "iic_ad"


class ADD(_SingleStep):
    """Average drop in deletion, (Y - O) / Y with the salient region removed: x (1 - M) + b M."""

    protocol = "add"
    removes_salient = True
