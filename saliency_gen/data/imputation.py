"""ROAD's noisy linear imputation (docs/roar.md, "Masks", ROAD imputation) as batched TensorFlow.

Every removed pixel becomes the weighted mean of its 8 in-image neighbours (1/6 for edge
neighbours, 1/12 for diagonals), removed neighbours being unknowns themselves: one sparse linear
system per image, the same matrix for every channel. ROAD solves it with scipy per image; here
a matrix-free conjugate gradient solves all images and channels at once in one traced loop,
preconditioned by one multigrid V-cycle (damped Jacobi on each grid, full-weighting
restriction, bilinear prolongation, the same stencil on grids of half, a quarter, ... of the
side): a large hole's smooth part, which Jacobi-preconditioned CG needs hundreds of iterations
to find at 224 px, comes from the coarse grids (docs/roar.md, "Masks"):

    A u = r * (d * u - conv(r * u, K)),   b = r * conv(m * x, K),   x' = m * x + r * (u + s * e)

with m the kept mask, r = 1 - m, K the stencil, d = conv(1, K) (1 inside, 2/3 on edges, 5/12 at
corners: ROAD's border renormalisation). A is symmetric positive definite on the removed pixels
whenever the image keeps at least one pixel. An image that keeps none has no solution: it is
filled with `fallback` (default: ImageNet's mean colour) plus the noise and counted.

The solve is compiled by XLA (`jit_compile`): its loop is some hundred element-wise passes over
the images per iteration, which XLA fuses into a few: 4.6-4.8x faster at 224 px on a 2-core
AMD EPYC Zen 5 (scripts/bench_roar.py). XLA compiles once per batch shape (the
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


def _smooth(values, axis: int):
    """The [1, 2, 1] filter along `axis` (1 or 2), zero padding."""
    padded = _pad_axis(values, axis, 1, 1)
    return (_take(padded, axis, 0, -2) + 2.0 * _take(padded, axis, 1, -1)
            + _take(padded, axis, 2, None))


def _conv(values):
    """The stencil applied to every channel of `values` [N, H, W, C], zero padding. The stencil
    is (w w^T - 4 delta) / 12 with w = [1, 2, 1], so it runs as two shifted-slice passes, about
    2x faster on the CPU than a depthwise convolution (and 4x faster than a single-channel
    convolution of every plane); the solver's loop runs it once per iteration and per grid."""
    return (_smooth(_smooth(values, 1), 2) - 4.0 * values) / 12.0


# Restriction (full weighting: w w^T / 4, stride 2, the padding of a "SAME" convolution) and its
# transpose, bilinear prolongation, both separable: along each axis the weights are w / 2.
ALL_UNKNOWN = 4.0 - 0.125  # a coarse pixel is unknown when its whole restriction support is
COARSEST_SIDE = 8
COARSEST_SWEEPS = 8
JACOBI_WEIGHT = 2.0 / 3.0


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


def _grids(removed, dtype):
    """[(r, d)] of the finest grid and of each coarser one (half the side, a coarse pixel
    unknown when its whole restriction support is: scattered holes are solved on the fine
    grid, where their known neighbours pin them, and large holes get the coarse corrections
    they need), down to `COARSEST_SIDE`; a single grid when the size is not static."""
    r = tf.cast(removed, dtype)[..., None]
    grids = [r]
    height, width = removed.shape[1], removed.shape[2]
    while height is not None and width is not None and min(height, width) > COARSEST_SIDE:
        grids.append(tf.cast(_restrict(grids[-1]) > ALL_UNKNOWN, dtype))
        height, width = -(-height // 2), -(-width // 2)
    return [(r, _conv(tf.ones_like(r))) for r in grids]


def _v_cycle(rhs, grids, level):
    """One V-cycle of the masked system on grid `level` (damped Jacobi before and after, the
    coarse correction from the next grid; sweeps of Jacobi on the coarsest): a symmetric,
    positive definite approximation of its inverse, CG's preconditioner."""
    r, d = grids[level]
    step = JACOBI_WEIGHT * r / d

    def apply(u):
        return r * (d * u - _conv(u))

    u = step * rhs
    if level == len(grids) - 1:
        for _ in range(COARSEST_SWEEPS - 1):
            u = u + step * (rhs - apply(u))
        return u
    coarse_r = grids[level + 1][0]
    coarse = _v_cycle(coarse_r * _restrict(rhs - apply(u)), grids, level + 1)
    u = u + r * _prolong(coarse_r * coarse, rhs.shape)
    return u + step * (rhs - apply(u))


def _solve(images, removed, tol, max_iters):
    """Multigrid-preconditioned CG for all images and channels on the removed pixels; returns
    (u, iterations, max relative residual). The iterates stay zero outside the removed pixels,
    so the operator needs no mask on its input; each (image, channel) carries its own squared
    residual norm, and converged pairs are frozen (alpha 0), so an image's result does not
    depend on how long its batch mates need."""
    dtype = images.dtype
    grids = _grids(removed, dtype)
    r, d = grids[0]

    def apply(u):  # u is zero outside the removed pixels
        return r * (d * u - _conv(u))

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
SOLVER = "multigrid-cg, xla, 1"

# The compiled solve: (images, removed, tol, max_iters) -> (u, iterations, max relative
# residual); `solve.python_function` is the same algorithm uncompiled (a benchmark's peer).
solve = tf.function(_solve, jit_compile=True, reduce_retracing=True)


def noisy_linear_impute(images: tf.Tensor, removed: tf.Tensor, noise_std: float = 0.0,
                        seed: int = 0, keys: Optional[tf.Tensor] = None, tol: float = 1e-5,
                        max_iters: int = 2000, fallback: Sequence[float] = IMAGENET_MEAN,
                        return_info: bool = False) -> Any:
    """ROAD's noisy linear imputation of the `removed` pixels of `images`.

    images: [N, H, W, C] float pixels (ROAD works on [0, 1] pixels before normalisation);
    removed: [N, H, W] bool (a removed pixel loses all channels). Kept pixels are returned
    unchanged bit for bit. `noise_std` (ROAD: 0.01, absolute) adds N(0, noise_std^2) to every
    imputed value; the noise is keyed by (`seed`, `keys[n]`) per image when int `keys` are given
    (then independent of batching), else by `seed` over the whole batch. The solve stops when
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
        u = u + noise_std * _noise(tf.shape(images), dtype, seed, keys)
    result = tf.where(r > 0, u, images)
    if return_info:
        info = {"iterations": iterations, "residual": residual,
                "no_kept_pixel": tf.reduce_sum(tf.cast(no_kept, tf.int32))}
        if tf.executing_eagerly():
            info = {name: value.numpy().item() for name, value in info.items()}
        return result, info
    return result


def _noise(shape, dtype, seed, keys):
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
