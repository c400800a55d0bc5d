"""Builds BAM's bamboo_forest_patch set with the delta patch (docs/bam.md, "The delta patch").

    python scripts/construct_delta_patch.py --data_dir=data/bam_synthetic \
        --model_path=models_dir/scene_only [--num_steps=300 --step_size=500 --alpha=0.01 \
        --beta=0.01 --batch_size=100]

Writes <data_dir>/bamboo_forest_patch/{val/<stem>.png, val.txt, val_loc.txt, val_mask,
patch_stats.csv} and prints how many patched images keep the model's prediction.
"""
import dataclasses
from typing import TYPE_CHECKING, Optional

import models  # noqa: F401, I001  (first: TensorFlow loads quietly)
from models.foundation.cli import option, run_binary
from models.foundation.errors import UserError
from models.foundation.lazy import lazy_module

# Loaded on first use: --help and a bad flag are answered before TensorFlow starts
# (docs/architecture.md, "Light imports").
if TYPE_CHECKING:  # the type checker's view of the same modules
    from bam import delta_patch
else:
    delta_patch = lazy_module("bam.delta_patch")


@dataclasses.dataclass(frozen=True)
class Config:
    """The script's options (one flag each)."""

    data_dir: Optional[str] = option(None, 'BAM data root (holds bamboo_forest/ and scene/).')
    model_path: Optional[str] = option(None, 'Exported scene_only model (models.export).')
    num_steps: int = option(300, 'Gradient steps.')
    step_size: float = option(500.0, 'Gradient step size.')
    alpha: float = option(0.01, 'Weight of -||delta||.')
    beta: float = option(0.01, 'Weight of the out-of-range penalty.')
    batch_size: Optional[int] = option(None, 'Images optimised together (default: all).')


def run(config: Config):
    if not config.data_dir or not config.model_path:
        raise UserError("--data_dir and --model_path are required")
    result = delta_patch.construct_patches(
        config.data_dir, models.load(config.model_path), num_steps=config.num_steps,
        step_size=config.step_size, alpha=config.alpha, beta=config.beta,
        batch_size=config.batch_size)
    print(f"wrote {result['images']} patched images to {result['path']}; "
          f"{result['kept_prediction']} of {result['images']} keep the model's prediction "
          f"(mean logit change after reloading {result['mean_l2_after']:.3f})")


if __name__ == "__main__":
    run_binary(Config, run)
