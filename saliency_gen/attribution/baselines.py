"""Reference inputs ("baselines") of path and masking methods, in model-input space
(docs/saliency.md, "Baselines")."""
from typing import Optional, Sequence

import numpy as np

from models.formats.preprocessing import input_space
from models.foundation.errors import UserError

BASELINES = ("zeros", "mean", "black", "uniform")


def baseline_image(baseline: str, shape: Sequence[int], preprocessing: Optional[str], seed: int,
                   low_high: tuple = (-1.0, 1.0)) -> np.ndarray:
    """The baseline as float32 [H, W, C] or [N, H, W, C] in input space.

    "zeros" / "mean": 0 in input space; "black": a black pixel through `preprocessing`;
    "uniform": one U(low, high) image drawn from `seed`, shared by all images; or an array
    (a `spec.FrozenArray` or anything numpy takes).
    """
    height, width, channels = shape
    if isinstance(baseline, str):
        if baseline in ("zeros", "mean"):
            return np.zeros(shape, np.float32)
        if baseline == "black":
            if preprocessing is None:
                raise UserError("the black baseline needs the model's preprocessing; pass "
                                "preprocessing='imagenet' or 'caffe_rgb' (or a loaded model)")
            black = input_space(preprocessing).black()
            if black.shape[0] != channels:
                raise UserError(f"preprocessing {preprocessing!r} has {black.shape[0]} channels; "
                                f"the images have {channels}")
            return np.broadcast_to(black, shape).astype(np.float32)
        if baseline == "uniform":
            low, high = low_high
            rng = np.random.default_rng([int(seed), 0x1B5E])
            return rng.uniform(low, high, shape).astype(np.float32)
        raise UserError(f"unknown baseline {baseline!r}; choose zeros, mean, black, uniform or "
                        "pass an array")
    array = np.asarray(getattr(baseline, "array", baseline), np.float32)
    if array.shape[-3:] != tuple(shape):
        raise UserError(f"baseline has shape {array.shape}; expected [H, W, C] = {tuple(shape)} "
                        "or [N, H, W, C]")
    return array
