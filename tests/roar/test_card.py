"""ROAR / KAR retraining as a report-card benchmark: each (mode, seed) cell value is the top-1 of
the roar.train run with that ratio, mode and seed, finished runs are reused, and maps come from
the generator (the record-level random and oracle controls are roar.train's own, tested in
test_train.py); and ROAD's mean-colour imputer on known answers."""
import glob
import os

import keras
import numpy as np
import pytest

import models
from models.training import recipes
from roar import card, masked_data, train
from saliency_gen import generate

RECIPE = recipes.with_overrides(recipes.SYNTHETIC_RECIPE, epochs=1.0, batch_size=50)


def _mtimes(root):
    return {path: os.stat(path).st_mtime_ns
            for path in glob.glob(os.path.join(root, "**", "metrics.json"), recursive=True)}


def test_retraining_cells_are_the_runs_top1_per_seed_and_are_reused(tiny_world, tmp_path):
    root, _ = tiny_world
    keras.utils.set_random_seed(0)
    model_path = str(tmp_path / "model")
    models.export(models.build("small_cnn", 10, (64, 64, 3), width=4), model_path,
                  preprocessing="imagenet")
    records_dir = os.path.join(root, "records")
    work = str(tmp_path / "work")
    benchmark = card.retraining_benchmark(model_path, records_dir, work, num_classes=10,
                                          ratio=0.3, seeds=(0, 1), recipe=RECIPE,
                                          model_name="plain_cnn")
    assert [m.unit for m in benchmark.metrics] == ["seed", "seed"]
    values = benchmark.score("gradient_image")
    assert len(values["ROAR top-1"]) == 2 and len(values["KAR top-1"]) == 2
    # The KAR value of seed 1 is the run roar.train makes from the generator's records.
    maps = os.path.join(work, "saliency", generate.method_directory(
        masked_data.generator_name("gradient_image")))
    direct = train.run_masked(
        sorted(glob.glob(os.path.join(maps, "train-*"))),
        sorted(glob.glob(os.path.join(maps, "validation-*"))),
        masked_data.MaskConfig(ratio=0.3, keep_information=True, seed=1),
        masked_data.Records("saliency", map_key=masked_data.record_key_of("gradient_image")),
        recipes.RunOptions(model_name="plain_cnn", num_classes=10, recipe=RECIPE, seed=1),
        output_dir=str(tmp_path / "direct"))
    assert values["KAR top-1"][1] == direct["top1"]
    before = _mtimes(work)
    assert len(before) == 4  # 2 modes x 2 seeds
    assert benchmark.score("gradient_image") == values  # finished runs are reused as they are
    assert _mtimes(work) == before


def test_road_with_the_mean_colour_imputer_on_known_answers(tmp_path):
    """Every pixel removed (MoRF at 1.0, LeRF at 0: it keeps the top p) leaves the one
    mean-colour image, whatever the map; none removed (MoRF at 0, LeRF at 1.0) leaves the clean
    image."""
    keras.utils.set_random_seed(0)
    models.export(models.build("small_cnn", 10, (16, 16, 3), width=4), str(tmp_path / "m"))
    loaded = models.load(str(tmp_path / "m"))
    rng = np.random.default_rng(0)
    images = rng.uniform(-1, 1, (3, 16, 16, 3)).astype(np.float32)
    labels, ids = np.array([1, 4, 7]), np.arange(3)
    maps = {"a": rng.uniform(size=(3, 16, 16, 3)), "b": rng.uniform(size=(3, 16, 16, 3))}

    def road(ratio):
        return card.benchmark(loaded, images, labels, ids, data={}, ratios=(ratio,),
                              maps_of=maps.__getitem__, imputer="mean")

    space = models.formats.preprocessing.input_space(loaded.preprocessing)
    pixels = np.asarray(space.to_pixels(images))
    flat = np.broadcast_to(pixels.mean(axis=(0, 1, 2)), pixels.shape).astype(np.float32)
    filled = keras.ops.softmax(loaded(space.from_pixels(flat))).numpy()[np.arange(3), labels]
    clean = keras.ops.softmax(loaded(images)).numpy()[np.arange(3), labels]
    assert not np.allclose(clean, filled, atol=1e-3)  # the two answers differ
    for ratio, morf, lerf in ((1.0, filled, clean), (0.0, clean, filled)):
        benchmark = road(ratio)
        assert benchmark.settings["imputer"] == "mean"
        for method in ("a", "b"):  # the map does not matter
            curves = benchmark.score(method)
            assert curves["MoRF"] == pytest.approx(morf, abs=1e-5), (ratio, method)
            assert curves["LeRF"] == pytest.approx(lerf, abs=1e-5), (ratio, method)
    assert "imputer" not in card.benchmark(loaded, images, labels, ids, data={}).settings
