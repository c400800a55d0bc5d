"""Quantus's faithfulness measures that remove regions (docs/measures.md, "Faithfulness"):
superpixels (irof) or a share of the pixels imputed from their neighbours (road).

- irof (Rieger & Hansen 2020): the image's SLIC superpixels (scikit-image's `slic` with
  Quantus's settings, on the image as the model takes it) are replaced by the baseline one
  after another, highest mean attribution first, cumulatively; the area over the curve of the
  output relative to the clean output, S - area(y_k / y) for S segments, the curve padded with
  zeros to the call's largest S as Quantus does (quantus/metrics/faithfulness/irof.py,
  evaluate_batch). Quantus's default baseline "mean" takes the mean of the whole batch as it
  stands after the previous removals (`baseline_replacement_by_mask` without `batched`), so an
  image's value depends on its batch: here "mean" is the image's own mean. Quantus 0.6 runs
  only on one-channel images (its mask has one channel and the perturbation asserts the
  image's shape). Higher is better.
- road (Rong et al. 2022): for each percentage p of `percentages`, whether the model still
  predicts the explained class when the int(H W p / 100) pixels of highest attribution (the
  map summed over its channels) are imputed by ROAD's noisy linear imputation
  (`saliency_gen.data.imputation`, the solver ROAD's binaries use) with N(0, `noise`^2) added,
  keyed by (seed, image id, p); the curve [N, P] of 0 / 1 (Quantus returns its mean over the
  images per percentage: road.py, custom_postprocess), or its area with
  `return_auc_per_sample`. Quantus 0.6 ranks the map broadcast over the channels but imputes
  pixels, so its indices run past the image for colour images; here pixels are ranked. Lower
  is better (a faithful map's removals change the prediction sooner).
"""
from typing import Any, Sequence

import numpy as np
import skimage.segmentation
import tensorflow as tf

from faithfulness.measures import perturbation
from faithfulness.measures.arguments import image_ids, prepared
from models.formats.adapter import adapt
from models.foundation import cluster, executor, ordering, workload
from models.foundation.errors import UserError
from models.foundation.metric_spec import MetricSpec
from saliency_gen.data import imputation

SPECS = (
    MetricSpec("irof", True, about="area over the output's curve as superpixels are removed, "
                                   "most attributed first"),
    MetricSpec("road", False, about="the prediction kept as the most attributed pixels are "
                                    "imputed (area over the percentages)"),
)
ROAD_PERCENTAGES = tuple(range(1, 100, 2))
ROAD_SALT = 0x70AD  # road's imputation noise, apart from the other draws of a seed


def superpixels(x: np.ndarray, segmentation_method: str = "slic") -> np.ndarray:
    """int [N, H, W]: each image's segments, numbered from 0 (scikit-image, one image at a
    time: a segmentation is no batched op; the images are shared among threads, one a usable
    core, as scikit-image's segmentations release the GIL: 1.9x on 2 cores)."""
    if segmentation_method not in ("slic", "felzenszwalb"):
        raise UserError(f"segmentation_method must be 'slic' or 'felzenszwalb'; got "
                        f"{segmentation_method!r}")

    def segmented(image: np.ndarray) -> np.ndarray:
        if segmentation_method == "slic":
            return skimage.segmentation.slic(image.astype(np.float64), start_label=0)
        return skimage.segmentation.felzenszwalb(image.astype(np.float64))
    return np.stack(cluster.map_on_cores(segmented, x))


def irof(model: Any, x_batch: Any, y_batch: Any, a_batch: Any, s_batch: Any = None, *,
         segmentation_method: str = "slic", abs: bool = False,  # noqa: A002
         normalise: bool = True, perturb_baseline: Any = "mean", softmax: bool = True,
         batch_size: int = 64) -> np.ndarray:
    """[N] the area over the relative output's curve as superpixels are replaced, most
    attributed (by mean) first."""
    found = prepared(x_batch, a_batch, s_batch, abs=abs, normalise=normalise)
    regions = superpixels(found.x, segmentation_method).reshape(len(found.x), -1)
    counts = regions.max(axis=1) + 1
    largest = int(counts.max())
    totals, pixels = perturbation.region_sums(perturbation.broadcast_features(found), regions,
                                              largest)
    means = totals / np.maximum(pixels * found.x.shape[3], 1)
    means = np.where(np.arange(largest)[None] < counts[:, None], means, -np.inf)
    ranks = perturbation.region_ranks(found, regions, means)
    bands = np.stack([np.zeros(largest + 1, np.int64), np.arange(largest + 1)], axis=1)
    scores = perturbation.scores_of_bands(
        model, found, y_batch, ranks, bands, perturb_baseline,
        softmax=softmax, batch_size=batch_size)
    with np.errstate(divide="ignore", invalid="ignore"):
        curves = scores[:, 1:] / scores[:, :1]
    curves = np.where(np.arange(largest)[None] < counts[:, None], curves, 0.0)
    return counts - perturbation.auc_per_sample(curves)


def road_hits(model: Any, x: np.ndarray, ranks: np.ndarray, cuts: np.ndarray,
              classes: np.ndarray, keys: np.ndarray, *, noise: float, seed: int = 0,
              batch_size: int = 64) -> np.ndarray:
    """float64 [N, P]: 1 where the model predicts `classes` once the pixels ranked below each
    cut ([P]) of `ranks` ([N, H, W]) are imputed with noise keyed by (`seed`, `keys` [N,
    P]). The N x P items stream in chunks of `executor.compiled_chunk_size`: XLA compiles the
    solver per chunk size."""
    mixed = int(seed) * 1_000_003 + ROAD_SALT
    chunk = executor.compiled_chunk_size(len(x) * len(cuts), batch_size)
    adapter = adapt(model)
    height, width, channels = (int(size) for size in x.shape[1:])
    signature = [tf.TensorSpec([None, height, width, channels], tf.float32),
                 tf.TensorSpec([None, height, width], tf.int32), tf.TensorSpec([None], tf.int32),
                 tf.TensorSpec([None], tf.int32), tf.TensorSpec([None], tf.int64)]

    def build():
        # autograph off: the executor and the solver build their loops explicitly
        @tf.function(input_signature=signature, autograph=False)
        def run(x, ranks, cuts, classes, keys):
            steps = tf.shape(cuts)[0]

            def compute(items):
                image = items // steps
                removed = tf.gather(ranks, image) < tf.gather(cuts, items % steps)[:, None, None]
                imputed, info = imputation.noisy_linear_impute(
                    tf.gather(x, image), removed, noise, seed=mixed, keys=tf.gather(keys, items),
                    fallback=(0.0,) * channels, return_info=True)
                outputs = tf.cast(adapter.logits(imputed), tf.float32)
                predicted = tf.argmax(outputs, axis=1, output_type=tf.int32)
                hits = tf.cast(tf.equal(predicted, tf.gather(classes, image)), tf.float32)
                # the chunk's solver iterations ride along with each of its items
                solved = tf.fill(tf.shape(hits), tf.cast(info["iterations"], tf.float32))
                return tf.stack([hits, solved], axis=1)
            return executor.collect(tf.shape(x)[0] * steps, chunk, compute, [2])
        return run

    run = adapter.traced(("measure road", height, width, channels, float(noise), mixed,
                          chunk), build)
    workload.count("forward", len(x) * len(cuts))
    values = run(tf.constant(x, tf.float32), tf.constant(ranks, tf.int32),
                 tf.constant(cuts, tf.int32), tf.constant(classes, tf.int32),
                 tf.constant(keys.ravel(), tf.int64)).numpy()
    workload.count("setup", len(x) * len(cuts))  # a solve per image and cut
    workload.count("solve", int(values[:, 1].sum()))  # images x solver iterations
    return values[:, 0].reshape(len(x), len(cuts)).astype(np.float64)


def road(model: Any, x_batch: Any, y_batch: Any, a_batch: Any, s_batch: Any = None, *,
         percentages: Sequence[int] = ROAD_PERCENTAGES, noise: float = 0.01,
         abs: bool = False, normalise: bool = True,  # noqa: A002
         return_auc_per_sample: bool = False, seed: int = 0, ids: Any = None,
         batch_size: int = 64) -> np.ndarray:
    """[N, P] 1 where the prediction is kept with the top p% pixels imputed (or [N], the
    curve's area, with `return_auc_per_sample`)."""
    chosen = np.asarray(percentages, np.float64)
    if chosen.ndim != 1 or not len(chosen) or (chosen < 0).any() or (chosen > 100).any():
        raise UserError(f"percentages must be numbers in [0, 100]; got {percentages}")
    if noise < 0:
        raise UserError(f"noise must be at least 0; got {noise}")
    found = prepared(x_batch, a_batch, s_batch, abs=abs, normalise=normalise)
    height, width = found.x.shape[1:3]
    classes = perturbation.checked_classes(model, found.x, y_batch)
    ranks = ordering.places(found.a.reshape(len(found.x), -1, height * width).sum(axis=1),
                            descending=True)
    cuts = (height * width * chosen / 100).astype(np.int64)  # Quantus's int(a_size p / 100)
    ids = image_ids(ids, len(found.x))
    keys = ids[:, None] * len(cuts) + np.arange(len(cuts))[None]
    curves = road_hits(model, found.x, ranks.reshape(len(found.x), height, width), cuts,
                       classes, keys, noise=noise, seed=seed, batch_size=batch_size)
    return perturbation.auc_per_sample(curves) if return_auc_per_sample else curves
