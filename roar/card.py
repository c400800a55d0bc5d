"""ROAD (MoRF and LeRF without retraining) and, by flag, ROAR / KAR retraining as report-card
benchmarks (docs/report_card.md, "Benchmarks").

For each image and fraction p, MoRF imputes the top p of the pixels (ROAD's ranking: the signed
channel sum with the shared jitter; ROAD's noisy linear imputation, noise 0.01) and LeRF imputes
all but the top p; the clean model's true-class probability (softmax) on the imputed image is
averaged over the fractions into one value per image: lower is better for MoRF, higher for
LeRF. The values come from ROAD's measure (`roar.road_outcomes.Road`), the one `roar.road` and
`roar.beam_road` score records with, with the imputation noise keyed by the image ids. The
"oracle" control ranks the object's pixels first, from its centre outwards (`oracle_maps`, from
the records' object masks).
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
from models.formats.preprocessing import input_space
from models.foundation import provenance
from models.foundation.errors import check_known
from models.report.card_engine import CHEAP_IMAGES, ORACLE, Benchmark
from models.training import recipes
from roar import mask_settings, masked_data, road_outcomes
from roar import train as roar_train
from saliency_gen import generate

RATIOS = (0.1, 0.3, 0.5, 0.7, 0.9)


# The imputers ROAD's card benchmark offers: ROAD's own (noisy linear, noise 0.01), and the
# fixed fill its paper compares it with, here the images' mean colour (a --variants choice).
IMPUTERS = ("noisy_linear", "mean")


def road_mask(imputer: str = "noisy_linear", seed: int = 0) -> masked_data.MaskConfig:
    """ROAD's settings on the card: `roar.road`'s defaults (`mask_settings.ROAD`: pixel ranking
    of the signed channel sum with the shared jitter; noise 0.01) with `imputer`'s fill."""
    check_known(imputer, IMPUTERS, "ROAD imputer")
    return mask_settings.MaskConfig(**{**mask_settings.ROAD, "fill": imputer}, seed=seed)


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
    mask = road_mask(imputer, seed)
    space = input_space(loaded.preprocessing)
    pixels = np.asarray(space.to_pixels(tf.constant(images, tf.float32)), np.float32)
    colour = pixels.mean(axis=(0, 1, 2)) if imputer == "mean" else None
    measure = road_outcomes.Road(loaded, mask,
                                 road_outcomes.settings(road_outcomes.ORDERS, ratios),
                                 batch_size=batch_size, colour=colour)

    def score(method):
        if method == ORACLE and masks is not None:  # (`supports`: no oracle without masks)
            maps = oracle_maps(masks)
        elif maps_of is not None:
            maps = maps_of(method)
        else:
            maps = saliency_gen.attribute(loaded, images, method, labels,
                                          batch_size=batch_size, seed=seed, ids=ids)
        return measure.score(road_outcomes.RoadImages(pixels, labels, ids, maps))

    return Benchmark(
        name="ROAD", metrics=measure.metrics, score=score,
        supports=lambda method: method != ORACLE or masks is not None,
        settings={"model_id": loaded.model_id, "n_images": len(images),
                  "ratios": [float(r) for r in ratios], "seed": seed, "noise": 0.01,
                  "ranking": "pixel, signed, jitter", **data,
                  **masked_data.masking.solver_setting(imputer),
                  # (the default leaves the key out: cells made before it existed stay valid)
                  **({} if imputer == "noisy_linear" else {"imputer": imputer})},
        # besides its maps, a cell took 0.91-0.92x a 64-step Deletion cell (prior 64) on the
        # same images on Lite0 and 1.29x on the synthetic world since the solver's Galerkin
        # grids (1.6x on 2026-11-29; docs/report_card.md, "Where the card's time goes")
        cost=13.0 * len(ratios) * len(images) / CHEAP_IMAGES)


def retraining_benchmark(model_path: str, records_dir: str, work_dir: str, *,
                         num_classes: int, ratio: float = 0.5,
                         seeds: Sequence[int] = (0, 1, 2),
                         recipe: Optional[recipes.Recipe] = None,
                         model_name: str = "small_cnn") -> Benchmark:
    """ROAR and KAR at one `ratio` as a card benchmark whose units are the training `seeds`.

    The method's maps of every image record in `records_dir` (`train-*`, `validation-*`) come
    from the generator (float16, explaining the prediction of `model_path`, cached in
    `<work_dir>/saliency`); ROAR / KAR's measure (`roar.train.Retraining`) trains each
    (mode, seed) once in `<work_dir>/runs/...`, reused when finished with the same origin.
    `random` and `oracle` are the record-level controls of roar.train.
    """
    recipe = recipe or recipes.Recipe()
    maps_root = os.path.join(work_dir, "saliency")
    measure = roar_train.Retraining(ratio, seeds, recipes.RunOptions(
        model_name=model_name, num_classes=num_classes, recipe=recipe))

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
        return measure.score(roar_train.MaskedData(
            masked_data.list_shards(os.path.join(data_dir, "train-*"), "train-*"),
            masked_data.list_shards(os.path.join(data_dir, "validation-*"), "validation-*"),
            masked_data.Records(source, control, map_key=key),
            os.path.join(work_dir, "runs", generate.method_directory(method))))

    return Benchmark(
        name="ROAR/KAR", metrics=measure.metrics, score=score,
        settings={"model_id": models.read_info(model_path)["model_id"], "ratio": float(ratio),
                  "seeds": [int(s) for s in seeds], "recipe": dataclasses.asdict(recipe),
                  "model": model_name,
                  "data": provenance.listing_digest(sorted(
                      glob.glob(os.path.join(records_dir, "*.tfrecord"))))},
        cost=60.0 * len(seeds))
