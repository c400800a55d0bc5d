"""Benchmarks ROAR's input pipeline and ROAD's imputation, each against a peer in the same run.

    python scripts/bench_roar.py

1. Training steps/s of small_cnn fed by the full masked TFRecord pipeline (parse, decode,
   random element mask at ratio 0.5, fill, flip, normalise) against the same model fed
   in-memory tensors (target: ratio >= 0.9).
2. ROAD noisy linear imputation, images/s of the batched CG (`roar.noisy_linear_impute`,
   float32, tol 1e-5) against scipy's sparse direct solve per image (ROAD's method), on random
   holes at fraction 0.5 (target: >= 5x).
"""
import glob
import os
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from absl import app, flags  # noqa: E402

import models  # noqa: E402
from bam import synthetic  # noqa: E402
from roar import data, imputation  # noqa: E402

FLAGS = flags.FLAGS
flags.DEFINE_integer("image_size", 64, "Synthetic world image side.")
flags.DEFINE_integer("train_per_pair", 20, "Synthetic world size (train images per pair).")
flags.DEFINE_integer("steps", 150, "Training steps timed per feeding mode.")
flags.DEFINE_integer("batch_size", 64, "Training batch.")
flags.DEFINE_integer("road_size", 224, "Image side for the imputation benchmark.")
flags.DEFINE_integer("road_images", 16, "Images imputed by the batched solver.")
flags.DEFINE_integer("scipy_images", 4, "Images imputed by scipy (per-image rate).")


def _steps_per_second(model, dataset, steps):
    model.fit(dataset, epochs=1, steps_per_epoch=5, verbose=0)  # trace and warm up
    started = time.perf_counter()
    model.fit(dataset, epochs=1, steps_per_epoch=steps, verbose=0)
    return steps / (time.perf_counter() - started)


def bench_pipeline(world_dir):
    files = sorted(glob.glob(os.path.join(world_dir, "records", "train-*")))
    size = FLAGS.image_size
    config = data.MaskConfig(ratio=0.5)
    masked = data.masked_dataset(files, "images", config, training=True,
                                 batch_size=FLAGS.batch_size, size=size, control="random")
    images, labels = [], []
    for x, y in masked.take(20):
        images.append(x.numpy())
        labels.append(y.numpy())
    memory = tf.data.Dataset.from_tensor_slices(
        (np.concatenate(images), np.concatenate(labels))).repeat().batch(
        FLAGS.batch_size, drop_remainder=True).prefetch(tf.data.AUTOTUNE)
    results = {}
    for name, dataset in (("in-memory tensors", memory), ("masked TFRecords", masked.repeat())):
        keras.utils.set_random_seed(0)
        model = models.build("small_cnn", 10, (size, size, 3))
        model.compile(keras.optimizers.Adam(1e-3),
                      keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        results[name] = _steps_per_second(model, dataset, FLAGS.steps)
    return results


def bench_imputation():
    rng = np.random.default_rng(0)
    size = FLAGS.road_size
    images = rng.uniform(size=(FLAGS.road_images, size, size, 3)).astype(np.float32)
    holes = rng.uniform(size=(FLAGS.road_images, size, size)) < 0.5
    imputation.noisy_linear_impute(images[:2], holes[:2])  # trace
    started = time.perf_counter()
    result, info = imputation.noisy_linear_impute(images, holes, return_info=True)
    batched = FLAGS.road_images / (time.perf_counter() - started)
    started = time.perf_counter()
    reference = [imputation.sparse_direct_impute(images[n], holes[n])
                 for n in range(FLAGS.scipy_images)]
    direct = FLAGS.scipy_images / (time.perf_counter() - started)
    difference = max(float(np.abs(result.numpy()[n] - reference[n]).max())
                     for n in range(FLAGS.scipy_images))
    return batched, direct, difference, info


def main(argv):
    del argv
    with tempfile.TemporaryDirectory() as scratch:
        world = os.path.join(scratch, "world")
        synthetic.build_world(world, seed=0, image_size=FLAGS.image_size,
                              train_per_pair=FLAGS.train_per_pair, val_per_pair=1)
        steps = bench_pipeline(world)
    memory, masked = steps["in-memory tensors"], steps["masked TFRecords"]
    print(f"training small_cnn at {FLAGS.image_size} px, batch {FLAGS.batch_size}, "
          f"{FLAGS.steps} steps, {os.cpu_count()} CPUs")
    print(f"| feeding | steps/s |\n|---|---|\n| in-memory tensors | {memory:.2f} |\n"
          f"| masked TFRecord pipeline | {masked:.2f} |")
    print(f"pipeline / in-memory = {masked / memory:.2f} (target >= 0.9)\n")
    batched, direct, difference, info = bench_imputation()
    print(f"ROAD imputation at {FLAGS.road_size}x{FLAGS.road_size}x3, half the pixels removed")
    print(f"| solver | images/s |\n|---|---|\n| batched CG (float32, tol 1e-5, "
          f"{info['iterations']} iterations) | {batched:.2f} |\n| scipy spsolve per image | "
          f"{direct:.2f} |")
    print(f"batched / scipy = {batched / direct:.1f}x (target >= 5x); max |difference| "
          f"{difference:.2e}")


if __name__ == "__main__":
    app.run(main)
