"""Builds the synthetic BAM world (procedural objects pasted into procedural scenes).

    python scripts/construct_synthetic_bam.py --output_dir=data/bam_synthetic --seed=0

Writes BAM's layout (docs/bam.md) (obj, scene, scene_only, dog_bedroom, bamboo_forest,
coco/segments, tcav) and image TFRecords under `records/`; see docs/synthetic_world.md. Same seed,
same bytes.
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
    from saliency_gen.data.world import synthetic
else:
    synthetic = lazy_module("saliency_gen.data.world.synthetic")


@dataclasses.dataclass(frozen=True)
class Config:
    """The script's options (one flag each)."""

    output_dir: Optional[str] = option(None, 'Directory to build the world in (created).')
    seed: int = option(0, 'Seed of every random choice; same seed, byte-identical output.')
    image_size: int = option(64, "Side S of the square images (BAM's real images: 128).")
    train_per_pair: int = option(100, 'Train images per (object, scene) pair (real BAM: 900).')
    val_per_pair: int = option(100, 'Val images per (object, scene) pair (real BAM: 100).')
    overwrite: bool = option(False, 'Replace an existing world in --output_dir.')


def run(config: Config):
    if not config.output_dir:
        raise UserError("--output_dir is required")
    with progress.bar(config.train_per_pair + config.val_per_pair, "synthetic BAM world",
                      "instance") as bar:
        info = synthetic.build_world(
            config.output_dir, seed=config.seed, image_size=config.image_size,
            train_per_pair=config.train_per_pair, val_per_pair=config.val_per_pair,
            overwrite=config.overwrite, progress=lambda done, total: bar.update(1))
    if info["reused"]:
        print(f"{config.output_dir} already holds this world (seed {info['seed']}); kept it.")
    else:
        print(f"built {config.output_dir}: {info['num_train_images']} train and "
              f"{info['num_val_images']} val images of {info['image_size']}x{info['image_size']}"
              f" px in {info['seconds']:.1f} s")


if __name__ == "__main__":
    run_binary(Config, run)
