"""BAM on the built-in synthetic world: its models and delta patch, built once and cached.

`prepare(cache_dir, seed)` builds, in order and only what is missing: the synthetic world
(`saliency_gen.world.cache`), small_cnn models trained on obj, scene and scene_only and exported
(`bam.train`) into the world cache's `bam_models/`, and the bamboo_forest_patch set
(`bam.delta_patch` with the scene_only model) in the world's folder. `prepare_relative` adds
the relative sets scene1..scene10 and their models. Every step writes under a temporary name and
renames when complete, so an interrupted run resumes where it stopped.
"""
import os
import shutil
from typing import Callable, Optional

import models
from bam import delta_patch, train
from models import progress
from models.export import WEIGHTS_PATH
from saliency_gen.world import cache, construction

MODELS = ("obj", "scene", "scene_only")
RELATIVE_MODELS = tuple(f"scene{k}" for k in range(1, 11))


def prepare(cache_dir: Optional[str] = None, seed: int = 0, epochs: int = 3,
            log: Callable = print) -> tuple:
    """(data_dir, model_dir) of the synthetic setup, building what is missing."""
    folder = cache.cache_dir(seed, cache_dir)
    log(f"synthetic BAM setup in {folder} (built once, then reused)")
    data_dir = cache.world(seed, folder, log)
    model_dir = os.path.join(folder, "bam_models")
    _train_missing(data_dir, model_dir, MODELS, epochs, seed, log)
    if not os.path.isdir(os.path.join(data_dir, "bamboo_forest_patch")):
        bar = progress.CountBar(f"delta patch ({delta_patch.SEGMENT} steps a tick)", "tick")
        result = delta_patch.construct_patches(
            data_dir, models.load(os.path.join(model_dir, "scene_only")), progress=bar)
        bar.close()
        log(f"delta patch: {result['kept_prediction']} of {result['images']} patched images "
            "keep the scene_only prediction")
    return data_dir, model_dir


def prepare_relative(cache_dir: Optional[str] = None, seed: int = 0, epochs: int = 3,
                     log: Callable = print) -> tuple:
    """(data_dir, model_dir) with the relative sets scene1..scene10 (docs/bam.md, "The dataset
    layout") and a small_cnn trained on each, building what is missing."""
    data_dir, model_dir = prepare(cache_dir, seed, epochs, log)
    layout = construction.Layout(data_dir)
    for k in range(1, 11):
        root = os.path.join(data_dir, f"scene{k}")
        if not os.path.isfile(os.path.join(root, "dog_classes.txt")):  # written last
            shutil.rmtree(root, ignore_errors=True)
            construction.write_relative_set(layout, k)
    _train_missing(data_dir, model_dir, RELATIVE_MODELS, epochs, seed, log)
    return data_dir, model_dir


def _train_missing(data_dir, model_dir, names, epochs, seed, log):
    """Trains and exports each of `names` whose export is missing, or predates exports that
    carry Keras weights (TCAV rebuilds the models from them)."""
    for name in names:
        if not (os.path.isfile(os.path.join(model_dir, f"{name}.json")) and
                os.path.isfile(os.path.join(model_dir, name, WEIGHTS_PATH))):
            report = train.train_and_export(
                data_dir, name, model_dir, epochs=epochs, seed=seed, overwrite=True,  # the cache
                callbacks=[progress.TrainingBar(f"training {name}")])  # owns its backups
            log(f"trained {name}: val accuracy {report['val_accuracy']:.3f} in "
                f"{report['train_seconds']:.0f} s")
