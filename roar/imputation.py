"""ROAD's noisy linear imputation (docs/roar.md, "Masks", ROAD imputation) as batched TensorFlow.

Every removed pixel becomes the weighted mean of its 8 in-image neighbours (1/6 for edge
neighbours, 1/12 for diagonals), removed neighbours being unknowns themselves: one sparse linear
system per image, the same matrix for every channel. ROAD solves it with scipy per image; here
a matrix-free, Jacobi-preconditioned conjugate gradient solves all images and channels at once
in one traced loop:

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


@tf.function(reduce_retracing=True)
def _solve(images, removed, tol, max_iters):
    """CG for all images and channels; returns (u, iterations, max relative residual)."""
    dtype = images.dtype
    kernel = tf.constant(STENCIL, dtype)
    r = tf.cast(removed, dtype)[..., None]
    m = 1.0 - r
    d = _conv(tf.ones_like(images[..., :1]), kernel)

    def apply(u):
        return r * (d * u - _conv(r * u, kernel))

    def dot(a, b):
        return tf.reduce_sum(a * b, axis=[1, 2], keepdims=True)

    b = r * _conv(m * images, kernel)
    b_norm = tf.sqrt(dot(b, b))
    scale = tf.where(b_norm > 0, b_norm, tf.ones_like(b_norm))
    u = tf.zeros_like(images)
    residual = b
    z = r * residual / d
    p = z
    rz = dot(residual, z)

    def relative(res):
        return tf.sqrt(dot(res, res)) / scale

    def cond(i, u, residual, p, rz):
        return tf.logical_and(i < max_iters, tf.reduce_max(relative(residual)) > tol)

    def body(i, u, residual, p, rz):
        # Converged (image, channel) pairs are frozen, so an image's result does not depend on
        # how long its batch mates need.
        active = relative(residual) > tol
        ap = apply(p)
        pap = dot(p, ap)
        usable = tf.logical_and(active, pap > 0)
        alpha = tf.where(usable, rz / tf.where(usable, pap, tf.ones_like(pap)),
                         tf.zeros_like(pap))
        u = u + alpha * p
        residual = residual - alpha * ap
        z = r * residual / d
        rz_new = dot(residual, z)
        beta = tf.where(rz > 0, rz_new / tf.where(rz > 0, rz, tf.ones_like(rz)),
                        tf.zeros_like(rz))
        p = tf.where(active, z + beta * p, p)
        return i + 1, u, residual, p, tf.where(active, rz_new, rz)

    iterations, u, residual, _, _ = tf.while_loop(
        cond, body, [tf.constant(0), u, residual, p, rz])
    return u, iterations, tf.reduce_max(relative(residual))


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
    u, iterations, residual = _solve(images, removed, tf.constant(tol, dtype),
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
