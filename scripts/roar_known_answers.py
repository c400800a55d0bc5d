"""Runs ROAR's calibration experiments on a synthetic world and prints their top-1 table.

    python scripts/roar_known_answers.py [--image_size=32 --train_per_pair=50 --epochs=5]

Clean, oracle and random controls as in tests/test_roar_train.py, plus the oracle at 50% with
the mean fill and with ROAD's noisy linear fill (pixel ranking) beside the random map at 50%
with each fill: how much the *shape* of the hole leaks the class (ROAD's finding).
"""
import dataclasses
import glob
import os
import tempfile
from typing import TYPE_CHECKING

import models  # noqa: F401, I001  (first: TensorFlow loads quietly)
from models.foundation import progress
from models.foundation.cli import option, run_binary
from models.foundation.lazy import lazy_module
from models.training import recipes
from roar import train

# Loaded on first use: --help and a bad flag are answered before TensorFlow starts
# (docs/architecture.md, "Light imports").
if TYPE_CHECKING:  # the type checker's view of the same modules
    from roar import masked_data
    from saliency_gen.data.world import synthetic
else:
    masked_data = lazy_module("roar.masked_data")
    synthetic = lazy_module("saliency_gen.data.world.synthetic")

RUNS = {  # name: (control, ratio, keep, ranking, fill)
    "clean": ("none", 0.0, False, "element", "mean"),
    "oracle, 90% removed, mean": ("oracle", 0.9, False, "element", "mean"),
    "random, 50% removed, mean": ("random", 0.5, False, "element", "mean"),
    "KAR oracle, 30% kept, mean": ("oracle", 0.7, True, "element", "mean"),
    "KAR random, 30% kept, mean": ("random", 0.7, True, "element", "mean"),
    "oracle, 50% removed, mean (pixel)": ("oracle", 0.5, False, "pixel", "mean"),
    "oracle, 50% removed, ROAD": ("oracle", 0.5, False, "pixel", "noisy_linear"),
    "random, 50% removed, mean (pixel)": ("random", 0.5, False, "pixel", "mean"),
    "random, 50% removed, ROAD": ("random", 0.5, False, "pixel", "noisy_linear"),
}


@dataclasses.dataclass(frozen=True)
class Config:
    """The script's options (one flag each)."""

    image_size: int = option(32, 'World image side.')
    train_per_pair: int = option(50, 'Train images per (object, scene) pair.')
    val_per_pair: int = option(10, 'Test images per pair.')
    epochs: float = option(5, 'Training epochs.')
    seed: int = option(1, 'World seed (training seed 0).')


def run(config: Config):
    size, t, v = config.image_size, config.train_per_pair, config.val_per_pair
    recipe = recipes.with_overrides(recipes.SYNTHETIC_RECIPE, epochs=config.epochs)
    with tempfile.TemporaryDirectory() as scratch:
        world = os.path.join(scratch, "world")
        synthetic.build_world(world, seed=config.seed, image_size=size, train_per_pair=t,
                              val_per_pair=v)
        files = {split: sorted(glob.glob(os.path.join(world, "records", f"{split}-*")))
                 for split in ("train", "validation")}
        print(f"| run ({size}-px world, {100 * t} train / {100 * v} test, {config.epochs:g} "
              "epochs) | top-1 |\n|---|---|", flush=True)
        trained = progress.bar(len(RUNS), "roar_known_answers: retrainings", "run")
        for name, (control, ratio, keep, ranking, fill) in RUNS.items():
            mask = masked_data.MaskConfig(ratio=ratio, keep_information=keep, ranking=ranking,
                                          fill=fill)
            result = train.run_masked(
                files["train"], files["validation"], mask,
                masked_data.Records(control=control, size=size), recipes.RunOptions(recipe=recipe),
                output_dir=os.path.join(scratch, "runs", str(len(name))))
            trained.write(f"| {name} | {result['top1']:.3f} |")
            trained.update(1)
        trained.close()


if __name__ == "__main__":
    run_binary(Config, run)
