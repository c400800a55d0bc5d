"""Occlusion with PAIR's semantics (docs/saliency.md, "Occlusion"): for every window,
f_c(x) - f_c(x with the window set to `value`), added to every pixel of the window.

Item 0 adds f_c(x) times the number of windows covering each pixel; item 1 + w subtracts
f_c(x with window w occluded) inside window w. Their sum is PAIR's sum over windows.
"""
from typing import Any, Sequence

import numpy as np
import tensorflow as tf

from models.foundation.errors import UserError
from saliency_gen.attribution.units import Context, Method, Param, Plan, register, tile_channels


def _corners(height: int, width: int, size: int, stride: int) -> np.ndarray:
    rows = np.arange(0, height - size + 1, stride)
    cols = np.arange(0, width - size + 1, stride)
    return np.array([(r, c) for r in rows for c in cols], np.int32).reshape(-1, 2)


@register
class Occlusion(Method):
    name = "occlusion"
    summary = "the logit drop when a sliding window is occluded, summed per pixel"
    params = {
        "size": Param(15, minimum=1, label="occlusion size", doc="window side in pixels"),
        "stride": Param(1, minimum=1, label="occlusion stride", doc="window step in pixels"),
        "value": Param(0.0, doc="what occluded pixels become (input space)"),
    }

    def steps(self, options: dict, shape: Sequence[int]) -> int:
        height, width, _ = shape
        size, stride = int(options["size"]), int(options["stride"])
        return 1 + len(range(0, height - size + 1, stride)) * len(range(0, width - size + 1,
                                                                        stride))

    def plan(self, options: dict, context: Context) -> Any:
        height, width, channels = context.shape
        size, stride = int(options["size"]), int(options["stride"])
        if size > min(height, width):
            raise UserError(f"occlusion size {size} exceeds the image ({height}x{width})")
        corners = _corners(height, width, size, stride)
        coverage = np.zeros((height, width), np.float32)
        for r, c in corners:  # once per run, numpy, not per image
            coverage[r:r + size, c:c + size] += 1
        # Item 0 is the clean image (an empty window past the border); items 1.. the windows.
        steps = 1 + len(corners)
        corners = tf.constant(np.vstack([[height, width], corners]), tf.int32)
        coverage = tf.constant(coverage)
        grid_rows = tf.range(height)[None, :, None]
        grid_cols = tf.range(width)[None, None, :]
        value = float(options["value"])
        logits = context.model.logits

        def occlude(items):
            corner = tf.gather(corners, items.step)
            r, c = corner[:, 0][:, None, None], corner[:, 1][:, None, None]
            window = tf.cast((grid_rows >= r) & (grid_rows < r + size) & (grid_cols >= c)
                             & (grid_cols < c + size), tf.float32)
            occluded = items.x * (1 - window[..., None]) + value * window[..., None]
            score = tf.gather(logits(occluded), items.targets, batch_dims=1)[:, None, None]
            share = tf.where((items.step == 0)[:, None, None], coverage[None], -window)
            return tile_channels(score * share, channels)

        return Plan(steps, occlude)
