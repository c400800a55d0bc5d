"""Builds the synthetic BAM world (procedural objects pasted into procedural scenes).

    python scripts/construct_synthetic_bam.py --output_dir=data/bam_synthetic --seed=0

Writes bam.md's layout (obj, scene, scene_only, dog_bedroom, bamboo_forest, coco/segments, tcav)
and image TFRecords under `records/`; see docs/synthetic_world.md. Same seed, same bytes.
"""
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from absl import flags  # noqa: E402
from tqdm import tqdm  # noqa: E402

from bam import synthetic  # noqa: E402
from models.errors import run_main  # noqa: E402

FLAGS = flags.FLAGS
flags.DEFINE_string("output_dir", None, "Directory to build the world in (created).")
flags.DEFINE_integer("seed", 0, "Seed of every random choice; same seed, byte-identical output.")
flags.DEFINE_integer("image_size", 64, "Side S of the square images (BAM's real images: 128).")
flags.DEFINE_integer("train_per_pair", 100,
                     "Train images per (object, scene) pair (real BAM: 900).")
flags.DEFINE_integer("val_per_pair", 100, "Val images per (object, scene) pair (real BAM: 100).")
flags.DEFINE_bool("overwrite", False, "Replace an existing world in --output_dir.")
flags.mark_flag_as_required("output_dir")


def main(argv):
    del argv
    with tqdm(total=FLAGS.train_per_pair + FLAGS.val_per_pair, unit="instance",
              desc="synthetic BAM world", disable=None) as bar:
        info = synthetic.build_world(
            FLAGS.output_dir, seed=FLAGS.seed, image_size=FLAGS.image_size,
            train_per_pair=FLAGS.train_per_pair, val_per_pair=FLAGS.val_per_pair,
            overwrite=FLAGS.overwrite, progress=lambda done, total: bar.update(1))
    if info["reused"]:
        print(f"{FLAGS.output_dir} already holds this world (seed {info['seed']}); kept it.")
    else:
        print(f"built {FLAGS.output_dir}: {info['num_train_images']} train and "
              f"{info['num_val_images']} val images of {info['image_size']}x{info['image_size']}"
              f" px in {info['seconds']:.1f} s")


if __name__ == "__main__":
    run_main(main)
