"""Builds the real BAM dataset from MSCOCO 2017 train and MiniPlaces train.

    python scripts/construct_bam_dataset.py --coco_dir=coco --miniplaces_dir=miniplaces \
        --output_dir=data --seed=0

`--coco_dir` holds `annotations/instances_train2017.json` and `train2017/`; `--miniplaces_dir` holds
`images/train/<letter>/<category>/`. Writes BAM's layout (docs/bam.md) (coco/segments, obj, scene,
scene_only, dog_bedroom, bamboo_forest, tcav, scene1..scene10) and `bam_dataset.json`; an
interrupted run resumes where it stopped. See docs/bam.md ("The real dataset").
"""
import dataclasses
from typing import TYPE_CHECKING, Optional

import models  # noqa: F401, I001  (first: TensorFlow loads quietly)
from models.foundation import progress
from models.foundation.cli import option, run_binary
from models.foundation.errors import UserError
from models.foundation.lazy import lazy_module

# Loaded on first use: --help and a bad flag are answered before TensorFlow starts
# (docs/architecture.md, "Light imports").
if TYPE_CHECKING:  # the type checker's view of the same modules
    from bam import coco_miniplaces
else:
    coco_miniplaces = lazy_module("bam.coco_miniplaces")


class _Bars:
    """One tqdm bar per stage, opened on the stage's first report."""

    def __init__(self):
        self.bars = {}

    def __call__(self, stage, done, total):
        bar = self.bars.get(stage)
        if bar is None:
            for other in self.bars.values():
                other.close()
            bar = self.bars[stage] = progress.bar(total, stage, "img")
        bar.update(done - bar.n)

    def close(self):
        for bar in self.bars.values():
            bar.close()


@dataclasses.dataclass(frozen=True)
class Config:
    """The script's options (one flag each)."""

    coco_dir: Optional[str] = option(None, 'MSCOCO 2017 root (annotations/, train2017/).')
    miniplaces_dir: Optional[str] = option(None, 'MiniPlaces root (images/train/...).')
    output_dir: str = option("data", 'Where to write the dataset.')
    seed: int = option(0, 'Seed of object size and position and of the TCAV draws.')
    images_per_class: int = option(
        1000,
        'Object instances and scene images per class (the original: 1000).')
    val_per_class: int = option(100, 'How many of them are validation (the original: 100).')
    overwrite: bool = option(False, 'Replace existing outputs in --output_dir.')


def run(config: Config):
    if not config.coco_dir:
        raise UserError("--coco_dir is required")
    if not config.miniplaces_dir:
        raise UserError("--miniplaces_dir is required")
    bars = _Bars()
    try:
        info = coco_miniplaces.build_dataset(
            config.coco_dir, config.miniplaces_dir, config.output_dir, seed=config.seed,
            images_per_class=config.images_per_class, val_per_class=config.val_per_class,
            progress=bars, overwrite=config.overwrite)
    finally:
        bars.close()
    if info["reused"]:
        print(f"{config.output_dir} already holds this dataset (seed {info['seed']}); kept it.")
        return
    print(f"{'object':<10} {'COCO id':>7} {'used':>5} " +
          " ".join(f"{reason:>10}" for reason in coco_miniplaces.SKIP_REASONS))
    for obj, report in info["extraction"].items():
        print(f"{obj:<10} {report['category_id']:>7} {report['accepted']:>5} " +
              " ".join(f"{report['skipped'][reason]:>10}"
                       for reason in coco_miniplaces.SKIP_REASONS))
    print(f"built {config.output_dir}: {info['num_train_images']} train and "
          f"{info['num_val_images']} val composites, relative sets scene1..scene10, in "
          f"{info['seconds']:.0f} s")


if __name__ == "__main__":
    run_binary(Config, run)
