"""The one batched computation of the random-subset measures (docs/measures.md, "Faithfulness"):
for each image and run, a random subset of `subset_size` of the image's values is replaced by
the baseline; the model's output for the explained class and the map's sum over the subset,
every (image, run) item scored in fixed-size chunks inside one traced function (the chunked
executor). Each item's subset is drawn in the graph from its own key (seed, image id, run), so
the values do not depend on the chunk size or on the other images of the call.
"""
import math
from typing import Any, Optional

import numpy as np
import tensorflow as tf

from faithfulness.measures.perturbation import class_outputs
from models.formats.adapter import adapt
from models.foundation import executor, workload


def item_keys(keys: tf.Tensor, image: tf.Tensor, draw: tf.Tensor) -> tf.Tensor:
    """int64 [n, 2]: each item's key (an image's `draw`-th): the image's key plus the draw on
    the first part."""
    return tf.gather(keys, image) + tf.stack(
        [tf.cast(draw, tf.int64), tf.zeros_like(draw, tf.int64)], axis=1)


def item_uniform(keys: tf.Tensor, image: tf.Tensor, draw: tf.Tensor, size: int) -> tf.Tensor:
    """float32 [n, size]: U(0, 1) draws of each item, keyed by `item_keys` (inside a traced
    function)."""
    return tf.map_fn(lambda key: tf.random.stateless_uniform([size], key),
                     item_keys(keys, image, draw), fn_output_signature=tf.float32)


def block_size(count: int, size: int) -> int:
    """Draws of one block: the mean number of uniform draws from `count` values that give
    `size` distinct ones (a coupon collector's partial sum) plus ten standard deviations and
    16, so that a block falls short with a negligible chance."""
    found = (count - np.arange(size, dtype=np.float64)) / count  # the chance of a new value
    mean, variance = np.sum(1 / found), np.sum((1 - found) / found ** 2)
    return int(math.ceil(mean + 10 * math.sqrt(variance) + 16))


def _first_distinct(candidates: tf.Tensor, size: int, count: int) -> tuple[tf.Tensor, tf.Tensor]:
    """(bool [n, m]: the first `size` distinct values of each row of `candidates` [n, m] of
    [0, count), at their first draw; bool []: whether every row has `size` of them). The
    (row, value) pairs are numbered in order of first appearance (`tf.unique`, a hash table:
    no sort, and no table of n x count entries); a pair's first draw is its smallest position,
    a segment minimum over those numbers."""
    shape = tf.shape(candidates)
    rows = tf.range(tf.cast(shape[0], tf.int64))[:, None]
    pairs = tf.reshape(rows * count + candidates, [-1])
    _, pair = tf.unique(pairs, out_idx=tf.int32)
    position = tf.range(tf.size(pairs))
    earliest = tf.math.unsorted_segment_min(position, pair, tf.size(pairs))
    first = tf.reshape(tf.gather(earliest, pair) == position, shape)
    found = tf.cumsum(tf.cast(first, tf.int32), axis=1)
    return first & (found <= size), tf.reduce_all(found[:, -1] >= size)


def subset_indices(keys: tf.Tensor, image: tf.Tensor, draw: tf.Tensor, count: int, size: int,
                   block: Optional[int] = None) -> tf.Tensor:
    """int32 [n, size]: each item's uniform random subset of `size` of `count` values, no
    repeats: the first `size` distinct values of its stream of uniform integers in [0, count),
    drawn in blocks of `block` (default `block_size`); block j is keyed by the item's key
    (`item_keys`) plus j * 2^32 on the first part (docs/measures.md, "Speed"). A chunk
    draws one block per item and more only while a row falls short; since a row's first
    distinct values lie in the stream's start, the subset does not depend on the chunk. A
    change that changes the values renames `faithfulness.measures.CODE`'s entry."""
    block = block or block_size(count, size)
    own = item_keys(keys, image, draw)

    def drawn(blocks):
        shift = tf.range(tf.cast(blocks, tf.int64), dtype=tf.int64) * 2 ** 32
        keyed = own[:, None, :] + tf.stack([shift, tf.zeros_like(shift)], axis=1)[None]
        candidates = tf.reshape(tf.map_fn(
            lambda key: tf.random.stateless_uniform([block], key, minval=0, maxval=count,
                                                    dtype=tf.int64),
            tf.reshape(keyed, [-1, 2]), fn_output_signature=tf.int64), [tf.shape(own)[0], -1])
        return (candidates, *_first_distinct(candidates, size, count))

    def more(blocks, candidates, taken, complete):
        return (2 * blocks, *drawn(2 * blocks))
    start = (tf.constant(1), *drawn(tf.constant(1)))
    free = tf.TensorShape([None, None])
    _, candidates, taken, _ = tf.while_loop(
        lambda blocks, candidates, taken, complete: tf.logical_not(complete), more, start,
        shape_invariants=(tf.TensorShape([]), free, free, tf.TensorShape([])))
    return tf.cast(tf.reshape(tf.boolean_mask(candidates, taken), [-1, size]), tf.int32)


@tf.function(jit_compile=True, autograph=False)
def _subset_images(x, baseline, image, chosen):
    """Each item's image of `x` with its `chosen` flat values replaced by its baseline value,
    in one XLA-compiled pass (exact)."""
    shape = tf.shape(chosen)
    rows = tf.broadcast_to(tf.range(shape[0])[:, None], shape)
    count = tf.size(x[0])
    mask = tf.scatter_nd(tf.stack([rows, chosen], axis=-1), tf.ones_like(chosen),
                         [shape[0], count]) > 0
    mask = tf.reshape(mask, tf.concat([shape[:1], tf.shape(x)[1:]], axis=0))
    return tf.where(mask, tf.gather(baseline, image)[:, None, None, None], tf.gather(x, image))


def subset_scores(model: Any, x: np.ndarray, features: np.ndarray, baseline: np.ndarray,
                  classes: np.ndarray, keys: np.ndarray, *, runs: int, subset_size: int,
                  softmax: bool = True, batch_size: int = 64) -> tuple[np.ndarray, np.ndarray]:
    """(output float64 [N, runs], the map's sum over the subset float64 [N, runs]) of `x`
    ([N, H, W, C]) with each run's random subset of `subset_size` values replaced by the
    image's `baseline` value ([N]); `features` [N, H, W, C] is the map broadcast over the
    image's values; `keys` int64 [N, 2] key each image's draws (run r adds r to the first)."""
    adapter = adapt(model)
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
            flat = tf.reshape(features, [tf.shape(features)[0], count])

            def compute(items):
                image, draw = items // runs, items % runs
                chosen = subset_indices(keys, image, draw, count, subset_size)
                perturbed = _subset_images(x, baseline, image, chosen)
                scores = class_outputs(adapter, perturbed, tf.gather(classes, image), softmax)
                # the map's values of the subset, gathered, summed in draw order
                at = tf.stack([tf.broadcast_to(image[:, None], tf.shape(chosen)), chosen], -1)
                sums = tf.reduce_sum(tf.gather_nd(flat, at), axis=1)
                return tf.stack([scores, sums], axis=1)
            return executor.collect(tf.shape(x)[0] * runs, chunk, compute, [2])
        return run

    chunk = executor.chunk_size(len(x) * runs, batch_size)
    key = ("measure subsets", height, width, channels, subset_size, softmax, chunk)
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
    adapter = adapt(model)
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
            return executor.collect(tf.shape(x)[0] * samples, chunk, compute, [2])
        return run

    chunk = executor.chunk_size(len(x) * samples, batch_size)
    key = ("measure grid subsets", height, width, channels, grid_size, float(subset_percent),
           float(baseline), softmax, chunk)
    traced = adapter.traced(key, build)
    workload.count("forward", len(x) * samples)
    values = traced(tf.constant(x, tf.float32), tf.constant(features, tf.float32),
                    tf.constant(classes, tf.int32), tf.constant(keys, tf.int64),
                    tf.constant(samples, tf.int32)).numpy().astype(np.float64)
    values = values.reshape(len(x), samples, 2)
    return values[..., 0], values[..., 1]
