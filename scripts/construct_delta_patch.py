"""Builds BAM's bamboo_forest_patch set with the delta patch (bam.md §8).

    python scripts/construct_delta_patch.py --data_dir=data/bam_synthetic \
        --model_path=models_dir/scene_only [--num_steps=300 --step_size=500 --alpha=0.01 \
        --beta=0.01 --batch_size=100]

Writes <data_dir>/bamboo_forest_patch/{val/<stem>.png, val.txt, val_loc.txt, val_mask,
patch_stats.csv} and prints how many patched images keep the model's prediction.
"""
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from absl import flags  # noqa: E402

import models  # noqa: E402
from bam import delta_patch  # noqa: E402
from models.errors import UserError, run_main  # noqa: E402

FLAGS = flags.FLAGS
flags.DEFINE_string("data_dir", None, "BAM data root (holds bamboo_forest/ and scene/).")
flags.DEFINE_string("model_path", None, "Exported scene_only model (models.export).")
flags.DEFINE_integer("num_steps", 300, "Gradient steps.")
flags.DEFINE_float("step_size", 500.0, "Gradient step size.")
flags.DEFINE_float("alpha", 0.01, "Weight of -||delta||.")
flags.DEFINE_float("beta", 0.01, "Weight of the out-of-range penalty.")
flags.DEFINE_integer("batch_size", None, "Images optimised together (default: all).")


def main(argv):
    del argv
    if not FLAGS.data_dir or not FLAGS.model_path:
        raise UserError("--data_dir and --model_path are required")
    result = delta_patch.construct_patches(
        FLAGS.data_dir, models.load(FLAGS.model_path), num_steps=FLAGS.num_steps,
        step_size=FLAGS.step_size, alpha=FLAGS.alpha, beta=FLAGS.beta,
        batch_size=FLAGS.batch_size)
    print(f"wrote {result['images']} patched images to {result['path']}; "
          f"{result['kept_prediction']} of {result['images']} keep the model's prediction "
          f"(mean logit change after reloading {result['mean_l2_after']:.3f})")


if __name__ == "__main__":
    run_main(main)
