"""Benchmarks ROAR's input pipeline and ROAD's imputation, each against a peer in the same run.

    python scripts/bench_roar.py

1. Training steps/s of small_cnn fed by the full masked TFRecord pipeline (parse, decode,
   random element mask at ratio 0.5, fill, flip, normalise) against the same model fed
   in-memory tensors (target: ratio >= 0.9).
2. ROAD noisy linear imputation, images/s of the batched CG (`roar.noisy_linear_impute`,
   float32, tol 1e-5) against scipy's sparse direct solve per image (ROAD's method), on random
   holes at fraction 0.5 (target: >= 5x).
"""
import models  # noqa: F401, I001  (first: TensorFlow loads quietly)
import dataclasses
import glob
import os
import tempfile
import time

import keras
import numpy as np
import tensorflow as tf

from models.foundation import provenance
from models.foundation.cli import option, run_binary
from roar import imputation, masked_data
from saliency_gen.world import synthetic


def _steps_per_second(model, dataset, steps):
    model.fit(dataset, epochs=1, steps_per_epoch=5, verbose=0)  # trace and warm up
    started = time.perf_counter()
    model.fit(dataset, epochs=1, steps_per_epoch=steps, verbose=0)
    return steps / (time.perf_counter() - started)


def bench_pipeline(world_dir, config):
    files = sorted(glob.glob(os.path.join(world_dir, "records", "train-*")))
    size = config.image_size
    masked = masked_data.masked_dataset(files, masked_data.Records(control="random", size=size),
                                        masked_data.MaskConfig(ratio=0.5), training=True,
                                        batch_size=config.batch_size)
    images, labels = [], []
    for x, y in masked.take(20):
        images.append(x.numpy())
        labels.append(y.numpy())
    memory = tf.data.Dataset.from_tensor_slices(
        (np.concatenate(images), np.concatenate(labels))).repeat().batch(
        config.batch_size, drop_remainder=True).prefetch(tf.data.AUTOTUNE)
    results = {}
    for name, dataset in (("in-memory tensors", memory), ("masked TFRecords", masked.repeat())):
        keras.utils.set_random_seed(0)
        model = models.build("small_cnn", 10, (size, size, 3))
        model.compile(keras.optimizers.Adam(1e-3),
                      keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        results[name] = _steps_per_second(model, dataset, config.steps)
    return results


def bench_imputation(config):
    rng = np.random.default_rng(0)
    size = config.road_size
    images = rng.uniform(size=(config.road_images, size, size, 3)).astype(np.float32)
    holes = rng.uniform(size=(config.road_images, size, size)) < 0.5
    imputation.noisy_linear_impute(images, holes)  # trace (the same shapes as the timed call)
    started = time.perf_counter()
    result, info = imputation.noisy_linear_impute(images, holes, return_info=True)
    batched = config.road_images / (time.perf_counter() - started)
    started = time.perf_counter()
    reference = [imputation.sparse_direct_impute(images[n], holes[n])
                 for n in range(config.scipy_images)]
    direct = config.scipy_images / (time.perf_counter() - started)
    difference = max(float(np.abs(result.numpy()[n] - reference[n]).max())
                     for n in range(config.scipy_images))
    return batched, direct, difference, info


@dataclasses.dataclass(frozen=True)
class Config:
    """The script's options (one flag each)."""

    image_size: int = option(64, 'Synthetic world image side.')
    train_per_pair: int = option(20, 'Synthetic world size (train images per pair).')
    steps: int = option(150, 'Training steps timed per feeding mode.')
    batch_size: int = option(64, 'Training batch.')
    road_size: int = option(224, 'Image side for the imputation benchmark.')
    road_images: int = option(16, 'Images imputed by the batched solver.')
    scipy_images: int = option(4, 'Images imputed by scipy (per-image rate).')


def run(config: Config):
    print(f"machine: {provenance.machine()}", flush=True)
    with tempfile.TemporaryDirectory() as scratch:
        world = os.path.join(scratch, "world")
        synthetic.build_world(world, seed=0, image_size=config.image_size,
                              train_per_pair=config.train_per_pair, val_per_pair=1)
        steps = bench_pipeline(world, config)
    memory, masked = steps["in-memory tensors"], steps["masked TFRecords"]
    print(f"training small_cnn at {config.image_size} px, batch {config.batch_size}, "
          f"{config.steps} steps, {os.cpu_count()} CPUs")
    print(f"| feeding | steps/s |\n|---|---|\n| in-memory tensors | {memory:.2f} |\n"
          f"| masked TFRecord pipeline | {masked:.2f} |")
    print(f"pipeline / in-memory = {masked / memory:.2f} (target >= 0.9)\n")
    batched, direct, difference, info = bench_imputation(config)
    print(f"ROAD imputation at {config.road_size}x{config.road_size}x3, half the pixels removed")
    print(f"| solver | images/s |\n|---|---|\n| batched CG (float32, tol 1e-5, "
          f"{info['iterations']} iterations) | {batched:.2f} |\n| scipy spsolve per image | "
          f"{direct:.2f} |")
    print(f"batched / scipy = {batched / direct:.1f}x (target >= 5x); max |difference| "
          f"{difference:.2e}")


if __name__ == "__main__":
    run_binary(Config, run)
