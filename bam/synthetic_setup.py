"""The built-in synthetic BAM setup: world, trained models and delta patch, built once and cached.

`prepare(cache_dir, seed)` builds, in order and only what is missing: the synthetic world
(`bam.synthetic`), small_cnn models trained on obj, scene and scene_only and exported
(`bam.train`), and the bamboo_forest_patch set (`bam.delta_patch` with the scene_only model).
Every step writes under a temporary name and renames when complete, so an interrupted run
resumes where it stopped. The cache lives in `$XDG_CACHE_HOME/attribution-benchmarks` (default
`~/.cache/attribution-benchmarks`).
"""
import os
import shutil

import models
from models.export import WEIGHTS_PATH
from bam import delta_patch, synthetic, train

MODELS = ("obj", "scene", "scene_only")


def default_cache_dir(seed=0):
    root = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(root, "attribution-benchmarks", f"bam_synthetic_seed{seed}")


def prepare(cache_dir=None, seed=0, epochs=3, log=print):
    """(data_dir, model_dir) of the synthetic setup, building what is missing."""
    cache_dir = cache_dir or default_cache_dir(seed)
    data_dir, model_dir = os.path.join(cache_dir, "data"), os.path.join(cache_dir, "models")
    log(f"synthetic BAM setup in {cache_dir} (built once, then reused)")
    info = synthetic.build_world(data_dir, seed=seed)
    if not info["reused"]:
        log(f"built the synthetic world: {info['num_train_images']} train and "
            f"{info['num_val_images']} val images in {info['seconds']:.0f} s")
    _train_missing(data_dir, model_dir, MODELS, epochs, seed, log)
    if not os.path.isdir(os.path.join(data_dir, "bamboo_forest_patch")):
        result = delta_patch.construct_patches(data_dir,
                                               models.load(os.path.join(model_dir, "scene_only")))
        log(f"delta patch: {result['kept_prediction']} of {result['images']} patched images "
            "keep the scene_only prediction")
    return data_dir, model_dir


RELATIVE_MODELS = tuple(f"scene{k}" for k in range(1, 11))


def prepare_relative(cache_dir=None, seed=0, epochs=3, log=print):
    """(data_dir, model_dir) with the relative sets scene1..scene10 (bam.md §2.10) and a
    small_cnn trained on each, building what is missing (after `prepare`)."""
    from bam import construction

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
            report = train.train_and_export(data_dir, name, model_dir, epochs=epochs, seed=seed)
            log(f"trained {name}: val accuracy {report['val_accuracy']:.3f} in "
                f"{report['train_seconds']:.0f} s")
