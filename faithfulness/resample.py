"""Map upsampling exactly as the reference metrics do it (docs/faithfulness.md, "Upsampling").

* `torch_nearest_indices(in, out)`: PyTorch's legacy `nearest` source indices,
  `min(floor(dst * (in / out)), in - 1)` in float32, used to blow a cell mask up to the image.
* `torch_bicubic_matrix(in, out)`: the `[out, in]` matrix of PyTorch's
  `interpolate(mode="bicubic", align_corners=False)` (Keys' cubic with A = -0.75, taps clamped to
  the border, output not clamped), so a 2-D upsample is `M_h @ map @ M_w^T`.
* `grid_cell_indices(size, grid)`: the cell of every pixel row (or column) of a G x G grid with
  `size // grid` pixels per cell; pixels beyond `grid * cell` get the sentinel `grid` (no cell).
* `upsample_maps(maps, H, W, method)`: soft maps `[N, h, w]` -> `[N, H, W]` (torch bicubic by two
  matmuls, or TF bilinear / nearest).
"""
import numpy as np
import tensorflow as tf

from models.foundation.errors import UserError

UPSAMPLINGS = ("torch_bicubic", "bilinear", "nearest")
BICUBIC_A = -0.75


def torch_nearest_indices(size_in: int, size_out: int) -> np.ndarray:
    """int32 [size_out]: the source index of each output position (PyTorch legacy nearest)."""
    scale = np.float32(size_in) / np.float32(size_out)
    source = np.floor(np.arange(size_out, dtype=np.float32) * scale).astype(np.int64)
    return np.minimum(source, size_in - 1).astype(np.int32)


def _cubic_weights(t, a=BICUBIC_A):
    """Keys' weights of the four taps at distances 1 + t, t, 1 - t, 2 - t."""
    def near(d):  # |d| <= 1
        return ((a + 2) * d - (a + 3)) * d * d + 1

    def far(d):  # 1 < |d| < 2
        return ((a * d - 5 * a) * d + 8 * a) * d - 4 * a

    return np.stack([far(t + 1), near(t), near(1 - t), far(2 - t)], axis=-1)


def torch_bicubic_matrix(size_in: int, size_out: int) -> np.ndarray:
    """float64 [size_out, size_in]: PyTorch bicubic (align_corners=False, A = -0.75) as a matrix."""
    scale = np.float32(size_in) / np.float32(size_out)
    source = (np.arange(size_out, dtype=np.float32) + np.float32(0.5)) * scale - np.float32(0.5)
    first = np.floor(source)
    t = (source - first).astype(np.float64)
    weights = _cubic_weights(t)
    matrix = np.zeros((size_out, size_in))
    for tap in range(4):  # four taps, each a vector over all output positions
        index = np.clip(first.astype(np.int64) - 1 + tap, 0, size_in - 1)
        np.add.at(matrix, (np.arange(size_out), index), weights[:, tap])
    return matrix


def grid_cell_indices(size: int, grid: int) -> np.ndarray:
    """int32 [size]: the grid cell (0..grid-1) of each pixel, `grid` past the last full cell."""
    cell = size // grid
    if cell < 1:
        raise UserError(f"a {grid} x {grid} grid does not fit an image side of {size} pixels; "
                        "lower --grid_rows_and_cols")
    index = np.arange(size) // cell
    return np.where(index < grid, index, grid).astype(np.int32)


def upsample_maps(maps: tf.Tensor, height: int, width: int,
                  method: str = "torch_bicubic") -> tf.Tensor:
    """float32 [N, H, W]: soft maps `[N, h, w]` upsampled to the image size (not clamped)."""
    maps = tf.convert_to_tensor(maps, tf.float32)
    if method == "torch_bicubic":
        rows = tf.constant(torch_bicubic_matrix(maps.shape[1], height), tf.float32)
        cols = tf.constant(torch_bicubic_matrix(maps.shape[2], width), tf.float32)
        return tf.einsum("hi,nij,wj->nhw", rows, maps, cols)
    if method in ("bilinear", "nearest"):
        return tf.image.resize(maps[..., None], (height, width), method=method)[..., 0]
    raise UserError(f"unknown upsample {method!r}; use one of {', '.join(UPSAMPLINGS)}")
