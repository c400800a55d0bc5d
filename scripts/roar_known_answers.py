"""Runs ROAR's calibration experiments on a synthetic world and prints their top-1 table.

    python scripts/roar_known_answers.py [--image_size=32 --train_per_pair=50 --epochs=5]

Clean, oracle and random controls as in tests/test_roar_train.py, plus the oracle at 50% with
the mean fill and with ROAD's noisy linear fill (pixel ranking) beside the random map at 50%
with each fill: how much the *shape* of the hole leaks the class (ROAD's finding).
"""
import glob
import os
import sys
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from absl import app, flags  # noqa: E402

from bam import synthetic  # noqa: E402
from roar import data, train  # noqa: E402

FLAGS = flags.FLAGS
flags.DEFINE_integer("image_size", 32, "World image side.")
flags.DEFINE_integer("train_per_pair", 50, "Train images per (object, scene) pair.")
flags.DEFINE_integer("val_per_pair", 10, "Test images per pair.")
flags.DEFINE_float("epochs", 5, "Training epochs.")
flags.DEFINE_integer("seed", 1, "World seed (training seed 0).")

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


def main(argv):
    del argv
    size, t, v = FLAGS.image_size, FLAGS.train_per_pair, FLAGS.val_per_pair
    recipe = train.Recipe(**dict(train.SYNTHETIC_RECIPE, epochs=FLAGS.epochs),
                          decay_multipliers=(0.1,))
    with tempfile.TemporaryDirectory() as scratch:
        world = os.path.join(scratch, "world")
        synthetic.build_world(world, seed=FLAGS.seed, image_size=size, train_per_pair=t,
                              val_per_pair=v)
        files = {split: sorted(glob.glob(os.path.join(world, "records", f"{split}-*")))
                 for split in ("train", "validation")}
        print(f"| run ({size}-px world, {100 * t} train / {100 * v} test, {FLAGS.epochs:g} "
              "epochs) | top-1 |\n|---|---|", flush=True)
        for name, (control, ratio, keep, ranking, fill) in RUNS.items():
            config = data.MaskConfig(ratio=ratio, keep_information=keep, ranking=ranking,
                                     fill=fill)
            result = train.run_masked(
                files["train"], files["validation"], config, control=control, size=size,
                recipe=recipe, output_dir=os.path.join(scratch, "runs", str(len(name))))
            print(f"| {name} | {result['top1']:.3f} |", flush=True)


if __name__ == "__main__":
    app.run(main)
