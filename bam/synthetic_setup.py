"""BAM on the built-in synthetic world: its models and delta patch, built once and cached.

`prepare(cache_dir, seed)` builds, in order and only what is missing: the synthetic world
(`saliency_gen.data.world.cache`), small_cnn models on obj, scene and scene_only exported into the
world cache's `bam_models/` (the shipped weights of the default world, `saliency_gen.data.world.
shipped`, or, with `shipped=False` or for another world, trained by `bam.train`), and the
bamboo_forest_patch set (`bam.delta_patch` with the scene_only model, remade when that model
changes) in the world's folder. `prepare_relative` adds
the relative sets scene1..scene10 and their models. Every step writes under a temporary name and
renames when complete, so an interrupted run resumes where it stopped, and runs under the lock
of `bam_models` (`cache.building`; it also covers the sets BAM adds to the world's folder), so
two jobs started at once build it once.
"""
import dataclasses
import os
import shutil
import time
from typing import Callable, NamedTuple, Optional

import models
from bam import delta_patch, train
from models.formats.exporting import WEIGHTS_PATH, read_info
from models.foundation import progress
from models.foundation.files import atomic_output, read_json, write_json
from models.training.recipes import RunOptions
from models.training.training_bar import TrainingBar
from saliency_gen.data.world import cache, construction
from saliency_gen.data.world import shipped as shipped_models

MODELS = ("obj", "scene", "scene_only")
RELATIVE_MODELS = tuple(f"scene{k}" for k in range(1, 11))
EPOCHS = train.PRESETS["synthetic"].recipe.epochs
PATCH, PATCH_MASKS = "bamboo_forest_patch", "val_mask"
PATCH_MODEL = "made_with.json"  # the scene_only model the patch was made with


class BamSetup(NamedTuple):
    """Where a BAM setup is: its data (`data_dir`, as `bam.metrics --data_dir` reads it) and its
    trained models (`model_dir`)."""

    data_dir: str
    model_dir: str


def prepare(cache_dir: Optional[str] = None, seed: int = 0, epochs: int = EPOCHS,
            log: Callable = print, shipped: bool = True) -> BamSetup:
    """(data_dir, model_dir) of the synthetic setup, building what is missing; `shipped` takes
    the shipped weights where the package has them for this world instead of training."""
    folder = cache.cache_dir(seed, cache_dir)
    log(f"synthetic BAM setup in {folder} (built once, then reused)")
    with cache.building("bam_models", seed, cache_dir, log):  # also the world's BAM sets
        data_dir = cache.world(seed, folder, log)
        model_dir = os.path.join(folder, "bam_models")
        _train_missing(data_dir, model_dir, MODELS, epochs, seed, log, shipped)
        scene_only = os.path.join(model_dir, "scene_only")
        made_with = os.path.join(data_dir, PATCH, PATCH_MODEL)
        origin = {"model_id": read_info(scene_only)["model_id"]}
        if not (os.path.isfile(made_with) and read_json(made_with, "patch origin") == origin):
            source = shipped_models.shipped_folder(PATCH, data_dir, origin) if shipped else None
            if source is not None:
                install_patch(source, data_dir)
                log("loaded the shipped delta patch")
            else:
                make_patch(data_dir, scene_only, log)
            write_json(made_with, origin)
    return BamSetup(data_dir, model_dir)


def make_patch(data_dir: str, scene_only: str, log: Callable = print) -> str:
    """Builds the world's bamboo_forest_patch with the scene_only export at `scene_only`."""
    bar = progress.CountBar(f"delta patch ({delta_patch.SEGMENT} steps a tick)", "tick")
    started = time.time()
    result = delta_patch.construct_patches(data_dir, models.load(scene_only), progress=bar)
    bar.close()
    log(f"delta patch: {result['kept_prediction']} of {result['images']} patched images "
        f"keep the scene_only prediction ({time.time() - started:.0f} s)")
    return result["path"]


def install_patch(source: str, data_dir: str) -> None:
    """The shipped patch set at `source` as the world's bamboo_forest_patch, with the masks of
    bamboo_forest it copies (they are not shipped twice)."""
    with atomic_output(os.path.join(data_dir, PATCH)) as temporary:
        shutil.copytree(source, temporary)
        shutil.copyfile(os.path.join(data_dir, "bamboo_forest", PATCH_MASKS),
                        os.path.join(temporary, PATCH_MASKS))


def prepare_relative(cache_dir: Optional[str] = None, seed: int = 0, epochs: int = EPOCHS,
                     log: Callable = print, shipped: bool = True) -> BamSetup:
    """(data_dir, model_dir) with the relative sets scene1..scene10 (docs/bam.md, "The dataset
    layout") and a small_cnn trained on each, building what is missing."""
    with cache.building("bam_models", seed, cache_dir, log):  # also the world's BAM sets
        data_dir, model_dir = prepare(cache_dir, seed, epochs, log, shipped)
        layout = construction.Layout(data_dir)
        for k in range(1, 11):
            root = os.path.join(data_dir, f"scene{k}")
            if not os.path.isfile(os.path.join(root, "dog_classes.txt")):  # written last
                shutil.rmtree(root, ignore_errors=True)
                construction.write_relative_set(layout, k)
        _train_missing(data_dir, model_dir, RELATIVE_MODELS, epochs, seed, log, shipped)
    return BamSetup(data_dir, model_dir)


def train_model(data_dir: str, model_dir: str, name: str, epochs: int = EPOCHS,
                seed: int = 0) -> dict:
    """Trains the synthetic world's model on dataset `name` and exports it into `model_dir`
    (overwriting a backup: the cache owns it); returns the training report."""
    run = RunOptions(recipe=dataclasses.replace(train.PRESETS["synthetic"].recipe,
                                                epochs=epochs), seed=seed, overwrite=True)
    return train.train_and_export(data_dir, name, model_dir, run,
                                  callbacks=[TrainingBar(f"training {name}")])


def _train_missing(data_dir, model_dir, names, epochs, seed, log, shipped):
    """Exports each of `names` whose export is missing, or predates exports that carry Keras
    weights (TCAV rebuilds the models from them), or (without `shipped`) is a shipped copy:
    from the shipped weights when `shipped` and the package has them for this world and these
    `epochs`, else trained."""
    for name in names:
        path = os.path.join(model_dir, name)
        if not (os.path.isfile(os.path.join(model_dir, f"{name}.json")) and
                os.path.isfile(os.path.join(path, WEIGHTS_PATH))) or (
                not shipped and shipped_models.is_installed_copy(path)):
            report = shipped_models.install(name, data_dir, path) if shipped and \
                epochs == EPOCHS else None
            if report is not None:
                report = dict(report, model_path=path)
                write_json(os.path.join(model_dir, f"{name}.json"), report, indent=2,
                           sort_keys=True)
                log(f"loaded the shipped {name} model: val accuracy "
                    f"{report['val_accuracy']:.3f}")
                continue
            report = train_model(data_dir, model_dir, name, epochs, seed)
            log(f"trained {name}: val accuracy {report['val_accuracy']:.3f} in "
                f"{report['train_seconds']:.0f} s")
