"""Builds the real BAM dataset from MSCOCO 2017 train and MiniPlaces train.

    python scripts/construct_bam_dataset.py --coco_dir=coco --miniplaces_dir=miniplaces \
        --output_dir=data --seed=0

`--coco_dir` holds `annotations/instances_train2017.json` and `train2017/`; `--miniplaces_dir`
holds `images/train/<letter>/<category>/`. Writes bam.md's layout (coco/segments, obj, scene,
scene_only, dog_bedroom, bamboo_forest, tcav, scene1..scene10) and `bam_dataset.json`; an
interrupted run resumes where it stopped. See docs/bam.md ("The real dataset").
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from absl import flags  # noqa: E402
from tqdm import tqdm  # noqa: E402

from bam import coco_miniplaces  # noqa: E402
from models.errors import run_main  # noqa: E402

FLAGS = flags.FLAGS
flags.DEFINE_string("coco_dir", None, "MSCOCO 2017 root (annotations/, train2017/).")
flags.DEFINE_string("miniplaces_dir", None, "MiniPlaces root (images/train/...).")
flags.DEFINE_string("output_dir", "data", "Where to write the dataset.")
flags.DEFINE_integer("seed", 0, "Seed of object size and position and of the TCAV draws.")
flags.DEFINE_integer("images_per_class", 1000,
                     "Object instances and scene images per class (the original: 1000).")
flags.DEFINE_integer("val_per_class", 100, "How many of them are validation (the original: 100).")
flags.DEFINE_bool("overwrite", False, "Replace existing outputs in --output_dir.")
flags.mark_flag_as_required("coco_dir")
flags.mark_flag_as_required("miniplaces_dir")


class _Bars:
    """One tqdm bar per stage, opened on the stage's first report."""

    def __init__(self):
        self.bars = {}

    def __call__(self, stage, done, total):
        bar = self.bars.get(stage)
        if bar is None:
            for other in self.bars.values():
                other.close()
            bar = self.bars[stage] = tqdm(total=total, desc=stage, unit="img", disable=None)
        bar.update(done - bar.n)

    def close(self):
        for bar in self.bars.values():
            bar.close()


def main(argv):
    del argv
    bars = _Bars()
    try:
        info = coco_miniplaces.build_dataset(
            FLAGS.coco_dir, FLAGS.miniplaces_dir, FLAGS.output_dir, seed=FLAGS.seed,
            images_per_class=FLAGS.images_per_class, val_per_class=FLAGS.val_per_class,
            progress=bars, overwrite=FLAGS.overwrite)
    finally:
        bars.close()
    if info["reused"]:
        print(f"{FLAGS.output_dir} already holds this dataset (seed {info['seed']}); kept it.")
        return
    print(f"{'object':<10} {'COCO id':>7} {'used':>5} " +
          " ".join(f"{reason:>10}" for reason in coco_miniplaces.SKIP_REASONS))
    for obj, report in info["extraction"].items():
        print(f"{obj:<10} {report['category_id']:>7} {report['accepted']:>5} " +
              " ".join(f"{report['skipped'][reason]:>10}"
                       for reason in coco_miniplaces.SKIP_REASONS))
    print(f"built {FLAGS.output_dir}: {info['num_train_images']} train and "
          f"{info['num_val_images']} val composites, relative sets scene1..scene10, in "
          f"{info['seconds']:.0f} s")


if __name__ == "__main__":
    run_main(main)
