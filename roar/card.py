"""ROAD (MoRF and LeRF without retraining) as a report-card benchmark (docs/report_card.md,
"Benchmarks").

For each image and fraction p, MoRF imputes the top p of the pixels (ROAD's ranking: the signed
channel sum with the shared jitter; ROAD's noisy linear imputation, noise 0.01) and LeRF imputes
all but the top p, as `roar.road` does on records; the clean model's true-class probability
(softmax) on the imputed image is averaged over the fractions into one value per image: lower is
better for MoRF, higher for LeRF. Every (fraction, image) pair is one work item of the chunked
executor, so the curve costs one traced function whatever the number of fractions. The "oracle"
control ranks the object's pixels first, from its centre outwards (`oracle_maps`, from the
records' object masks).
"""
import numpy as np
import scipy.ndimage
import tensorflow as tf

import saliency_gen
from models import executor
from models.adapter import adapt
from models.card import Benchmark, Metric
from models.preprocessing import input_space
from roar import imputation, masking
from saliency_gen.records import ranking_cut

ORACLE = "oracle"
RATIOS = (0.1, 0.3, 0.5, 0.7, 0.9)
METRICS = (Metric("MoRF", False, about="true-class probability when the most relevant pixels "
                                      "are imputed, averaged over the fractions"),
           Metric("LeRF", True, about="true-class probability when the least relevant pixels "
                                     "are imputed, averaged over the fractions"))


def pixel_ranks(maps, seed: int = 0) -> np.ndarray:
    """int32 [N, H*W]: each pixel's position in ROAD's ranking (0: most relevant); the lower
    index first on ties, as `masking.top_mask`."""
    scores = masking.feature_scores(maps, unit="pixel", squared=False, tie_break="jitter",
                                    seed=seed).numpy()
    order = np.argsort(-scores, axis=1, kind="stable")
    ranks = np.empty_like(order)
    np.put_along_axis(ranks, order, np.arange(order.shape[1])[None], axis=1)
    return ranks.astype(np.int32)


def road_function(loaded, shape, keep_top: bool, *, seed=0, noise=0.01, batch_size=32):
    """A traced function (pixels, labels, ids, ranks, cuts) -> float [len(cuts) * N]: the
    true-class probability of every image with its pixels of rank < cut imputed (rank >= cut
    when `keep_top`), each (cut, image) pair one executor item. Made once per benchmark, so
    every method reuses one trace."""
    n, height, width, _ = shape
    space = input_space(loaded.preprocessing)
    call = adapt(loaded).logits

    @tf.function(reduce_retracing=True)
    def run(pixels, labels, ids, ranks, cuts):
        def compute(items):
            image, setting = items % n, items // n
            cut = tf.gather(cuts, setting)[:, None]
            image_ranks = tf.gather(ranks, image)
            removed = image_ranks >= cut if keep_top else image_ranks < cut
            removed = tf.reshape(removed, [-1, height, width])
            imputed = imputation.noisy_linear_impute(
                tf.gather(pixels, image), removed, noise_std=noise, seed=seed,
                keys=tf.gather(ids, image))
            probabilities = tf.nn.softmax(tf.cast(call(space.from_pixels(imputed)), tf.float32))
            return tf.gather(probabilities, tf.gather(labels, image), batch_dims=1)
        return executor.collect(tf.shape(cuts)[0] * n, batch_size, compute)

    return run


def oracle_maps(masks) -> np.ndarray:
    """[N, H, W, 1]: the signed distance to each object's outline (inside positive), so ROAD
    removes the object from its centre outwards and then its surroundings nearest first: whole
    regions, which imputation cannot restore from their neighbours as it restores scattered
    pixels."""
    masks = np.asarray(masks) > 0.5
    inside = np.stack([scipy.ndimage.distance_transform_edt(m) for m in masks])
    outside = np.stack([scipy.ndimage.distance_transform_edt(~m) for m in masks])
    return (inside - outside).astype(np.float32)[..., None]


def benchmark(loaded, images, labels, ids, masks=None, *, data: dict, ratios=RATIOS,
              seed: int = 0, batch_size: int = 32) -> Benchmark:
    """ROAD MoRF / LeRF of `loaded` on `images` (model input space), explaining `labels`;
    `masks` [N, H, W] (object masks) enable the oracle. `data` fingerprints the images."""
    space = input_space(loaded.preprocessing)
    pixels = np.asarray(space.to_pixels(tf.constant(images, tf.float32)), np.float32)
    features = images.shape[1] * images.shape[2]
    morf_cuts = [ranking_cut(round(100 * p), features) for p in ratios]
    lerf_cuts = [ranking_cut(round(100 * (1 - p)), features) for p in ratios]  # keep the top p

    shape = images.shape
    morf_run = road_function(loaded, shape, False, seed=seed, batch_size=batch_size)
    lerf_run = road_function(loaded, shape, True, seed=seed, batch_size=batch_size)
    constants = (tf.constant(pixels, tf.float32), tf.constant(labels, tf.int32),
                 tf.constant(ids, tf.int64))

    def score(method):
        if method == ORACLE:
            maps = oracle_maps(masks)
        else:
            maps = saliency_gen.attribute(loaded, images, method, labels,
                                          batch_size=batch_size, seed=seed, ids=ids)
        ranks = tf.constant(pixel_ranks(maps, seed))
        curves = {}
        for name, run, cuts in (("MoRF", morf_run, morf_cuts), ("LeRF", lerf_run, lerf_cuts)):
            values = run(*constants, ranks, tf.constant(cuts, tf.int32)).numpy()
            curves[name] = values.reshape(len(cuts), len(images)).mean(axis=0)
        return curves

    return Benchmark(
        name="ROAD", metrics=METRICS, score=score,
        supports=lambda method: method != ORACLE or masks is not None,
        settings={"model_id": loaded.model_id, "n_images": len(images),
                  "ratios": [float(r) for r in ratios], "seed": seed, "noise": 0.01,
                  "ranking": "pixel, signed, jitter", **data},
        cost=4.0 * len(ratios))
