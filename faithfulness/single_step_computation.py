"""The one computation of IIC, AD and ADD (docs/faithfulness.md, "Single-step metrics"): each
image scored clean and once masked by its min-max normalised, upsampled map, both in one chunked
pass (`scorer.Scorer.soft_pairs`).

The IIC / AD and ADD measures of `faithfulness.evaluate` (`protocol_measures`) and the
`saliency_maps_metrics`-compatible façades (`faithfulness.single_step.IIC_AD`, `ADD`) both call
`single_step_scores` with a `SingleStepSettings`, and turn its (clean, masked) scores into
values with `iic_ad` or `add`.
"""
import dataclasses
from typing import Any, Optional

import numpy as np
from numpy.typing import ArrayLike

from faithfulness import inputs, protocols, resample, substrates
from faithfulness import scorer as scoring
from faithfulness.curve_computation import classes_of
from models.foundation.errors import UserError

MODES = ("paper", "reference")


@dataclasses.dataclass(frozen=True)
class SingleStepSettings:
    """What replaces the removed part (`data_replace_method`); whether the map's region is
    kept (IIC / AD) or removed (`removes_salient`, ADD); how the maps are min-max normalised
    (`mode` "paper": each map; "reference": over the whole explanations tensor of the call, as
    the reference does) and upsampled."""

    data_replace_method: Any = "black"
    removes_salient: bool = False
    mode: str = "paper"
    upsample: str = "torch_bicubic"

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise UserError(f"unknown mode {self.mode!r}; use one of {', '.join(MODES)}")
        if self.upsample not in resample.UPSAMPLINGS:
            raise UserError(f"unknown upsample {self.upsample!r}; use one of "
                            f"{', '.join(resample.UPSAMPLINGS)}")
        if self.mode == "reference" and self.upsample != "torch_bicubic":
            raise UserError("mode='reference' upsamples with torch_bicubic only")

    def keep_masks(self, maps: np.ndarray, height: int, width: int) -> np.ndarray:
        """float32 [N, H, W]: min-max normalised maps, upsampled, (1 - m for ADD)."""
        axes = (1, 2) if self.mode == "paper" else (0, 1, 2)
        low = maps.min(axis=axes, keepdims=True)
        high = maps.max(axis=axes, keepdims=True)
        span = np.where(high > low, high - low, 1.0)
        normalised = np.where(high > low, (maps - low) / span, maps)  # constant: unchanged
        masks = resample.upsample_maps(normalised.astype(np.float32), height, width,
                                       self.upsample).numpy()
        return 1.0 - masks if self.removes_salient else masks


def single_step_scores(settings: SingleStepSettings, scorer: scoring.Scorer, data: Any,
                       explanations: Any, class_to_explain: Optional[ArrayLike] = None,
                       data_to_replace_with: Any = None) -> tuple[np.ndarray, np.ndarray]:
    """(Y, O): per-image scores of the clean and the masked images, float64 [N] each;
    `data_to_replace_with` replaces the settings' substrate."""
    data = inputs.images(data)
    maps = inputs.maps(explanations, int(data.shape[0]))
    classes = classes_of(scorer, data, class_to_explain)
    replacement = substrates.substrate(
        settings.data_replace_method if data_to_replace_with is None else data_to_replace_with,
        data)
    keep = settings.keep_masks(maps, int(data.shape[1]), int(data.shape[2]))
    pairs = scorer.soft_pairs(data, replacement, keep, classes).astype(np.float64)
    return pairs[:, 0], pairs[:, 1]


def iic_ad(clean: np.ndarray, masked: np.ndarray) -> dict:
    """{"iic", "ad"} per image: the score rose (O > Y), and the relative drop max(Y - O, 0) / Y,
    keeping the salient region."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return protocols.named("iic_ad", (masked > clean).astype(np.float64),
                               np.maximum(clean - masked, 0.0) / clean)


def add(clean: np.ndarray, masked: np.ndarray) -> dict:
    """{"add"} per image: (Y - O) / Y with the salient region removed."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return protocols.named("add", (clean - masked) / clean)


VALUES = {"iic_ad": iic_ad, "add": add}  # protocol -> its per-image values of (Y, O)
