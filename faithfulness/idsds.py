"""IDSDS protocols (Hesse et al. 2024; docs/faithfulness.md, "IDSDS"), batched.

* `single_deletion`: each of the G x G grid cells deleted on its own (one work item per image and
  cell), Spearman correlation between the cell sums of the attribution and the drops of the
  ground-truth class's logit; images with a non-finite correlation are excluded and counted.
* `incremental_deletion`: S nested deletions of the least (ascending) or most (descending)
  attributed pixels, softmax probability of the ground-truth class, mean over steps and images.
* `random_cell_deletion`: the in-domain fine-tuning augmentation (one random cell deleted with
  probability 1/2), as a stateless TF op keyed on (seed, example id).

Baselines: "zeros" (0 in model-input space), "blur" (IDSDS's Gaussian, kernel 51, sigma 41) and
"random" (U(-1, 1): fresh for every deleted cell in single deletion, one per image in incremental
deletion, keyed on the seed and the image id so batching never changes a draw).
"""
import logging
from typing import Any, Callable, Optional

import numpy as np
import tensorflow as tf
from numpy.typing import ArrayLike

from faithfulness import inputs, ranking, resample, stats, substrates
from faithfulness import scorer as scoring
from faithfulness.protocols import BASELINES, ORDERS
from models.foundation.errors import ShapeError, UserError

log = logging.getLogger(__name__)


def _check_baseline(baseline):
    if baseline not in BASELINES:
        raise UserError(f"unknown baseline {baseline!r}; use one of {', '.join(BASELINES)}")


def _labels(labels, count, scorer):
    labels = np.asarray(labels).reshape(-1)
    if labels.shape != (count,):
        raise ShapeError(f"there are {labels.size} labels for {count} images")
    return scorer.check_classes(labels, count)


def _ids(ids, count):
    ids = np.arange(count, dtype=np.int64) if ids is None else np.asarray(ids, np.int64)
    if ids.shape != (count,):
        raise ShapeError(f"ids have shape {ids.shape}; expected [{count}]")
    return ids


def _prepared_scorer(model, output_activation, batch_size, images):
    """`model` itself if it is a `scoring.Scorer` (its traced functions are reused), else a new
    scorer; probed on one image."""
    scorer = model if isinstance(model, scoring.Scorer) else scoring.Scorer(
        model, output_activation, batch_size)
    scorer.probe(images)
    return scorer


def cell_size(height: int, width: int, grid: int) -> int:
    """Pixels per cell side of a G x G grid; IDSDS requires square cells."""
    if grid < 1:
        raise UserError(f"--grid_rows_and_cols must be at least 1; got {grid}")
    if height // grid != width // grid or height // grid < 1:
        raise UserError(f"a {grid} x {grid} grid on {height}x{width} images gives cells of "
                        f"{height // grid}x{width // grid} pixels; IDSDS needs square cells")
    return height // grid


def cell_sums(attributions: np.ndarray, grid: int) -> np.ndarray:
    """float64 [N, G * G]: the signed sum of each image's attribution over each grid cell
    (row-major), pixels beyond the last full cell ignored."""
    count, height, width = attributions.shape
    side = cell_size(height, width, grid)
    cropped = attributions[:, :grid * side, :grid * side]
    return cropped.reshape(count, grid, side, grid, side).sum(axis=(2, 4)).reshape(count, -1)


def single_deletion(model: Any, images: tf.Tensor, labels: Optional[ArrayLike] = None,
                    attributions: Optional[np.ndarray] = None, *, grid: int = 4,
                    baseline: str = "zeros", attribution_transform: str = "raw",
                    output_activation: Optional[str] = None, batch_size: int = 64,
                    seed: int = 0, ids: Optional[ArrayLike] = None, blur_kernel: int = 51,
                    blur_sigma: float = 41.0) -> dict:
    """IDSDS single deletion: {"sds": mean rho over valid images, "rho": [N], "n_excluded",
    "n_images", "drops": [N, G*G], "cell_attributions": [N, G*G]}.

    `model` returns logits (the reference's setting) unless `output_activation="softmax"`;
    `labels` are ground-truth classes; `attributions` are `[N, H, W]` or `[N, H, W, C]` (summed
    over channels after `attribution_transform`). `images` may instead be a `tf.data.Dataset` of
    (images, labels, attributions) batches; image ids then count across batches."""
    options: dict[str, Any] = dict(
        grid=grid, baseline=baseline, attribution_transform=attribution_transform,
        output_activation=output_activation, batch_size=batch_size, seed=seed,
        blur_kernel=blur_kernel, blur_sigma=blur_sigma)
    if isinstance(images, tf.data.Dataset):
        scorer = model if isinstance(model, scoring.Scorer) else scoring.Scorer(
            model, output_activation, batch_size)
        parts, seen = [], 0
        for batch_images, batch_labels, batch_maps in images:  # batches of many images
            count = int(batch_images.shape[0])
            parts.append(single_deletion(scorer, batch_images, batch_labels, batch_maps,
                                         ids=np.arange(seen, seen + count), **options))
            seen += count
        if not parts:
            raise UserError("the dataset holds no batches")
        rho = np.concatenate([part["rho"] for part in parts])
        sds, excluded = stats.aggregate(rho, "omit", "rank correlation")
        return {"sds": sds, "rho": rho, "n_excluded": excluded, "n_images": seen,
                "drops": np.concatenate([part["drops"] for part in parts]),
                "cell_attributions": np.concatenate([p["cell_attributions"] for p in parts])}
    if labels is None or attributions is None:
        raise UserError("pass labels and attributions (or a dataset of all three)")
    _check_baseline(baseline)
    images = inputs.images(images, "images")
    count, height, width, _ = images.shape
    values = inputs.attributions(attributions, count, attribution_transform)
    inputs.same_size(values, images)
    cell_size(height, width, grid)
    scorer = _prepared_scorer(model, output_activation, batch_size, images)
    labels = _labels(labels, count, scorer)
    ids = _ids(ids, count)
    end = (idsds_baseline_images(images, "blur", blur_kernel, blur_sigma) if baseline == "blur"
           else tf.zeros([1, *images.shape[1:]]))  # zeros (or noise drawn per item): shared
    cells = grid * grid
    schedule = ranking.bands(np.arange(cells + 1))  # step t deletes cell t - 1 alone
    cell_ranks = np.broadcast_to(np.arange(cells, dtype=np.int32), (count, cells))
    curves = scorer.ranked_curves(
        images, end, cell_ranks, schedule, labels, resample.grid_cell_indices(height, grid),
        resample.grid_cell_indices(width, grid), (grid, grid),
        end_noise_seed=seed if baseline == "random" else None, ids=ids).astype(np.float64)
    drops = curves[:, :1] - curves[:, 1:]
    sums = cell_sums(values, grid)
    rho = stats.spearman(sums, drops)
    sds, excluded = stats.aggregate(rho, "omit", "rank correlation")
    return {"sds": sds, "rho": rho, "n_excluded": excluded, "n_images": int(count),
            "drops": drops, "cell_attributions": sums}


def idsds_baseline_images(images: tf.Tensor, baseline: str, blur_kernel: int = 51,
                          blur_sigma: float = 41.0, seed: int = 0, ids: Optional[tf.Tensor] = None,
                          salt: int = 0x1D5D5) -> tf.Tensor:
    """The per-image baseline of incremental deletion and of fine-tuning: zeros (one image,
    shared by all, see the scorer), the blur, or U(-1, 1) noise keyed on (seed, salt, id). Works
    inside a tf.data map (ids may be a tensor)."""
    _check_baseline(baseline)
    if baseline == "zeros":
        return tf.zeros([1, *images.shape[1:]])
    if baseline == "blur":
        return substrates.idsds_blur(images, blur_kernel, blur_sigma)
    ids = tf.range(tf.shape(images)[0], dtype=tf.int64) if ids is None else ids
    return substrates.uniform_noise(substrates.noise_keys(seed, ids, salt), images.shape[1:])


def _warn_if_probabilities(scorer, images):
    outputs = scorer.predict(images[:8])
    if (outputs >= 0).all() and np.allclose(outputs.sum(axis=1), 1.0, atol=1e-4):
        log.warning("the model output already sums to 1 per image; incremental deletion "
                    "applies a softmax on top of it (as the reference does)")


def incremental_deletion(model: Any, images: tf.Tensor, labels: ArrayLike,
                         attributions: Optional[np.ndarray] = None, *,
                         explain_fn: Optional[Callable] = None, steps: int = 32,
                         order: str = "ascending", baseline: str = "zeros",
                         blur_kernel: int = 51, blur_sigma: float = 41.0,
                         update_attribution: bool = False, attribution_transform: str = "raw",
                         batch_size: int = 64, seed: int = 0,
                         ids: Optional[ArrayLike] = None) -> dict:
    """IDSDS incremental deletion: {"score": mean softmax probability of the label over the S
    steps and all images, "curves": [N, S], "order", "steps"}.

    Step k deletes the first int(H W k / S) pixels of the order (ascending: least attributed
    first, higher is better; descending: most attributed first, lower is better). With
    `update_attribution=True`, `explain_fn(images, labels)` re-explains the current image before
    every step and the already deleted pixels stay first (one explanation per step)."""
    _check_baseline(baseline)
    if order not in ORDERS:
        raise UserError(f"unknown --id_order {order!r}; use one of {', '.join(ORDERS)}")
    images = inputs.images(images, "images")
    count, height, width, _ = images.shape
    if isinstance(model, scoring.Scorer):
        if model.output_activation != "softmax":
            raise UserError("incremental deletion scores softmax probabilities; pass a Scorer "
                            "with output_activation='softmax' or the model itself")
    else:
        _warn_if_probabilities(scoring.Scorer(model, None, batch_size), images)
    scorer = _prepared_scorer(model, "softmax", batch_size, images)
    labels = _labels(labels, count, scorer)
    ids = _ids(ids, count)
    end = idsds_baseline_images(images, baseline, blur_kernel, blur_sigma, seed, ids)
    thresholds = ranking.idsds_thresholds(height * width, steps)
    rows, cols = np.arange(height), np.arange(width)
    descending = order == "descending"
    if update_attribution:
        if explain_fn is None:
            raise UserError("update_attribution needs explain_fn(images, labels)")
        curves = _updated_curves(scorer, images, end, labels, thresholds, explain_fn,
                                 attribution_transform, descending)
    else:
        if attributions is None:
            if explain_fn is None:
                raise UserError("pass attributions or explain_fn")
            attributions = explain_fn(images.numpy(), labels)
        values = inputs.attributions(attributions, count, attribution_transform)
        inputs.same_size(values, images)
        curves = scorer.ranked_curves(images, end, ranking.ranks(values, descending),
                                      ranking.cumulative(thresholds), labels, rows, cols,
                                      (height, width), ids=ids)
    curves = np.asarray(curves, np.float64)
    return {"score": float(curves.mean()), "curves": curves, "order": order, "steps": steps}


def _updated_curves(scorer, images, end, labels, thresholds, explain_fn, transform, descending):
    """Incremental deletion re-explaining the current images before each step. The steps are
    sequential by definition (each explanation needs the previous deletion), so this loops over
    the S steps; every step is batched over all images."""
    count, height, width, _ = images.shape
    deleted = np.zeros((count, height * width), bool)
    current = images
    scores = []
    for needed in thresholds:
        values = inputs.attributions(explain_fn(current.numpy(), labels), count, transform)
        values = values.reshape(count, -1).copy()  # never write into the caller's array
        values[deleted] = np.inf if descending else -np.inf
        deleted = ranking.ranks(values, descending) < needed
        mask = tf.constant(deleted.reshape(count, height, width, 1), tf.float32)
        current = images * (1.0 - mask) + end * mask
        scores.append(np.take_along_axis(scorer.predict(current), labels[:, None].astype(int),
                                         axis=1)[:, 0])
    return np.stack(scores, axis=1)


def random_cell_deletion(images: tf.Tensor, *, grid: int = 4, baseline: str = "zeros",
                         p_delete: float = 0.5, seed: int = 0, ids: Optional[tf.Tensor] = None,
                         blur_kernel: int = 51, blur_sigma: float = 41.0) -> tf.Tensor:
    """The IDSDS fine-tuning augmentation as a TF op: each image of the NHWC batch, with
    probability `p_delete`, has exactly one uniformly drawn cell of the G x G grid replaced by
    the baseline. Draws are keyed on (seed, id), so they do not depend on the batch; pass a
    different seed per epoch for fresh draws."""
    _check_baseline(baseline)
    images = tf.convert_to_tensor(images, tf.float32)
    height, width = int(images.shape[1]), int(images.shape[2])
    cell_size(height, width, grid)
    count = tf.shape(images)[0]
    ids = tf.range(count, dtype=tf.int64) if ids is None else tf.cast(ids, tf.int64)
    keys = substrates.noise_keys(seed, ids, salt=0xCE11)
    draws = tf.map_fn(lambda key: tf.random.stateless_uniform([2], key), keys,
                      fn_output_signature=tf.float32)
    delete = draws[:, 0] < p_delete
    cell = tf.minimum(tf.cast(draws[:, 1] * grid * grid, tf.int32), grid * grid - 1)
    rows = tf.constant(resample.grid_cell_indices(height, grid))
    cols = tf.constant(resample.grid_cell_indices(width, grid))
    inside = (rows[:, None] < grid) & (cols[None, :] < grid)
    cell_map = tf.where(inside, rows[:, None] * grid + cols[None, :], -1)
    mask = (cell_map[None] == cell[:, None, None]) & delete[:, None, None]
    replacement = idsds_baseline_images(images, baseline, blur_kernel, blur_sigma, seed, ids,
                                        salt=0xBA5E)
    return tf.where(mask[..., None], replacement, images)
