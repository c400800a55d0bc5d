"""RISE (Petsiuk et al. 2018; docs/saliency.md, "RISE"): random masks, softmax-weighted.

Mask i is a binary `cells` x `cells` grid with P(1) = p1, upsampled bilinearly to
(cells + 1) * ceil(H / cells) with skimage semantics (`resize(order=1, mode="reflect",
anti_aliasing=False)`) and cropped to H x W at a random offset in [0, ceil(H / cells)) per axis.
That upsample-and-crop is linear and separable, so mask_i = R_i G_i C_i^T with G_i the grid and
R_i [H, cells], C_i [W, cells] the cropped rows of one interpolation matrix: the engine forms
each mask with two small matrix products when it needs it, instead of holding n_masks
full-size masks (6000 x 224 x 224 floats = 1.2 GB). One work item per mask:
`softmax(f(M x + (1 - M) b))_c * M / (n_masks * p1)`.
"""
from typing import Any, Sequence

import numpy as np
import tensorflow as tf
from skimage.transform import resize

from saliency_gen.attribution.baselines import baseline_image
from saliency_gen.attribution.units import Context, Method, Param, Plan, register


def interpolation_matrix(cells: int, size: int) -> np.ndarray:
    """[size, cells]: row k of the skimage bilinear (reflect) upsampling of a `cells`-vector."""
    return resize(np.eye(cells), (size, cells), order=1, mode="reflect", anti_aliasing=False,
                  preserve_range=True).astype(np.float64)


def mask_factors(n_masks: int, cells: int, p1: float, height: int, width: int,
                 seed: int) -> tuple:
    """(grids [n, cells, cells], rows [n, H, cells], cols [n, W, cells]) as float32 arrays."""
    rng = np.random.default_rng([int(seed), 0x215E])
    grids = (rng.random((n_masks, cells, cells)) < p1).astype(np.float32)
    cell_h, cell_w = -(-height // cells), -(-width // cells)
    full_rows = interpolation_matrix(cells, (cells + 1) * cell_h)
    full_cols = interpolation_matrix(cells, (cells + 1) * cell_w)
    offsets_h = rng.integers(0, cell_h, n_masks)
    offsets_w = rng.integers(0, cell_w, n_masks)
    rows = np.stack([full_rows[o:o + height] for o in offsets_h]).astype(np.float32)
    cols = np.stack([full_cols[o:o + width] for o in offsets_w]).astype(np.float32)
    return grids, rows, cols


def masks(n_masks: int, cells: int, p1: float, height: int, width: int,
          seed: int) -> np.ndarray:
    """The full masks [n, H, W] (for tests and inspection; the engine uses `mask_factors`)."""
    grids, rows, cols = mask_factors(n_masks, cells, p1, height, width, seed)
    return np.einsum("nhk,nkl,nwl->nhw", rows, grids, cols)


@register
class Rise(Method):
    name = "rise"
    summary = "RISE: softmax scores of randomly masked images, averaged per pixel"
    params = {
        "n_masks": Param(6000, minimum=1, doc="random masks"),
        "cells": Param(8, minimum=1, doc="grid cells per side"),
        "p1": Param(0.1, doc="probability that a cell is kept"),
        "baseline": Param("zeros", doc="what masked pixels become"),
        "baseline_range": Param((-1.0, 1.0), doc="(low, high) of the uniform baseline"),
    }

    def steps(self, options: dict, shape: Sequence[int]) -> int:
        return int(options["n_masks"])

    def seeded(self, options: dict) -> bool:
        return True

    def plan(self, options: dict, context: Context) -> Any:
        height, width, channels = context.shape
        grids, row_maps, col_maps = mask_factors(int(options["n_masks"]), int(options["cells"]),
                                                 float(options["p1"]), height, width,
                                                 context.seed)
        grids, row_maps, col_maps = (tf.constant(a, tf.float32)
                                     for a in (grids, row_maps, col_maps))
        scale = 1.0 / (int(options["n_masks"]) * float(options["p1"]))
        logits = context.model.logits

        def masked(items):
            step = items.step
            mask = tf.matmul(tf.matmul(tf.gather(row_maps, step), tf.gather(grids, step)),
                             tf.gather(col_maps, step), transpose_b=True)[..., tf.newaxis]
            probabilities = tf.nn.softmax(logits(mask * items.x + (1 - mask) * items.aux))
            score = tf.gather(probabilities, items.targets, batch_dims=1)[:, None, None, None]
            return tf.repeat(score * mask * scale, channels, axis=-1)

        baseline = baseline_image(options["baseline"], context.shape, context.preprocessing,
                                  context.seed, options["baseline_range"])
        return Plan(int(options["n_masks"]), masked, aux=baseline)
