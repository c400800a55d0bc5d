"""RISE masks (Petsiuk et al. 2018; saliency_methods.md §2.4), generated once per run in numpy.

Mask i is a binary `cells` x `cells` grid with P(1) = p1, upsampled bilinearly to
(cells + 1) * ceil(H / cells) with skimage semantics (`resize(order=1, mode="reflect",
anti_aliasing=False)`) and cropped to H x W at a random offset in [0, ceil(H / cells)) per axis.

That upsample-and-crop is linear and separable, so mask_i = R_i G_i C_i^T with G_i the grid and
R_i [H, cells], C_i [W, cells] the cropped rows of one interpolation matrix. `mask_factors`
returns these small factors; the engine forms each mask with two matrix products when it needs
it, instead of holding n_masks full-size masks (6000 x 224 x 224 floats = 1.2 GB).
"""
import numpy as np
from skimage.transform import resize


def interpolation_matrix(cells, size):
    """[size, cells]: row k of the skimage bilinear (reflect) upsampling of a `cells`-vector."""
    return resize(np.eye(cells), (size, cells), order=1, mode="reflect", anti_aliasing=False,
                  preserve_range=True).astype(np.float64)


def mask_factors(n_masks, cells, p1, height, width, seed):
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


def masks(n_masks, cells, p1, height, width, seed):
    """The full masks [n, H, W] (for tests and inspection; the engine uses `mask_factors`)."""
    grids, rows, cols = mask_factors(n_masks, cells, p1, height, width, seed)
    return np.einsum("nhk,nkl,nwl->nhw", rows, grids, cols)
