"""ROAD's noisy linear imputation (docs/roar.md, "Masks", ROAD imputation) as batched TensorFlow.

Every removed pixel becomes the weighted mean of its 8 in-image neighbours (1/6 for edge
neighbours, 1/12 for diagonals), removed neighbours being unknowns themselves: one sparse linear
system per image, the same matrix for every channel. ROAD solves it with scipy per image; here
a matrix-free conjugate gradient solves all images and channels at once in one traced loop,
preconditioned by one multigrid V-cycle: a large hole's smooth part, which Jacobi-preconditioned
CG needs hundreds of iterations to find at 224 px, comes from grids of half, a quarter, ... of
the side. Each coarse grid's operator is the Galerkin product P^T A P of the finer one (P:
bilinear prolongation onto the finer grid's unknowns, P^T: full weighting), read off per image
as a 9-point stencil with 9 probe products; Jacobi smooths the image grid, l1-Jacobi the coarse
ones. Unlike the same stencil re-used on coarse grids, the Galerkin operator knows how a coarse
pixel's support straddles removed and kept pixels; with the prolongation scaled at the image's
free edge (`_Coarse`), large smooth holes at 224 px need 7 iterations where the stencil re-used
needed 56 (docs/roar.md, "Masks"):

    A u = r * (d * u - conv(r * u, K)),   b = r * conv(m * x, K),   x' = m * x + r * (u + s * e)

with m the kept mask, r = 1 - m, K the stencil, d = conv(1, K) (1 inside, 2/3 on edges, 5/12 at
corners: ROAD's border renormalisation). A is symmetric positive definite on the removed pixels
whenever the image keeps at least one pixel. An image that keeps none has no solution: it is
filled with `fallback` (default: ImageNet's mean colour) plus the noise and counted.

The solve is compiled by XLA (`jit_compile`): its loop is some hundred element-wise passes over
the images per iteration, which XLA fuses into a few: 5.0-6.4x faster at 224 px on a 2-core
Xeon (scripts/bench_roar.py, 2026-12-04). XLA compiles once per batch shape (the
callers' chunks are fixed-size) and sums the dot products in its own order, so the solution
differs from the uncompiled graph's within the tolerance; `SOLVER` names this solver in every
origin that depends on it, so outputs of an earlier solver are recomputed (docs/roar.md,
"Masks").

`sparse_direct_impute` assembles the same system with scipy and solves it directly, one image at
a time (ROAD's own method): the reference for tests and the benchmark.
"""
from typing import Any, Optional, Sequence

import numpy as np
import tensorflow as tf

from models.formats.preprocessing import IMAGENET_MEAN

EDGE, DIAGONAL = 1.0 / 6.0, 1.0 / 12.0
STENCIL = np.array([[DIAGONAL, EDGE, DIAGONAL], [EDGE, 0.0, EDGE], [DIAGONAL, EDGE, DIAGONAL]])


def _pad_axis(values, axis: int, before: int, after: int):
    paddings = [[0, 0]] * values.shape.rank
    paddings[axis] = [before, after]
    return tf.pad(values, paddings)


def _take(values, axis: int, start: int, stop: Optional[int], step: int = 1):
    index = [slice(None)] * values.shape.rank
    index[axis] = slice(start, stop, step)
    return values[tuple(index)]


# The 3x3 neighbourhood's offsets (row, column) in the order of a 9-point stencil's weights.
OFFSETS = [(dy, dx) for dy in (-1, 0, 1) for dx in (-1, 0, 1)]
CENTRE = OFFSETS.index((0, 0))


def _shifted_sum(values, weights):
    """sum_o weights[o] * values shifted by o in {-1, 0, 1}^2 ([N, H, W, C], zero padding):
    `weights` are scalars or [N, H, W, 1] tensors, in `OFFSETS` order. The values are padded
    once and every shift is a slice of the padded array."""
    padded = tf.pad(values, [[0, 0], [1, 1], [1, 1], [0, 0]])
    height, width = values.shape[1], values.shape[2]
    total = None
    for weight, (dy, dx) in zip(weights, OFFSETS):
        term = weight * padded[:, 1 + dy:1 + dy + height, 1 + dx:1 + dx + width]
        total = term if total is None else total + term
    return total


def _conv(values):
    """The stencil applied to every channel of `values` [N, H, W, C], zero padding. The stencil
    is (w w^T - 4 delta) / 12 with w = [1, 2, 1]: the values are padded once and summed as
    shifted slices along the rows, then along the columns (2x faster on the CPU than a
    depthwise convolution); the solver's loop runs it once per iteration."""
    padded = tf.pad(values, [[0, 0], [1, 1], [1, 1], [0, 0]])
    rows = padded[:, :-2] + 2.0 * padded[:, 1:-1] + padded[:, 2:]
    both = rows[:, :, :-2] + 2.0 * rows[:, :, 1:-1] + rows[:, :, 2:]
    return (both - 4.0 * values) / 12.0


# Restriction (full weighting: w w^T / 4, stride 2, the padding of a "SAME" convolution) and its
# transpose, bilinear prolongation, both separable: along each axis the weights are w / 2. The
# coarse grids rescale both at the image's edge (`_Coarse.edge`).
COARSEST_SIDE = 8
COARSEST_SWEEPS = 8
FINE_JACOBI_WEIGHT = 1.0
COARSE_STEP = 1.8  # l1-Jacobi's step on a coarse grid, c / sum_j |a_ij|: any c < 2 converges
# (2 D - A is diagonally dominant); a larger step smooths more, 1.8 keeps a margin
COARSE_KEEP = 1e-6  # a coarse pixel is an unknown when its diagonal is above this share of the
# image's largest one on that grid (below, its prolongation barely touches a removed pixel)


def _coarse_padding(size: int):
    """(coarse size, padding before) of a stride-2, width-3 "SAME" window over `size`."""
    coarse = -(-size // 2)
    total = max(2 * coarse + 1 - size, 0)
    return coarse, total // 2


def _restrict_axis(values, axis: int):
    size = values.shape[axis]
    coarse, before = _coarse_padding(size)
    padded = _pad_axis(values, axis, before, 2 * coarse + 1 - size - before)
    return 0.5 * (_take(padded, axis, 0, 2 * coarse, 2) + _take(padded, axis, 2, None, 2)) \
        + _take(padded, axis, 1, 2 * coarse, 2)


def _prolong_axis(values, axis: int, size: int):
    coarse, before = _coarse_padding(size)
    even = 0.5 * (_pad_axis(values, axis, 0, 1) + _pad_axis(values, axis, 1, 0))
    odd = _pad_axis(values, axis, 0, 1)
    shape = tf.unstack(tf.shape(even))
    shape[axis] = 2 * (coarse + 1)
    interleaved = tf.reshape(tf.stack([even, odd], axis=axis + 1), tf.stack(shape))
    return _take(interleaved, axis, before, before + size)


def _restrict(values):
    """Full-weighting restriction (half the side, rounded up): [N, H, W, C] -> coarse grid."""
    return _restrict_axis(_restrict_axis(values, 1), 2)


def _prolong(values, fine_shape):
    """Bilinear prolongation, the transpose of `_restrict`, onto the static `fine_shape`."""
    return _prolong_axis(_prolong_axis(values, 1, fine_shape[1]), 2, fine_shape[2])


def _colour_probes(height: int, width: int):
    """([1, h, w, 9] probes, [h, w, 9, 9] picks) for reading a 9-point operator off 9 products:
    probe c is 1 on the pixels of colour c = 3 (i mod 3) + (j mod 3), so a pixel's 3x3
    neighbours have 9 different colours, and its coefficient towards offset o is its row of the
    product with the probe of that neighbour's colour (picks[i, j, o, c] = 1)."""
    rows, cols = np.meshgrid(np.arange(height), np.arange(width), indexing="ij")
    colour = 3 * (rows % 3) + cols % 3
    probes = (colour[..., None] == np.arange(9)).astype(np.float32)[None]
    picks = np.zeros((height, width, 9, 9), np.float32)
    for o, (dy, dx) in enumerate(OFFSETS):
        neighbour = 3 * ((rows + dy) % 3) + (cols + dx) % 3
        picks[:, :, o] = neighbour[..., None] == np.arange(9)
    return probes, picks


class _Fine:
    """The removed pixels' operator on the image grid: r (d u - conv(u)), u zero outside r;
    Jacobi (weight `FINE_JACOBI_WEIGHT`) smooths."""

    def __init__(self, removed, dtype):
        self.mask = tf.cast(removed, dtype)[..., None]
        self.diagonal = _conv(tf.ones_like(self.mask))
        self.step = FINE_JACOBI_WEIGHT * self.mask / self.diagonal

    def apply(self, values):
        return self.mask * (self.diagonal * values - _conv(values))


class _Coarse:
    """A coarse grid's Galerkin operator P^T A P (P: bilinear prolongation onto the finer
    grid's unknowns) as a 9-point stencil per pixel, read off with 9 colour probes; its
    unknowns are the pixels with a diagonal above `COARSE_KEEP` of the image's largest. l1-
    Jacobi smooths (step `COARSE_STEP` / sum_j |a_ij|, convergent for any symmetric matrix).

    Bilinear P gives a first row or column of an even-sided grid half its weight (a quarter in
    the corner). Where the unknowns there are free (ROAD's stencil is renormalised at the
    image's edge, which reflects: an unknown's row sum is 0 when no kept pixel pins it), a
    smooth error is nearly constant up to the edge, and a P that fades there leaves it to the
    smoother (with the step of 1.8, bench_roar's smooth holes went from 26 iterations to 7:
    docs/roar.md, "Masks"). There P's rows are scaled to sum to 1; where kept pixels pin the
    unknowns, which fix the values at the edge, they keep their fading weights; in between, in
    proportion (`edge`: 1 + (1 / (P 1) - 1) (1 - row sum / diagonal))."""

    def __init__(self, finer):
        fine_shape = finer.mask.shape
        height, width = -(-fine_shape[1] // 2), -(-fine_shape[2] // 2)
        probes, picks = _colour_probes(height, width)
        dtype = finer.mask.dtype
        ones = tf.ones([1, height, width, 1], dtype)
        faded = 1.0 / _prolong(ones, [1, fine_shape[1], fine_shape[2], 1]) - 1.0
        row_sums = finer.apply(finer.mask)  # over the unknowns: 0 where nothing pins a pixel
        reflecting = finer.mask * tf.clip_by_value(
            1.0 - tf.math.divide_no_nan(row_sums, finer.diagonal), 0.0, 1.0)
        self.edge = 1.0 + faded * reflecting
        prolonged = self.up(tf.constant(probes, dtype), [1, fine_shape[1], fine_shape[2], 9])
        responses = self.down(finer.apply(finer.mask * prolonged))
        coefficients = tf.einsum("nhwc,hwoc->nhwo", responses, tf.constant(picks, dtype))
        diagonal = coefficients[..., CENTRE:CENTRE + 1]
        largest = tf.reduce_max(diagonal, axis=[1, 2, 3], keepdims=True)
        self.mask = tf.cast(diagonal > COARSE_KEEP * largest, dtype)
        self.diagonal = self.mask * diagonal
        coefficients = self.mask * coefficients
        self.weights = tf.unstack(coefficients[..., None], axis=3)
        self.step = tf.math.divide_no_nan(
            COARSE_STEP * self.mask, tf.reduce_sum(tf.abs(coefficients), axis=3, keepdims=True))

    def apply(self, values):  # values are zero outside the unknowns
        return _shifted_sum(values, self.weights)

    def up(self, values, fine_shape):
        return self.edge * _prolong(values, fine_shape)

    def down(self, values):
        return _restrict(self.edge * values)


def _grids(removed, dtype):
    """The operator of the image grid and of each coarser one (half the side, rounded up) down
    to `COARSEST_SIDE`; the image grid alone when the size is not static."""
    grids: list[Any] = [_Fine(removed, dtype)]
    height, width = removed.shape[1], removed.shape[2]
    while height is not None and width is not None and min(height, width) > COARSEST_SIDE:
        grids.append(_Coarse(grids[-1]))
        height, width = -(-height // 2), -(-width // 2)
    return grids


def _v_cycle(rhs, grids, level):
    """One V-cycle on grid `level` (a smoothing step before and after, the coarse correction
    from the next grid; sweeps of the smoother on the coarsest): a symmetric, positive definite
    approximation of the operator's inverse, CG's preconditioner."""
    grid = grids[level]
    u = grid.step * rhs
    if level == len(grids) - 1:
        for _ in range(COARSEST_SWEEPS - 1):
            u = u + grid.step * (rhs - grid.apply(u))
        return u
    coarser = grids[level + 1]
    correction = _v_cycle(coarser.mask * coarser.down(rhs - grid.apply(u)), grids, level + 1)
    u = u + grid.mask * coarser.up(correction, rhs.shape)
    return u + grid.step * (rhs - grid.apply(u))


def _solve(images, removed, tol, max_iters):
    """Multigrid-preconditioned CG for all images and channels on the removed pixels; returns
    (u, iterations, max relative residual). The iterates stay zero outside the removed pixels,
    so the operator needs no mask on its input; each (image, channel) carries its own squared
    residual norm, and converged pairs are frozen (alpha 0), so an image's result does not
    depend on how long its batch mates need."""
    dtype = images.dtype
    grids = _grids(removed, dtype)
    apply, r = grids[0].apply, grids[0].mask  # apply's input is zero outside the removed pixels

    def precondition(residual):
        return _v_cycle(residual, grids, 0)

    def dot(a, b):
        return tf.reduce_sum(a * b, axis=[1, 2], keepdims=True)

    b = r * _conv((1.0 - r) * images)
    b_norm = tf.sqrt(dot(b, b))
    scale = tf.square(tf.where(b_norm > 0, b_norm, tf.ones_like(b_norm)))
    limit = tf.square(tol) * scale  # converged: |residual|^2 <= tol^2 |b|^2
    u = tf.zeros_like(images)
    residual = b
    z = precondition(residual)
    rz, rr = dot(residual, z), dot(residual, residual)

    def cond(i, u, residual, p, rz, rr):
        return tf.logical_and(i < max_iters, tf.reduce_any(rr > limit))

    def body(i, u, residual, p, rz, rr):
        active = rr > limit
        ap = apply(p)
        pap = dot(p, ap)
        usable = tf.logical_and(active, pap > 0)
        alpha = tf.where(usable, rz / tf.where(usable, pap, tf.ones_like(pap)),
                         tf.zeros_like(pap))
        u = u + alpha * p
        residual = residual - alpha * ap
        z = precondition(residual)
        rz_new = dot(residual, z)
        beta = tf.where(rz > 0, rz_new / tf.where(rz > 0, rz, tf.ones_like(rz)),
                        tf.zeros_like(rz))
        p = tf.where(active, z + beta * p, p)
        return (i + 1, u, residual, p, tf.where(active, rz_new, rz),
                tf.where(active, dot(residual, residual), rr))

    iterations, u, _, _, _, rr = tf.while_loop(
        cond, body, [tf.constant(0), u, residual, z, rz, rr])
    return u, iterations, tf.reduce_max(tf.sqrt(rr / scale))


# Named in the origins of everything imputed with it (`IMPUTATION_SOLVER` settings); change it
# whenever a change of the solver changes its bytes.
SOLVER = "galerkin-multigrid-cg, xla, 3"

# The compiled solve: (images, removed, tol, max_iters) -> (u, iterations, max relative
# residual); `solve.python_function` is the same algorithm uncompiled (a benchmark's peer).
solve = tf.function(_solve, jit_compile=True, reduce_retracing=True)


def noisy_linear_impute(images: tf.Tensor, removed: tf.Tensor, noise_std: float = 0.0,
                        seed: int = 0, keys: Optional[tf.Tensor] = None, tol: float = 1e-5,
                        max_iters: int = 2000, fallback: Sequence[float] = IMAGENET_MEAN,
                        return_info: bool = False, noise: Optional[tf.Tensor] = None) -> Any:
    """ROAD's noisy linear imputation of the `removed` pixels of `images`.

    images: [N, H, W, C] float pixels (ROAD works on [0, 1] pixels before normalisation);
    removed: [N, H, W] bool (a removed pixel loses all channels). Kept pixels are returned
    unchanged bit for bit. `noise_std` (ROAD: 0.01, absolute) adds N(0, noise_std^2) to every
    imputed value; the noise is keyed by (`seed`, `keys[n]`) per image when int `keys` are given
    (then independent of batching), else by `seed` over the whole batch; `noise` (standard normal
    [N, H, W, C], `keyed_noise`'s), when given, takes the place of those draws, so a caller that
    imputes one image several times draws its noise once. The solve stops when
    every image's and channel's relative residual is at most `tol`, or after `max_iters`.
    With `return_info`, also returns {"iterations", "residual", "no_kept_pixel"} (the number of
    images without a kept pixel, filled with `fallback` + noise): Python numbers when run
    eagerly, tensors while a function traces.
    """
    images = tf.convert_to_tensor(images)
    if not images.dtype.is_floating:
        images = tf.cast(images, tf.float32)
    removed = tf.convert_to_tensor(removed, tf.bool)
    if images.shape.rank != 4 or removed.shape.rank != 3 or \
            images.shape[:3] != removed.shape[:3]:
        raise ValueError(f"images must be [N, H, W, C] and removed [N, H, W]; got "
                         f"{images.shape} and {removed.shape}")
    dtype = images.dtype
    u, iterations, residual = solve(images, removed, tf.constant(tol, dtype),
                                       tf.constant(max_iters))
    r = tf.cast(removed, dtype)[..., None]
    no_kept = tf.reduce_all(removed, axis=[1, 2])
    fill = tf.broadcast_to(tf.convert_to_tensor(fallback, dtype)[: images.shape[-1]],
                           tf.shape(images))
    u = tf.where(no_kept[:, None, None, None], fill, u)
    if noise_std:
        if noise is None:
            noise = keyed_noise(tf.shape(images), dtype, seed, keys)
        u = u + noise_std * noise
    result = tf.where(r > 0, u, images)
    if return_info:
        info = {"iterations": iterations, "residual": residual,
                "no_kept_pixel": tf.reduce_sum(tf.cast(no_kept, tf.int32))}
        if tf.executing_eagerly():
            info = {name: value.numpy().item() for name, value in info.items()}
        return result, info
    return result


def keyed_noise(shape: Any, dtype: tf.DType, seed: int, keys: Optional[tf.Tensor]) -> tf.Tensor:
    """Standard normal draws of `shape` [N, H, W, C]: keyed by (`seed`, `keys[n]`) per image,
    the same values whatever the batch, or by `seed` over the whole batch when `keys` is None
    (`noisy_linear_impute`'s noise before scaling)."""
    if keys is None:
        return tf.random.stateless_normal(shape, [seed, 0], dtype=dtype)
    keys = tf.cast(tf.convert_to_tensor(keys), tf.int64)
    seeds = tf.stack([tf.fill(tf.shape(keys), tf.cast(seed, tf.int64)), keys], axis=-1)
    return tf.map_fn(lambda pair: tf.random.stateless_normal(shape[1:], pair, dtype=dtype),
                     seeds, fn_output_signature=dtype)


def sparse_direct_impute(image: np.ndarray, removed: np.ndarray) -> np.ndarray:
    """ROAD's imputation of one image (noise-free) by a direct sparse solve (scipy), float64.

    image [H, W, C], removed [H, W] bool. The reference for the batched solver.
    """
    from scipy import sparse
    from scipy.sparse import linalg

    image = np.asarray(image, np.float64)
    removed = np.asarray(removed, bool)
    height, width = removed.shape
    unknowns = np.flatnonzero(removed)
    if unknowns.size == 0:
        return image.copy()
    index = -np.ones(height * width, np.int64)
    index[unknowns] = np.arange(unknowns.size)
    rows, cols, values = [], [], []
    rhs = np.zeros((unknowns.size, image.shape[-1]))
    for position in unknowns:
        row, col = divmod(int(position), width)
        diagonal = 0.0
        for dr in (-1, 0, 1):
            for dc in (-1, 0, 1):
                weight = STENCIL[dr + 1, dc + 1]
                nr, nc = row + dr, col + dc
                if weight == 0 or not (0 <= nr < height and 0 <= nc < width):
                    continue
                diagonal += weight
                neighbour = nr * width + nc
                if removed[nr, nc]:
                    rows.append(index[position])
                    cols.append(index[neighbour])
                    values.append(-weight)
                else:
                    rhs[index[position]] += weight * image[nr, nc]
        rows.append(index[position])
        cols.append(index[position])
        values.append(diagonal)
    matrix = sparse.csc_matrix((values, (rows, cols)), shape=(unknowns.size,) * 2)
    solution = linalg.spsolve(matrix, rhs)
    result = image.copy().reshape(-1, image.shape[-1])
    result[unknowns] = np.asarray(solution).reshape(unknowns.size, -1)
    return result.reshape(image.shape)
