"""Benchmarks ROAR's input pipeline and ROAD's imputation, each against a peer in the same run.

    python scripts/bench_roar.py

1. Training steps/s of small_cnn fed by the full masked TFRecord pipeline (parse, decode,
   random element mask at ratio 0.5, fill, flip, normalise) against the same model fed
   in-memory tensors (target: ratio >= 0.9).
2. ROAD noisy linear imputation, images/s of the batched, XLA-compiled CG
   (`roar.noisy_linear_impute`, float32, tol 1e-5) against the same solver without XLA and
   against scipy's sparse direct solve per image (ROAD's method), on half the pixels removed:
   scattered at random, and in large smooth holes as saliency rankings make (target: >= 5x
   scipy); and on all but the image's edge.
"""
import dataclasses
import glob
import os
import tempfile
import time
from typing import TYPE_CHECKING

import numpy as np

import models  # noqa: F401, I001  (first: TensorFlow loads quietly)
from models.foundation import progress, provenance
from models.foundation.cli import option, run_binary
from models.foundation.lazy import lazy_module

# Loaded on first use: --help and a bad flag are answered before TensorFlow starts
# (docs/architecture.md, "Light imports").
if TYPE_CHECKING:  # the type checker's view of the same modules
    import keras
    import scipy.ndimage as scipy_ndimage
    import tensorflow as tf

    from roar import masked_data
    from saliency_gen.data import imputation
    from saliency_gen.data.world import synthetic
else:
    keras = lazy_module("keras")
    scipy_ndimage = lazy_module("scipy.ndimage")
    tf = lazy_module("tensorflow")
    imputation = lazy_module("saliency_gen.data.imputation")
    masked_data = lazy_module("roar.masked_data")
    synthetic = lazy_module("saliency_gen.data.world.synthetic")


def _steps_per_second(model, dataset, steps):
    model.fit(dataset, epochs=1, steps_per_epoch=5, verbose=0)  # trace and warm up
    started = time.perf_counter()
    model.fit(dataset, epochs=1, steps_per_epoch=steps, verbose=0)
    return steps / (time.perf_counter() - started)


def bench_pipeline(world_dir, config, done):
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
        done.update(1)
    return results


def _holes(kind, rng, count, size):
    """[count, size, size] bool: half the pixels, scattered at random or the top half of a
    smooth random field (large holes, as saliency-ranked removal makes); or "framed": every
    pixel but the image's edge (the case the multigrid's edge scaling serves worst)."""
    if kind == "framed":
        holes = np.ones((count, size, size), bool)
        holes[:, [0, -1], :] = holes[:, :, [0, -1]] = False
        return holes
    field = rng.normal(size=(count, size, size))
    if kind == "smooth":
        field = np.stack([scipy_ndimage.gaussian_filter(plane, size / 10) for plane in field])
    return field > np.median(field, axis=(1, 2), keepdims=True)


def _rate(solve, images, holes, repeats=2):
    """(images/s, solution) of `solve` (images, holes) after a first call that traces it."""
    solve(images, holes)
    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        result = solve(images, holes)
        best = min(best, time.perf_counter() - started)
    return len(images) / best, result


def bench_imputation(config, done):
    """{hole kind: row}: the XLA-compiled batched solver, the same solver traced without XLA
    (the peer: `imputation.solve`'s function without `jit_compile`), and scipy's direct
    solve."""
    rng = np.random.default_rng(0)
    size = config.road_size
    tol, limit = tf.constant(1e-5), tf.constant(2000)
    graph = tf.function(imputation.solve.python_function)  # the same algorithm, no XLA
    rows = {}
    for kind in ("scattered", "smooth", "framed"):
        images = rng.uniform(size=(config.road_images, size, size, 3)).astype(np.float32)
        holes = _holes(kind, rng, config.road_images, size)
        compiled, (result, info) = _rate(
            lambda x, h: imputation.noisy_linear_impute(x, h, return_info=True), images, holes)
        done.update(1)
        uncompiled, (solution, _, _) = _rate(
            lambda x, h: graph(tf.constant(x), tf.constant(h), tol, limit), images, holes)
        done.update(1)
        # the uncompiled solver's imputed images (noise-free, as `result`)
        plain = np.where(holes[..., None], solution.numpy(), images)
        started = time.perf_counter()
        reference = [imputation.sparse_direct_impute(images[n], holes[n])
                     for n in range(config.scipy_images)]
        direct = config.scipy_images / (time.perf_counter() - started)
        done.update(1)
        difference = max(float(np.abs(result.numpy()[n] - reference[n]).max())
                         for n in range(config.scipy_images))
        rows[kind] = {"compiled": compiled, "graph": uncompiled, "scipy": direct,
                      "difference": difference, "iterations": info["iterations"],
                      "xla_difference": float(np.abs(result.numpy() - plain).max())}
    return rows


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
    # the world, two feeding modes, three solvers on three kinds of holes
    done = progress.bar(1 + 2 + 3 * 3, "bench_roar: timed parts", "part")
    with tempfile.TemporaryDirectory() as scratch:
        world = os.path.join(scratch, "world")
        synthetic.build_world(world, seed=0, image_size=config.image_size,
                              train_per_pair=config.train_per_pair, val_per_pair=1)
        done.update(1)
        steps = bench_pipeline(world, config, done)
    memory, masked = steps["in-memory tensors"], steps["masked TFRecords"]
    print(f"training small_cnn at {config.image_size} px, batch {config.batch_size}, "
          f"{config.steps} steps, {os.cpu_count()} CPUs")
    print(f"| feeding | steps/s |\n|---|---|\n| in-memory tensors | {memory:.2f} |\n"
          f"| masked TFRecord pipeline | {masked:.2f} |")
    print(f"pipeline / in-memory = {masked / memory:.2f} (target >= 0.9)\n")
    rows = bench_imputation(config, done)
    done.close()
    print(f"ROAD imputation at {config.road_size}x{config.road_size}x3, half the pixels removed "
          "(framed: all but the edge), "
          f"{config.road_images} images a batch (float32, tol 1e-5), images/s")
    print("| holes | iterations | XLA-compiled | without XLA | scipy spsolve | compiled / "
          "without | compiled / scipy | max difference from scipy | from without XLA |")
    print("|---|---|---|---|---|---|---|---|---|")
    for kind, row in rows.items():
        print(f"| {kind} | {row['iterations']} | {row['compiled']:.2f} | {row['graph']:.2f} | "
              f"{row['scipy']:.2f} | {row['compiled'] / row['graph']:.1f}x | "
              f"{row['compiled'] / row['scipy']:.1f}x | {row['difference']:.2e} | "
              f"{row['xla_difference']:.2e} |")
    print("target: compiled / scipy >= 5x")


if __name__ == "__main__":
    run_binary(Config, run)
