"""Measures the synthetic BAM world: generation time and how well a small CNN learns it.

    python scripts/measure_synthetic_world.py --output_dir=/tmp/bam_world_measure

Builds the default world (timed), then trains `small_cnn` on object labels (obj) and on scene
labels (scene) within a wall-clock budget each, and prints a table of validation accuracy and
training time against the targets of docs/synthetic_world.md (>= 90% within 180 s each; the
world built within 60 s). Writes the same figures as JSON to --output_json.
"""
import dataclasses
import json
import os
import shutil
import time
from typing import TYPE_CHECKING, Optional

import models  # noqa: F401, I001  (first: TensorFlow loads quietly)
from models.foundation.cli import option, run_binary
from models.foundation.lazy import lazy_module
from models.training.recipes import RunOptions

# Loaded on first use: --help and a bad flag are answered before TensorFlow starts
# (docs/architecture.md, "Light imports").
if TYPE_CHECKING:  # the type checker's view of the same modules
    from bam import train
    from saliency_gen.data.world import synthetic
else:
    train = lazy_module("bam.train")
    synthetic = lazy_module("saliency_gen.data.world.synthetic")

GENERATION_TARGET_SECONDS = 60.0
ACCURACY_TARGET = 0.90


@dataclasses.dataclass(frozen=True)
class Config:
    """The script's options (one flag each)."""

    output_dir: str = option("/tmp/bam_world_measure", 'Where to build the world (replaced).')
    seed: int = option(0, 'World and training seed.')
    model: str = option("small_cnn", 'Model to train.')
    epochs: int = option(10, 'Maximum epochs per dataset.')
    budget_seconds: float = option(180.0, 'Training wall-clock budget per dataset.')
    output_json: Optional[str] = option(None, 'Optional JSON file for the figures.')


def run(config: Config):
    shutil.rmtree(config.output_dir, ignore_errors=True)
    started = time.time()
    info = synthetic.build_world(config.output_dir, seed=config.seed)
    generation = time.time() - started
    rows: list[tuple[str, str, float, float, Optional[dict]]] = [
        ("generation", "-", generation, GENERATION_TARGET_SECONDS, None)]
    reports = []
    for name in ("obj", "scene"):
        _, report = train.train_classifier(
            config.output_dir, name,
            RunOptions(model_name=config.model, recipe=train.BamRecipe(epochs=config.epochs),
                       seed=config.seed), max_seconds=config.budget_seconds)
        reports.append(report)
        rows.append((f"train {name}", f"{report['val_accuracy']:.4f}", report["train_seconds"],
                     config.budget_seconds, report))
    print(f"\nsynthetic world: {info['num_train_images']} train / {info['num_val_images']} val "
          f"images, {info['image_size']} px, model {config.model}, {os.cpu_count()} CPUs")
    print(f"{'step':<14}{'val acc':>9}{'seconds':>9}{'budget':>8}{'ratio':>7}{'epochs':>8}")
    for step, accuracy, seconds, budget, reported in rows:
        epochs = reported["epochs_run"] if reported else "-"
        print(f"{step:<14}{accuracy:>9}{seconds:>9.1f}{budget:>8.0f}{seconds / budget:>7.2f}"
              f"{epochs:>8}")
    ok = generation <= GENERATION_TARGET_SECONDS and all(
        r["val_accuracy"] >= ACCURACY_TARGET and r["train_seconds"] <= config.budget_seconds + 5
        for r in reports)
    print("targets met" if ok else "TARGETS MISSED")
    if config.output_json:
        with open(config.output_json, "w", encoding="utf-8") as handle:
            json.dump({"generation_seconds": generation, "training": reports}, handle, indent=2)
    return 0 if ok else 1


if __name__ == "__main__":
    run_binary(Config, run)
