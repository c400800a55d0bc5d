"""IIC, AD and ADD with the API of `saliency_maps_metrics` (docs/faithfulness.md, "Single-step
metrics"): each image scored clean and once masked by its min-max normalised, upsampled map,
both in one chunked pass.

    IIC_AD()(model, data, explanations, class_to_explain)    # {"iic": .., "ad": ..}
    ADD()(model, data, explanations, class_to_explain)       # {"add": ..}

`mode="reference"` reproduces the reference's min-max normalisation over the whole explanations
tensor of the call; the default `mode="paper"` normalises each map.
"""
import numpy as np

from faithfulness import inputs, protocols, resample, stats, substrates
from faithfulness.metric_base import Metric
from models.foundation.errors import UserError

MODES = ("paper", "reference")


class _SingleStep(Metric):
    removes_salient = False

    def __init__(self, data_replace_method="black", *, mode="paper", upsample="torch_bicubic",
                 output_activation=None, batch_size=64, nan_policy="propagate",
                 jit_compile=False):
        super().__init__(batch_size, output_activation, nan_policy, jit_compile)
        if mode not in MODES:
            raise UserError(f"unknown mode {mode!r}; use one of {', '.join(MODES)}")
        if upsample not in resample.UPSAMPLINGS:
            raise UserError(f"unknown upsample {upsample!r}; use one of "
                            f"{', '.join(resample.UPSAMPLINGS)}")
        if mode == "reference" and upsample != "torch_bicubic":
            raise UserError("mode='reference' upsamples with torch_bicubic only")
        self.data_replace_method = data_replace_method
        self.mode = mode
        self.upsample = upsample

    def keep_masks(self, maps, height, width):
        """float32 [N, H, W]: min-max normalised maps, upsampled, (1 - m for ADD)."""
        axes = (1, 2) if self.mode == "paper" else (0, 1, 2)
        low = maps.min(axis=axes, keepdims=True)
        high = maps.max(axis=axes, keepdims=True)
        span = np.where(high > low, high - low, 1.0)
        normalised = np.where(high > low, (maps - low) / span, maps)  # constant: unchanged
        masks = resample.upsample_maps(normalised.astype(np.float32), height, width,
                                       self.upsample).numpy()
        return 1.0 - masks if self.removes_salient else masks

    def compute_scores(self, model, data, explanations, class_to_explain=None,
                       data_to_replace_with=None):
        """(Y, O): per-image scores of the clean and the masked images, float64 [N] each."""
        data = inputs.images(data)
        maps = inputs.maps(explanations, int(data.shape[0]))
        scorer = self.scorer(model)
        classes = self.classes(scorer, data, class_to_explain)
        replacement = substrates.substrate(
            self.data_replace_method if data_to_replace_with is None else data_to_replace_with,
            data)
        keep = self.keep_masks(maps, int(data.shape[1]), int(data.shape[2]))
        pairs = scorer.soft_pairs(data, replacement, keep, classes).astype(np.float64)
        return pairs[:, 0], pairs[:, 1]

    def per_image(self, clean: np.ndarray, masked: np.ndarray) -> dict:
        raise NotImplementedError

    def __call__(self, model, data, explanations, class_to_explain=None,
                 data_to_replace_with=None):
        values = self.per_image(*self.compute_scores(model, data, explanations,
                                                     class_to_explain, data_to_replace_with))
        return {key: stats.aggregate(value, self.nan_policy, key)[0]
                for key, value in values.items()}


class IIC_AD(_SingleStep):  # noqa: N801 (the reference's name)
    """Increase in confidence (fraction with O > Y) and average drop (mean max(Y - O, 0) / Y),
    keeping the salient region: x M + b (1 - M)."""

    def per_image(self, clean: np.ndarray, masked: np.ndarray) -> dict:
        with np.errstate(divide="ignore", invalid="ignore"):
            return protocols.named("iic_ad", (masked > clean).astype(np.float64),
                                   np.maximum(clean - masked, 0.0) / clean)


class ADD(_SingleStep):
    """Average drop in deletion, (Y - O) / Y with the salient region removed: x (1 - M) + b M."""

    removes_salient = True

    def per_image(self, clean: np.ndarray, masked: np.ndarray) -> dict:
        with np.errstate(divide="ignore", invalid="ignore"):
            return protocols.named("add", (clean - masked) / clean)
