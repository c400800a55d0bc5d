"""Trains the default synthetic world's models and stores their weights in the package.

    python scripts/train_shipped_models.py            # about 12 minutes on 2 cores

Builds the synthetic world of --seed in --work_dir (a fresh temporary folder by default),
trains BAM's obj, scene and scene_only models (`bam.train`, synthetic preset) and the clean
model (`saliency_gen.data.world.cache.clean_model`) there without the shipped weights, makes BAM's
delta patch with that scene_only model (two minutes of gradient steps), and stores each
model's info, Keras weights and training report, and the patch's images, under --output (the
package's `saliency_gen/data/world/shipped_models`, docs/synthetic_world.md "Shipped models"), with
the CPU, versions and date in the manifest. The main job and the card then load these weights
instead of training. Prints a table of each model's accuracy, training time and weight size.
"""
import dataclasses
import datetime
import os
import shutil
import tempfile
import time
from typing import TYPE_CHECKING, Optional

import models  # noqa: F401, I001  (first: TensorFlow loads quietly)
from models.foundation import provenance
from models.foundation.cli import option, run_binary
from models.foundation.files import read_json
from models.foundation.lazy import lazy_module

# Loaded on first use: --help and a bad flag are answered before TensorFlow starts
# (docs/architecture.md, "Light imports").
if TYPE_CHECKING:  # the type checker's view of the same modules
    import keras
    import tensorflow as tf

    from bam import synthetic_setup
    from models.formats import exporting
    from saliency_gen.data.world import cache, shipped
else:
    keras = lazy_module("keras")
    tf = lazy_module("tensorflow")
    synthetic_setup = lazy_module("bam.synthetic_setup")
    exporting = lazy_module("models.formats.exporting")
    cache = lazy_module("saliency_gen.data.world.cache")
    shipped = lazy_module("saliency_gen.data.world.shipped")


@dataclasses.dataclass(frozen=True)
class Config:
    """The script's options (one flag each)."""

    seed: int = option(0, 'Seed of the world and of the training.')
    work_dir: Optional[str] = option(
        None, 'Where to build the world and train (default: a temporary folder, removed after).')
    output: Optional[str] = option(None, "Root folder of the shipped models, seed<seed>/ inside "
                                   "(default: the package's "
                                   "saliency_gen/data/world/shipped_models).")
    models: str = option("obj,scene,scene_only,clean,patch",
                         'Comma-separated parts to make and store: BAM models, clean, and patch '
                         '(the delta patch, with the work folder\'s scene_only model).')


def made_by(seconds: float) -> dict:
    """Where and how the weights were made, for the manifest."""
    return {"command": "python scripts/train_shipped_models.py", "cpu": provenance.cpu_model(),
            "cores": os.cpu_count(), "tensorflow": tf.__version__, "keras": keras.__version__,
            "version": provenance.package_version(), "train_seconds": round(seconds, 1),
            "date": datetime.date.today().isoformat()}


def store_patch(data_dir: str, work: str, root: Optional[str]) -> tuple:
    """Makes the delta patch with the work folder's scene_only model and stores it (without
    the masks, which are bamboo_forest's); (None, seconds, size in bytes)."""
    scene_only = os.path.join(work, "bam_models", "scene_only")
    if not os.path.isdir(scene_only):
        raise models.UserError(f"{scene_only} does not exist; make the patch with scene_only "
                               "in the same run, or pass the --work_dir that holds it")
    started = time.time()
    synthetic_setup.make_patch(data_dir, scene_only)
    seconds = time.time() - started
    stored = shipped.store_folder(
        synthetic_setup.PATCH, os.path.join(data_dir, synthetic_setup.PATCH), data_dir,
        {"model_id": exporting.read_info(scene_only)["model_id"]}, made_by(seconds), exclude=(
            synthetic_setup.PATCH_MASKS, synthetic_setup.PATCH_MODEL), root=root)
    size = sum(os.path.getsize(os.path.join(here, name))
               for here, _, files in os.walk(stored) for name in files)
    return None, seconds, size


def run(config: Config) -> list:
    names = [name.strip() for name in config.models.split(",") if name.strip()]
    parts = (*synthetic_setup.MODELS, "clean", "patch")
    unknown = [n for n in names if n not in parts]
    if unknown:
        raise models.UserError(f"--models: unknown part {unknown[0]!r}; choose from "
                               f"{', '.join(parts)}")
    work = config.work_dir or tempfile.mkdtemp(prefix="shipped-models-")
    rows = []
    try:
        data_dir = cache.world(config.seed, work)
        for name in names:
            if name == "patch":
                rows.append(("patch", *store_patch(data_dir, work, config.output)))
                continue
            if name == "clean":
                export_path = cache.clean_model(config.seed, work, shipped=False)
                report = read_json(os.path.join(os.path.dirname(export_path), "metrics.json"))
                seconds, accuracy = report["train_seconds"], report["top1"]
            else:
                report = synthetic_setup.train_model(data_dir, os.path.join(work, "bam_models"),
                                                     name, seed=config.seed)
                export_path = report["model_path"]
                seconds, accuracy = report["train_seconds"], report["val_accuracy"]
            stored = shipped.store(name, export_path, report, data_dir, made_by(seconds),
                                   config.output)
            size = os.path.getsize(os.path.join(stored, shipped.WEIGHTS))
            rows.append((name, accuracy, seconds, size))
    finally:
        if config.work_dir is None:
            shutil.rmtree(work, ignore_errors=True)
    print(f"\n{'part':<12}{'accuracy':>10}{'seconds':>9}{'size':>12}   "
          f"({provenance.cpu_model()})")
    for name, accuracy, seconds, size in rows:
        shown = "-" if accuracy is None else f"{accuracy:.3f}"
        print(f"{name:<12}{shown:>10}{seconds:>9.0f}{size / 1e6:>9.2f} MB")
    print(f"stored in {shipped.folder(config.seed, config.output)}")
    return rows


if __name__ == "__main__":
    run_binary(Config, run)
