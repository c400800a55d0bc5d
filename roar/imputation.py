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

`sparse_direct_impute` assembles the same system with scipy and solves it directly, one image at
a time (ROAD's own method): the reference for tests and the benchmark.
"""
import numpy as np
import tensorflow as tf

from models.preprocessing import IMAGENET_MEAN

EDGE, DIAGONAL = 1.0 / 6.0, 1.0 / 12.0
STENCIL = np.array([[DIAGONAL, EDGE, DIAGONAL], [EDGE, 0.0, EDGE], [DIAGONAL, EDGE, DIAGONAL]])


def _conv(values, kernel):
    """Per-channel 3x3 convolution with zero padding: values [N, H, W, C]. A depthwise
    convolution (the same stencil for every channel): about 10x faster on the CPU than one
    single-channel convolution of every plane, which the solver's loop runs once per
    iteration."""
    stencil = tf.tile(kernel[:, :, None, None], [1, 1, tf.shape(values)[-1], 1])
    return tf.nn.depthwise_conv2d(values, stencil, [1, 1, 1, 1], "SAME")


# Restriction weights (summing to 4) of the multigrid preconditioner; its prolongation is the
# transpose, bilinear interpolation.
FULL_WEIGHTING = np.outer([1.0, 2.0, 1.0], [1.0, 2.0, 1.0]) / 4.0
JACOBI_WEIGHT = 2.0 / 3.0
# A coarse pixel is unknown when the restriction sees only unknown fine pixels (its weights sum
# to 4; one known corner leaves 3.75).
ALL_UNKNOWN = FULL_WEIGHTING.sum() - 0.125
COARSEST_SIDE = 8
COARSEST_SWEEPS = 8


def _depthwise(kernel, channels):
    return tf.tile(kernel[:, :, None, None], [1, 1, channels, 1])


def _restrict(values, weights):
    return tf.nn.depthwise_conv2d(values, _depthwise(weights, tf.shape(values)[-1]),
                                  [1, 2, 2, 1], "SAME")


def _prolong(values, weights, shape):
    return tf.nn.depthwise_conv2d_backprop_input(
        shape, _depthwise(weights, tf.shape(values)[-1]), values, [1, 2, 2, 1], "SAME")


def _grids(removed, dtype, kernel, weights):
    """[(r, d)] of the finest grid and of each coarser one (half the side, a coarse pixel
    unknown when its whole restriction support is: scattered holes are solved on the fine
    grid, where their known neighbours pin them, and large holes get the coarse corrections
    they need), down to `COARSEST_SIDE`; a single grid when the size is not static."""
    r = tf.cast(removed, dtype)[..., None]
    grids = [r]
    height, width = removed.shape[1], removed.shape[2]
    while height is not None and width is not None and min(height, width) > COARSEST_SIDE:
        grids.append(tf.cast(_restrict(grids[-1], weights) > ALL_UNKNOWN, dtype))
        height, width = -(-height // 2), -(-width // 2)
    return [(r, _conv(tf.ones_like(r), kernel)) for r in grids]


def _v_cycle(rhs, grids, level, kernel, weights):
    """One V-cycle of the masked system on grid `level` (damped Jacobi before and after, the
    coarse correction from the next grid; sweeps of Jacobi on the coarsest): a symmetric,
    positive definite approximation of its inverse, CG's preconditioner."""
    r, d = grids[level]
    step = JACOBI_WEIGHT * r / d

    def apply(u):
        return r * (d * u - _conv(u, kernel))

    u = step * rhs
    if level == len(grids) - 1:
        for _ in range(COARSEST_SWEEPS - 1):
            u = u + step * (rhs - apply(u))
        return u
    coarse_r = grids[level + 1][0]
    coarse = _v_cycle(coarse_r * _restrict(rhs - apply(u), weights), grids, level + 1, kernel,
                      weights)
    u = u + r * _prolong(coarse_r * coarse, weights, tf.shape(rhs))
    return u + step * (rhs - apply(u))


def _solve(images, removed, tol, max_iters):
    """Multigrid-preconditioned CG for all images and channels on the removed pixels; returns
    (u, iterations, max relative residual). The iterates stay zero outside the removed pixels,
    so the operator needs no mask on its input; each (image, channel) carries its own squared
    residual norm, and converged pairs are frozen (alpha 0), so an image's result does not
    depend on how long its batch mates need."""
    dtype = images.dtype
    kernel = tf.constant(STENCIL, dtype)
    weights = tf.constant(FULL_WEIGHTING, dtype)
    grids = _grids(removed, dtype, kernel, weights)
    r, d = grids[0]

    def apply(u):  # u is zero outside the removed pixels
        return r * (d * u - _conv(u, kernel))

    def precondition(residual):
        return _v_cycle(residual, grids, 0, kernel, weights)

    def dot(a, b):
        return tf.reduce_sum(a * b, axis=[1, 2], keepdims=True)

    b = r * _conv((1.0 - r) * images, kernel)
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


_solve_traced = tf.function(_solve, reduce_retracing=True)


def noisy_linear_impute(images, removed, noise_std=0.0, seed=0, keys=None, tol=1e-5,
                        max_iters=2000, fallback=IMAGENET_MEAN, return_info=False):
    """ROAD's noisy linear imputation of the `removed` pixels of `images`.

    images: [N, H, W, C] float pixels (ROAD works on [0, 1] pixels before normalisation);
    removed: [N, H, W] bool (a removed pixel loses all channels). Kept pixels are returned
    unchanged bit for bit. `noise_std` (ROAD: 0.01, absolute) adds N(0, noise_std^2) to every
    imputed value; the noise is keyed by (`seed`, `keys[n]`) per image when int `keys` are given
    (then independent of batching), else by `seed` over the whole batch. The solve stops when
    every image's and channel's relative residual is at most `tol`, or after `max_iters`.
    With `return_info`, also returns {"iterations", "residual", "no_kept_pixel"} (the number of
    images without a kept pixel, filled with `fallback` + noise).
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
    u, iterations, residual = _solve_traced(images, removed, tf.constant(tol, dtype),
                                       tf.constant(max_iters))
    r = tf.cast(removed, dtype)[..., None]
    no_kept = tf.reduce_all(removed, axis=[1, 2])
    fill = tf.broadcast_to(tf.constant(fallback, dtype)[: images.shape[-1]], tf.shape(images))
    u = tf.where(no_kept[:, None, None, None], fill, u)
    if noise_std:
        u = u + noise_std * _noise(tf.shape(images), dtype, seed, keys)
    result = tf.where(r > 0, u, images)
    if return_info:
        return result, {"iterations": int(iterations), "residual": float(residual),
                        "no_kept_pixel": int(tf.reduce_sum(tf.cast(no_kept, tf.int32)))}
    return result


def _noise(shape, dtype, seed, keys):
    if keys is None:
        return tf.random.stateless_normal(shape, [seed, 0], dtype=dtype)
    keys = tf.cast(tf.convert_to_tensor(keys), tf.int64)
    seeds = tf.stack([tf.fill(tf.shape(keys), tf.cast(seed, tf.int64)), keys], axis=-1)
    return tf.map_fn(lambda pair: tf.random.stateless_normal(shape[1:], pair, dtype=dtype),
                     seeds, fn_output_signature=dtype)


def sparse_direct_impute(image, removed):
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
