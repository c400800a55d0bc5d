"""Post-processing of maps, the separate last step of every method (docs/saliency.md,
"Conventions"): a transform (raw, abs, relu, square), then an optional sum over channels."""
import numpy as np

from models.errors import UserError

TRANSFORMS = ("raw", "abs", "relu", "square")
REDUCTIONS = ("none", "sum")


def check(transform: str, reduce: str) -> None:
    if transform not in TRANSFORMS:
        raise UserError(f"unknown transform {transform!r}; choose raw, abs, relu or square")
    if reduce not in REDUCTIONS:
        raise UserError(f"unknown reduce {reduce!r}; choose none or sum")


def postprocess(maps, transform: str = "raw", reduce: str = "none") -> np.ndarray:
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
