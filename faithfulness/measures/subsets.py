"""The one batched computation of the random-subset measures (docs/measures.md, "Faithfulness"):
for each image and run, a random subset of `subset_size` of the image's values is replaced by
the baseline; the model's output for the explained class and the map's sum over the subset,
every (image, run) item scored in fixed-size chunks inside one traced function (the chunked
executor). Each item's subset is drawn in the graph from its own key (seed, image id, run), so
the values do not depend on the chunk size or on the other images of the call.
"""
import math
from typing import Any

import numpy as np
import tensorflow as tf

from faithfulness.measures.perturbation import class_outputs, model_adapter
from models.foundation import executor, workload


def item_uniform(keys: tf.Tensor, image: tf.Tensor, draw: tf.Tensor, size: int) -> tf.Tensor:
    """float32 [n, size]: U(0, 1) draws of each item (an image's `draw`-th), keyed by the
    image's key plus the draw (inside a traced function)."""
    own = tf.gather(keys, image) + tf.stack(
        [tf.cast(draw, tf.int64), tf.zeros_like(draw, tf.int64)], axis=1)
    return tf.map_fn(lambda key: tf.random.stateless_uniform([size], key), own,
                     fn_output_signature=tf.float32)


def _cut(count: int, size: int) -> tuple[float, int]:
    """(cut, room): of `count` U(0, 1) draws, those at or above `cut` number `size` plus ten
    standard deviations on average, and at most `room` but with a negligible chance."""
    share = min(1.0, (size + 10 * math.sqrt(size) + 16) / count)
    spread = 10 * math.sqrt(count * share * (1 - share))
    return 1.0 - share, min(count, int(math.ceil(count * share + spread + 16)))


def largest_indices(noise: tf.Tensor, size: int) -> tf.Tensor:
    """int32 [n, size]: the indices of each row's `size` largest values of U(0, 1) draws
    `noise` [n, count], the set `tf.math.top_k` gives (the lower index first among equals), in
    no particular order (docs/measures.md, "Speed"). A chunk whose every row has between `size`
    and room values above the cut (`_cut`) ranks only those; any other chunk, or a `size` near
    half the row, ranks whole rows."""
    count = int(noise.shape[1])
    cut, room = _cut(count, size)

    def whole():
        return tf.math.top_k(noise, k=size, sorted=False)[1]
    if 2 * room > count:
        return whole()
    above = noise >= cut
    counts = tf.reduce_sum(tf.cast(above, tf.int32), axis=1)

    def above_cut():
        where = tf.where(above)  # row-major: a row's candidates in index order
        index = tf.RaggedTensor.from_value_rowids(
            tf.cast(where[:, 1], tf.int32), where[:, 0],
            nrows=tf.shape(noise, out_type=tf.int64)[0]).to_tensor(-1, shape=[None, room])
        values = tf.where(index >= 0, tf.gather(noise, tf.maximum(index, 0), batch_dims=1),
                          -1.0)
        return tf.gather(index, tf.math.top_k(values, k=size, sorted=False)[1], batch_dims=1)
    return tf.cond(tf.reduce_all((counts >= size) & (counts <= room)), above_cut, whole)


@tf.function(jit_compile=True, autograph=False)
def _subset_images(x, baseline, image, chosen):
    """(perturbed images, mask): each item's image of `x` with its `chosen` flat values
    replaced by its baseline value, in one XLA-compiled pass (exact)."""
    shape = tf.shape(chosen)
    rows = tf.broadcast_to(tf.range(shape[0])[:, None], shape)
    count = tf.size(x[0])
    mask = tf.scatter_nd(tf.stack([rows, chosen], axis=-1), tf.ones_like(chosen),
                         [shape[0], count]) > 0
    mask = tf.reshape(mask, tf.concat([shape[:1], tf.shape(x)[1:]], axis=0))
    return tf.where(mask, tf.gather(baseline, image)[:, None, None, None],
                    tf.gather(x, image)), mask


def subset_scores(model: Any, x: np.ndarray, features: np.ndarray, baseline: np.ndarray,
                  classes: np.ndarray, keys: np.ndarray, *, runs: int, subset_size: int,
                  softmax: bool = True, batch_size: int = 64) -> tuple[np.ndarray, np.ndarray]:
    """(output float64 [N, runs], the map's sum over the subset float64 [N, runs]) of `x`
    ([N, H, W, C]) with each run's random subset of `subset_size` values replaced by the
    image's `baseline` value ([N]); `features` [N, H, W, C] is the map broadcast over the
    image's values; `keys` int64 [N, 2] key each image's draws (run r adds r to the first)."""
    adapter = model_adapter(model)
    height, width, channels = (int(size) for size in x.shape[1:])
    count = height * width * channels
    image = tf.TensorSpec([None, height, width, channels], tf.float32)
    signature = [image, image, tf.TensorSpec([None], tf.float32),
                 tf.TensorSpec([None], tf.int32),
                 tf.TensorSpec([None, 2], tf.int64), tf.TensorSpec([], tf.int32)]

    def build():
        # autograph off: the executor builds its loop explicitly
        @tf.function(input_signature=signature, autograph=False)
        def run(x, features, baseline, classes, keys, runs):
            def compute(items):
                image, draw = items // runs, items % runs
                noise = item_uniform(keys, image, draw, count)
                chosen = largest_indices(noise, subset_size)  # a uniform subset, no repeats
                perturbed, mask = _subset_images(x, baseline, image, chosen)
                scores = class_outputs(adapter, perturbed, tf.gather(classes, image), softmax)
                sums = tf.reduce_sum(tf.where(mask, tf.gather(features, image), 0.0),
                                     axis=[1, 2, 3])
                return tf.stack([scores, sums], axis=1)
            return executor.collect(tf.shape(x)[0] * runs, batch_size, compute, [2])
        return run

    key = ("measure subsets", height, width, channels, subset_size, softmax, batch_size)
    traced = adapter.traced(key, build)
    workload.count("forward", len(x) * runs)
    values = traced(tf.constant(x, tf.float32), tf.constant(features, tf.float32),
                    tf.constant(baseline, tf.float32), tf.constant(classes, tf.int32),
                    tf.constant(keys, tf.int64),
                    tf.constant(runs, tf.int32)).numpy().astype(np.float64)
    values = values.reshape(len(x), runs, 2)
    return values[..., 0], values[..., 1]


def grid_scores(model: Any, x: np.ndarray, features: np.ndarray, baseline: float,
                classes: np.ndarray, keys: np.ndarray, *, samples: int, grid_size: int,
                subset_percent: float, softmax: bool = False,
                batch_size: int = 64) -> tuple[np.ndarray, np.ndarray]:
    """(output float64 [N, samples], the map's sum over the removed part float64 [N,
    samples]): each sample removes the cells of a `grid_size` x `grid_size` grid whose uniform
    draw is at most `subset_percent` (nearest-neighbour upsampled to the image, as Xplique's
    `MuFidelity`), replacing them by `baseline`; `features` [N, H, W, C] is the map over the
    image's values; `keys` int64 [N, 2] key each image's draws (sample s adds s)."""
    adapter = model_adapter(model)
    height, width, channels = (int(size) for size in x.shape[1:])
    image = tf.TensorSpec([None, height, width, channels], tf.float32)
    signature = [image, image, tf.TensorSpec([None], tf.int32),
                 tf.TensorSpec([None, 2], tf.int64), tf.TensorSpec([], tf.int32)]

    def build():
        # autograph off: the executor builds its loop explicitly
        @tf.function(input_signature=signature, autograph=False)
        def run(x, features, classes, keys, samples):
            def compute(items):
                image, draw = items // samples, items % samples
                cells = item_uniform(keys, image, draw, grid_size * grid_size)
                keep = tf.cast(cells > subset_percent, tf.float32)
                keep = tf.image.resize(tf.reshape(keep, [-1, grid_size, grid_size, 1]),
                                       [height, width], method="nearest")
                perturbed = tf.gather(x, image) * keep + (1.0 - keep) * baseline
                scores = class_outputs(adapter, perturbed, tf.gather(classes, image), softmax)
                sums = tf.reduce_sum(tf.gather(features, image) * (1.0 - keep), axis=[1, 2, 3])
                return tf.stack([scores, sums], axis=1)
            return executor.collect(tf.shape(x)[0] * samples, batch_size, compute, [2])
        return run

    key = ("measure grid subsets", height, width, channels, grid_size, float(subset_percent),
           float(baseline), softmax, batch_size)
    traced = adapter.traced(key, build)
    workload.count("forward", len(x) * samples)
    values = traced(tf.constant(x, tf.float32), tf.constant(features, tf.float32),
                    tf.constant(classes, tf.int32), tf.constant(keys, tf.int64),
                    tf.constant(samples, tf.int32)).numpy().astype(np.float64)
    values = values.reshape(len(x), samples, 2)
    return values[..., 0], values[..., 1]
