"""BAM's per-image region attribution g (docs/bam.md, "Region score"), vectorised over images.

For a map A [H, W, C] at the model's input size, a box (r0, c0, r1, c1) in image pixels and the
object's crop mask m:

1. a = sum over channels of max(A, 0) (positive part, never the absolute value);
2. lo = min(a), hi = 99th percentile of a (numpy's linear interpolation over all H*W values);
3. a_bar = clip((a - lo) / (hi - lo), 0, 1), or 0 everywhere if hi <= lo (a constant map: the
   original divided by zero and returned NaN);
4. the box scaled to the input size, each value floored separately;
5. M = the crop mask resized into the box with PIL bilinear (`bam.dataset.mask_in_box`);
6. g = sum(a_bar[box] * M) / count(M != 0), the mean normalised attribution on the object.
"""
from typing import Optional, Sequence

import numpy as np
from numpy.typing import ArrayLike

from models.foundation.errors import UserError
from saliency_gen.data.world import dataset


def normalise_maps(maps: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    """(a_bar [N, H, W], constant [N] bool): steps 1-3 for a batch of maps [N, H, W, C]."""
    maps = np.asarray(maps, np.float32)
    if maps.ndim != 4:
        raise UserError(f"maps have shape {maps.shape}; expected [N, H, W, C]")
    positive = np.maximum(maps, 0).sum(axis=-1)
    flat = positive.reshape(len(positive), -1)
    low = flat.min(axis=1)
    high = np.percentile(flat, 99, axis=1)
    constant = high <= low
    span = np.where(constant, 1.0, high - low)
    normalised = np.clip((positive - low[:, None, None]) / span[:, None, None], 0, 1)
    normalised[constant] = 0.0
    return normalised.astype(np.float32), constant


def object_masks(masks: Sequence, boxes: Sequence, image_size: int, input_size: int,
                 names: Optional[Sequence[str]] = None) -> np.ndarray:
    """Full-frame uint8 {0,1} masks [N, input, input] of the objects (steps 4-5)."""
    frames = np.zeros((len(masks), input_size, input_size), np.uint8)
    for n, (mask, box) in enumerate(zip(masks, boxes)):  # PIL resizes one mask at a time
        r0, c0, r1, c1 = dataset.scale_box(box, image_size, input_size)
        if r1 <= r0 or c1 <= c0:
            raise UserError(f"{names[n] if names else f'image {n}'}: its box {box} is empty at "
                            f"{input_size} px")
        resized = dataset.mask_in_box(mask, r1 - r0, c1 - c0)
        if not resized.any():
            raise UserError(f"{names[n] if names else f'image {n}'}: its object mask is empty "
                            f"after resizing to the box {box}; check val_mask")
        frames[n, r0:r1, c0:c1] = resized
    return frames


def region_scores(maps: ArrayLike, frames: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(g [N], constant [N]): the mean normalised attribution on each object (step 6)."""
    normalised, constant = normalise_maps(maps)
    if normalised.shape != frames.shape:
        raise UserError(f"maps are {normalised.shape[1:]} but object masks are "
                        f"{frames.shape[1:]}; resize maps to the model input")
    weights = frames.astype(np.float32)
    return (normalised * weights).sum(axis=(1, 2)) / weights.sum(axis=(1, 2)), constant
