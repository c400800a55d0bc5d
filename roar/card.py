"""ROAD (MoRF and LeRF without retraining) and, by flag, ROAR / KAR retraining as report-card
benchmarks (docs/report_card.md, "Benchmarks").

For each image and fraction p, MoRF imputes the top p of the pixels (ROAD's ranking: the signed
channel sum with the shared jitter; ROAD's noisy linear imputation, noise 0.01) and LeRF imputes
all but the top p, as `roar.road` does on records; the clean model's true-class probability
(softmax) on the imputed image is averaged over the fractions into one value per image: lower is
better for MoRF, higher for LeRF. Every (fraction, image) pair is one work item of the chunked
executor, so the curve costs one traced function whatever the number of fractions. The "oracle"
control ranks the object's pixels first, from its centre outwards (`oracle_maps`, from the
records' object masks).
"""
import dataclasses
import glob
import os
from typing import Any, Callable, Optional, Sequence

import numpy as np
import scipy.ndimage
import tensorflow as tf
from numpy.typing import ArrayLike

import models
import saliency_gen
from models.formats.adapter import adapt
from models.formats.preprocessing import input_space
from models.foundation import executor, provenance
from models.foundation.errors import check_known
from models.report.engine import Benchmark
from models.training import recipes
from roar import imputation, masked_data, masking, metric_definitions
from roar import train as roar_train
from saliency_gen import generate
from saliency_gen.records import ranking_cut

ORACLE = "oracle"
RATIOS = (0.1, 0.3, 0.5, 0.7, 0.9)


def pixel_ranks(maps: ArrayLike, seed: int = 0) -> np.ndarray:
    """int32 [N, H*W]: each pixel's position in ROAD's ranking (0: most relevant); the lower
    index first on ties, as `masking.top_mask`."""
    scores = masking.feature_scores(maps, unit="pixel", squared=False, tie_break="jitter",
                                    seed=seed).numpy()
    order = np.argsort(-scores, axis=1, kind="stable")
    ranks = np.empty_like(order)
    np.put_along_axis(ranks, order, np.arange(order.shape[1])[None], axis=1)
    return ranks.astype(np.int32)


# The imputers ROAD's card benchmark offers: ROAD's own (noisy linear, noise 0.01), and the
# fixed fill its paper compares it with, here the images' mean colour (a --variants choice).
IMPUTERS = ("noisy_linear", "mean")


def road_function(loaded: Any, image_shape: Sequence[int], *, seed: int = 0, noise: float = 0.01,
                  batch_size: int = 32, fill: bool = False) -> Callable:
    """A traced function (pixels, labels, ids, ranks, cuts, keep_top, colour) -> float
    [len(cuts) * N] for N images of `image_shape` (H, W, C): the true-class probability of
    every image with its pixels of rank < cut imputed (rank >= cut when `keep_top`), each
    (cut, image) pair one executor item. With `fill`, the removed pixels take the `colour`
    (pixel space) instead of ROAD's noisy linear imputation. Kept with the model's adapter:
    MoRF and LeRF, every method and every benchmark made again over the same model (a variant,
    fewer images) share one trace."""
    height, width, channels = image_shape
    adapter = adapt(loaded)
    signature = [tf.TensorSpec([None, height, width, channels], tf.float32),
                 tf.TensorSpec([None], tf.int32), tf.TensorSpec([None], tf.int64),
                 tf.TensorSpec([None, height * width], tf.int32), tf.TensorSpec([None], tf.int32),
                 tf.TensorSpec([], tf.bool), tf.TensorSpec([channels], tf.float32)]

    def build():
        space = input_space(loaded.preprocessing)

        # one trace for any number of fractions; autograph off: the executor and the solver
        # build their loops explicitly
        @tf.function(input_signature=signature, autograph=False)
        def run(pixels, labels, ids, ranks, cuts, keep_top, colour):
            n = tf.shape(pixels)[0]

            def compute(items):
                image, setting = items % n, items // n
                cut = tf.gather(cuts, setting)[:, None]
                image_ranks = tf.gather(ranks, image)
                removed = tf.where(keep_top, image_ranks >= cut, image_ranks < cut)
                removed = tf.reshape(removed, [-1, height, width])
                if fill:
                    imputed = tf.where(removed[..., None], colour, tf.gather(pixels, image))
                else:
                    imputed = imputation.noisy_linear_impute(
                        tf.gather(pixels, image), removed, noise_std=noise, seed=seed,
                        keys=tf.gather(ids, image))
                probabilities = tf.nn.softmax(tf.cast(adapter.logits(space.from_pixels(imputed)),
                                                      tf.float32))
                return tf.gather(probabilities, tf.gather(labels, image), batch_dims=1)
            return executor.collect(tf.shape(cuts)[0] * n, batch_size, compute)
        return run

    return adapter.traced(("ROAD", tuple(image_shape), seed, noise, batch_size, bool(fill)),
                          build)


def oracle_maps(masks: ArrayLike) -> np.ndarray:
    """[N, H, W, 1]: the signed distance to each object's outline (inside positive), so ROAD
    removes the object from its centre outwards and then its surroundings nearest first: whole
    regions, which imputation cannot restore from their neighbours as it restores scattered
    pixels."""
    masks = np.asarray(masks) > 0.5
    inside = np.stack([scipy.ndimage.distance_transform_edt(m) for m in masks])
    outside = np.stack([scipy.ndimage.distance_transform_edt(~m) for m in masks])
    return (inside - outside).astype(np.float32)[..., None]


def benchmark(loaded: Any, images: np.ndarray, labels: ArrayLike, ids: ArrayLike,
              masks: Optional[ArrayLike] = None, *, data: dict,
              ratios: Sequence[float] = RATIOS, seed: int = 0, batch_size: int = 32,
              maps_of: Optional[Callable[[str], np.ndarray]] = None,
              imputer: str = "noisy_linear") -> Benchmark:
    """ROAD MoRF / LeRF of `loaded` on `images` (model input space), explaining `labels`;
    `masks` [N, H, W] (object masks) enable the oracle. `data` fingerprints the images;
    `maps_of(method)`, when given, supplies a method's maps (shared by a card's benchmarks);
    `imputer` is one of `IMPUTERS`."""
    check_known(imputer, IMPUTERS, "ROAD imputer")
    space = input_space(loaded.preprocessing)
    pixels = np.asarray(space.to_pixels(tf.constant(images, tf.float32)), np.float32)
    features = images.shape[1] * images.shape[2]
    morf_cuts = [ranking_cut(round(100 * p), features) for p in ratios]
    lerf_cuts = [ranking_cut(round(100 * (1 - p)), features) for p in ratios]  # keep the top p

    run = road_function(loaded, images.shape[1:], seed=seed, batch_size=batch_size,
                        fill=imputer == "mean")
    colour = pixels.mean(axis=(0, 1, 2)) if imputer == "mean" else np.zeros(pixels.shape[-1])
    constants = (tf.constant(pixels, tf.float32), tf.constant(labels, tf.int32),
                 tf.constant(ids, tf.int64))

    def score(method):
        if method == ORACLE:
            maps = oracle_maps(masks)
        elif maps_of is not None:
            maps = maps_of(method)
        else:
            maps = saliency_gen.attribute(loaded, images, method, labels,
                                          batch_size=batch_size, seed=seed, ids=ids)
        ranks = tf.constant(pixel_ranks(maps, seed))
        curves = {}
        for order, keep_top, cuts in (("morf", False, morf_cuts), ("lerf", True, lerf_cuts)):
            values = run(*constants, ranks, tf.constant(cuts, tf.int32), tf.constant(keep_top),
                         tf.constant(colour, tf.float32)).numpy()
            curves[metric_definitions.ROAD_ORDERS[order]] = values.reshape(
                len(cuts), len(images)).mean(axis=0)
        return curves

    return Benchmark(
        name="ROAD", metrics=metric_definitions.ROAD, score=score,
        supports=lambda method: method != ORACLE or masks is not None,
        settings={"model_id": loaded.model_id, "n_images": len(images),
                  "ratios": [float(r) for r in ratios], "seed": seed, "noise": 0.01,
                  "ranking": "pixel, signed, jitter", **data,
                  # (the default leaves the key out: cells made before it existed stay valid)
                  **({} if imputer == "noisy_linear" else {"imputer": imputer})},
        cost=4.0 * len(ratios))


def retraining_benchmark(model_path: str, records_dir: str, work_dir: str, *,
                         num_classes: int, ratio: float = 0.5,
                         seeds: Sequence[int] = (0, 1, 2),
                         recipe: Optional[recipes.Recipe] = None,
                         model_name: str = "small_cnn") -> Benchmark:
    """ROAR and KAR at one `ratio` as a card benchmark whose units are the training `seeds`.

    The method's maps of every image record in `records_dir` (`train-*`, `validation-*`) come
    from the generator (float16, explaining the prediction of `model_path`, cached in
    `<work_dir>/saliency`); each (mode, seed) is one `roar.train.run_masked` run in
    `<work_dir>/runs/...`, reused when finished with the same origin. `random` and `oracle` are
    the record-level controls of roar.train.
    """
    recipe = recipe or recipes.Recipe()
    maps_root = os.path.join(work_dir, "saliency")

    def score(method):
        control = method if method in ("random", ORACLE) else None
        if control:
            data_dir, source, key = records_dir, "images", None
        else:
            name = masked_data.generator_name(method)
            generate.generate(generate.Config(input_pattern=os.path.join(records_dir, "*.tfrecord"),
                                              model_path=model_path, saliency_method=name,
                                              output_dir=maps_root, dtype="float16"),
                              progress_bar=False)
            data_dir = os.path.join(maps_root, generate.method_directory(name))
            source, key = "saliency", masked_data.record_key_of(method)
        train_files = masked_data.list_shards(os.path.join(data_dir, "train-*"), "train-*")
        eval_files = masked_data.list_shards(os.path.join(data_dir, "validation-*"),
                                             "validation-*")
        values = {spec.name: [] for spec in metric_definitions.RETRAINING}
        for keep, mode in ((False, "ROAR"), (True, "KAR")):
            for seed in seeds:
                config = masked_data.MaskConfig(ratio=ratio, keep_information=keep, seed=seed)
                folder = os.path.join(work_dir, "runs", generate.method_directory(method),
                                      "kar" if keep else "roar", f"seed_{seed}")
                result = roar_train.run_masked(
                    train_files, eval_files, config,
                    masked_data.Records(source, control, map_key=key), recipes.RunOptions(
                        model_name=model_name, num_classes=num_classes, recipe=recipe,
                        seed=seed),
                    output_dir=folder)
                values[metric_definitions.RETRAINING_MODES[mode]].append(result["top1"])
        return values

    return Benchmark(
        name="ROAR/KAR", metrics=metric_definitions.RETRAINING, score=score,
        settings={"model_id": models.read_info(model_path)["model_id"], "ratio": float(ratio),
                  "seeds": [int(s) for s in seeds], "recipe": dataclasses.asdict(recipe),
                  "model": model_name,
                  "data": provenance.listing_digest(sorted(
                      glob.glob(os.path.join(records_dir, "*.tfrecord"))))},
        cost=60.0 * len(seeds))
