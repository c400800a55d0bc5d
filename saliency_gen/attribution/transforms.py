"""Post-processing of maps, the separate last step of every method (docs/saliency.md,
"Conventions"): a transform (raw, abs, relu, square), then an optional sum over channels; and
the report card's blur control (`blur`)."""
from typing import Any

import numpy as np

from models.foundation.errors import UserError
from models.foundation.lazy import lazy_module

scipy_ndimage = lazy_module("scipy.ndimage")  # 0.3 s to import: not before a binary's --help

TRANSFORMS = ("raw", "abs", "relu", "square")
REDUCTIONS = ("none", "sum")


def check(transform: str, reduce: str) -> None:
    if transform not in TRANSFORMS:
        raise UserError(f"unknown transform {transform!r}; choose raw, abs, relu or square")
    if reduce not in REDUCTIONS:
        raise UserError(f"unknown reduce {reduce!r}; choose none or sum")


def postprocess(maps: Any, transform: str = "raw", reduce: str = "none") -> np.ndarray:
    """float32 maps after `transform`, then the channel sum if `reduce="sum"` ([N, H, W, 1])."""
    check(transform, reduce)
    maps = np.asarray(maps, np.float32)
    if transform == "abs":
        maps = np.abs(maps)
    elif transform == "relu":
        maps = np.maximum(maps, 0)
    elif transform == "square":
        maps = np.square(maps)
    if reduce == "sum":
        maps = maps.sum(axis=-1, keepdims=True)
    return maps


BLUR_SIDE_FRACTION = 1 / 32  # the blur control's sigma, as a fraction of the image side


def blur(maps: Any) -> np.ndarray:
    """Every map of `maps` [N, H, W, C] smoothed by a Gaussian over H and W (each channel on its
    own, reflecting at the borders) of sigma = side / 32 (2 px at 64 px, 7 px at 224 px): the
    report card's `blur(method)` control (docs/report_card.md, "How far to trust each metric")."""
    maps = np.asarray(maps, np.float32)
    sigma = BLUR_SIDE_FRACTION * max(maps.shape[1], maps.shape[2])
    return scipy_ndimage.gaussian_filter(maps, sigma=(0, sigma, sigma, 0)).astype(np.float32)
