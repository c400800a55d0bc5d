"""The batched scorer behind every metric (docs/faithfulness.md, "How it is batched").

A curve is a set of work items (image i, step t), flattened image-major and streamed in
fixed-size chunks by the one chunked executor (`models.foundation.executor.collect`) inside one
traced function; each chunk gathers its images, builds its masks, blends
`start * (1 - P) + end * P`, runs the model and gathers the class score. There is no Python loop
over images or steps, one trace per input shape, and memory is O(chunk x image), not
O(steps x image). Masks come in two kinds:

* ranked: a cell mask `lo_t <= rank < hi_t` on an h x w grid, blown up to the image by
  precomputed row and column indices (an index equal to h or w points at a cell that is never
  perturbed, for pixels outside an IDSDS grid);
* soft: step 0 is the clean start image, step 1 `start * K + end * (1 - K)` with a precomputed
  soft keep mask K `[N, H, W]`.

`end_noise` replaces the end image of every item by U(-1, 1) keyed on (seed, step, image id)
(IDSDS single deletion's "random" baseline, fresh for each deleted cell). An `end` of one image
is shared by all images (a constant substrate such as zeros).
"""
from typing import Any, Optional

import numpy as np
import tensorflow as tf
from numpy.typing import ArrayLike

from faithfulness import ranking, substrates
from models.formats.adapter import adapt
from models.foundation import executor, workload
from models.foundation.errors import ShapeError, UserError
from models.foundation.tracing import open_batch, quiet_retracing

OUTPUT_ACTIVATIONS = (None, "softmax")


def _end_rows(end, image):
    """Rows of `end` for the items' images: one shared row when `end` has a single image (a
    constant substrate, never materialised per image)."""
    return tf.minimum(image, tf.shape(end)[0] - 1)


@tf.function(jit_compile=True)
def _blend_ranked(start, end, image, ranks, low, high, rows, cols, grid_h, grid_w, end_per_item):
    """The perturbed images of a chunk: `end` where the item's cell rank is in [low, high),
    `start` elsewhere (compiled with XLA so that masks, gathers and the select are one pass)."""
    cell_ranks = tf.gather(ranks, image)
    cells = (cell_ranks >= low[:, None]) & (cell_ranks < high[:, None])
    cells = tf.pad(tf.reshape(cells, [-1, grid_h, grid_w]), [[0, 0], [0, 1], [0, 1]])
    mask = tf.gather(tf.gather(cells, rows, axis=1), cols, axis=2)[..., None]
    last = end if end_per_item else tf.gather(end, _end_rows(end, image))
    return tf.where(mask, last, tf.gather(start, image))  # exact: each pixel is one or other


@tf.function(jit_compile=True)
def _blend_blocks(start, end, image, ranks, low, high, grid_h, grid_w, end_per_item):
    """`_blend_ranked` when every cell is an exact block of the image (the map side divides the
    image side): the cell mask is broadcast over blocks, about twice as fast."""
    count = tf.shape(image)[0]
    height, width, channels = start.shape[1:]
    cell_ranks = tf.gather(ranks, image)
    cells = (cell_ranks >= low[:, None]) & (cell_ranks < high[:, None])
    mask = tf.reshape(cells, [count, grid_h, 1, grid_w, 1, 1])
    blocks = [count, grid_h, height // grid_h, grid_w, width // grid_w, channels]
    last = tf.reshape(end if end_per_item else tf.gather(end, _end_rows(end, image)), blocks)
    first = tf.reshape(tf.gather(start, image), blocks)
    return tf.reshape(tf.where(mask, last, first), [count, height, width, channels])


@tf.function(jit_compile=True)
def _blend_soft(start, end, keep, image, clean):
    """`start * K + end * (1 - K)` per item, K = 1 for clean items (the reference's formula)."""
    mask = tf.gather(keep, image)[..., None]
    mask = tf.where(clean[:, None, None, None], tf.ones_like(mask), mask)
    return tf.gather(start, image) * mask + tf.gather(end, _end_rows(end, image)) * (1.0 - mask)


class Scorer:
    """Scores images and their perturbations with one model, in chunks of `batch_size` items."""

    def __init__(self, model: Any, output_activation: Optional[str] = None, batch_size: int = 64,
                 jit_compile: bool = False, output_key: Optional[str] = None):
        if output_activation not in OUTPUT_ACTIVATIONS:
            raise UserError(f"unknown output_activation {output_activation!r}; use None or "
                            "'softmax'")
        if int(batch_size) < 1:
            raise UserError(f"batch_size must be at least 1; got {batch_size}")
        self.model = model
        self.adapter = adapt(model, output_key=output_key)
        self.call, self.num_classes = self.adapter.outputs, self.adapter.num_classes
        self.output_activation = output_activation
        self.batch_size = int(batch_size)
        self.jit_compile = jit_compile
        self._probed = False

    # -- traced pieces -----------------------------------------------------------------------

    def probe(self, images: tf.Tensor) -> None:
        """Runs the model eagerly on one image: checks its output and learns the classes."""
        if not self._probed:
            outputs = self.call(tf.convert_to_tensor(images[:1], tf.float32))
            if len(outputs.shape) != 2:
                raise UserError(f"the model output has shape {tuple(outputs.shape)} for one "
                                "image; expected [N, classes]")
            self.num_classes = int(outputs.shape[-1])
            self._probed = True

    def _outputs(self, images):
        outputs = tf.cast(self.call(images), tf.float32)
        if self.output_activation == "softmax":
            outputs = tf.nn.softmax(outputs, axis=-1)
        return outputs

    def _chunk(self, items: int) -> int:
        """The chunk of a call of `items` work items: at most `batch_size`, split evenly
        (`executor.chunk_size`), so a call of 16 images does not compute a chunk of 64."""
        return executor.chunk_size(int(items), self.batch_size)

    def _chunked(self, count, compute, chunk, per_item=()):
        """Concatenates compute(item indices [chunk]) over all chunks of `count` items."""
        return executor.collect(count, chunk, compute, per_item)

    def _function(self, key, build):
        """The traced function of `key` (which names the chunk it streams in), kept with the
        model's adapter (`Adapter.traced`), so every scorer of the model with the same output
        and compilation shares its traces: the card's benchmarks and each of their perturbed
        sets made a scorer of their own, each traced again (docs/report_card.md, "Where the
        card's time goes")."""
        return self.adapter.traced(
            ("scorer", self.output_activation, self.jit_compile, *key),
            lambda: open_batch(quiet_retracing(tf.function(build(),
                                                           jit_compile=self.jit_compile))))

    # -- public entry points -----------------------------------------------------------------

    def predict(self, images: tf.Tensor) -> np.ndarray:
        """float32 [N, classes]: the (activated) model output on `images`."""
        images = tf.convert_to_tensor(images, tf.float32)
        if images.shape[0] == 0:
            raise UserError("there are no images to score")
        self.probe(images)
        workload.count("forward", images.shape[0])
        chunk = self._chunk(images.shape[0])

        def build():
            def run(images):
                return self._chunked(tf.shape(images)[0], lambda items: self._outputs(
                    tf.gather(images, items)), chunk, per_item=[None])
            return run

        return self._function(("predict", chunk), build)(images).numpy()

    def check_classes(self, classes: ArrayLike, count: int) -> np.ndarray:
        """int32 [N] class indices, checked against the number of images and of classes (call
        `probe` first to know the classes)."""
        classes = np.asarray(classes).reshape(-1)
        if classes.shape != (count,):
            raise ShapeError(f"class_to_explain has {classes.size} entries for {count} images")
        if not np.issubdtype(classes.dtype, np.integer):
            raise UserError("class_to_explain must hold integer class indices")
        if self.num_classes is not None and (classes.min() < 0 or
                                             classes.max() >= self.num_classes):
            raise UserError(f"a class index is outside [0, {self.num_classes}) for this model")
        return classes.astype(np.int32)

    def ranked_curves(self, start: tf.Tensor, end: tf.Tensor, ranks: np.ndarray,
                      schedule: ranking.Schedule, classes: np.ndarray, rows: np.ndarray,
                      cols: np.ndarray, grid: tuple[int, int], *,
                      end_noise_seed: Optional[int] = None,
                      ids: Optional[np.ndarray] = None) -> np.ndarray:
        """float32 [N, K + 1]: scores of every step of `schedule` (see the module docstring)."""
        start = tf.convert_to_tensor(start, tf.float32)
        end = tf.convert_to_tensor(end, tf.float32)
        count, height, width, channels = start.shape
        if count == 0:
            raise UserError("there are no images to score")
        self.probe(start)
        grid_h, grid_w = grid
        blocks = (height % grid_h == 0 and width % grid_w == 0 and
                  np.array_equal(rows, np.arange(height) // (height // grid_h)) and
                  np.array_equal(cols, np.arange(width) // (width // grid_w)))
        noisy = end_noise_seed is not None
        ids = np.arange(count) if ids is None else np.asarray(ids)
        chunk = self._chunk(count * len(schedule.lo))
        key = ("ranked", grid_h, grid_w, noisy, blocks, chunk)

        def build():
            def run(start, end, ranks, lo, hi, classes, rows, cols, ids, seed):
                points = tf.shape(lo)[0]
                total = tf.shape(start)[0] * points

                def compute(items):
                    image = items // points
                    step = items % points
                    low = tf.gather(lo, step)
                    high = tf.gather(hi, step)
                    last = end
                    if noisy:
                        salts = seed * 1_000_003 + tf.cast(step, tf.int64)
                        keys = tf.stack([salts, tf.gather(ids, image)], axis=1)
                        last = substrates.uniform_noise(keys, start.shape[1:])
                    if blocks:
                        blended = _blend_blocks(start, last, image, ranks, low, high, grid_h,
                                                grid_w, noisy)
                    else:
                        blended = _blend_ranked(start, last, image, ranks, low, high, rows,
                                                cols, grid_h, grid_w, noisy)
                    return tf.gather(self._outputs(blended), tf.gather(classes, image),
                                     batch_dims=1)

                return tf.reshape(self._chunked(total, compute, chunk), [-1, points])
            return run

        run = self._function(key, build)
        workload.count("forward", count * len(schedule.lo))
        scores = run(start, end, tf.constant(ranks, tf.int32),
                     tf.constant(schedule.lo, tf.int32), tf.constant(schedule.hi, tf.int32),
                     tf.constant(classes, tf.int32), tf.constant(rows, tf.int32),
                     tf.constant(cols, tf.int32), tf.constant(ids, tf.int64),
                     tf.constant(0 if end_noise_seed is None else int(end_noise_seed), tf.int64))
        del channels
        return scores.numpy()

    def soft_pairs(self, start: tf.Tensor, end: tf.Tensor, keep: np.ndarray,
                   classes: np.ndarray) -> np.ndarray:
        """float32 [N, 2]: scores of `start` and of `start * K + end * (1 - K)` for soft keep
        masks K `[N, H, W]` (the reference's formula)."""
        start = tf.convert_to_tensor(start, tf.float32)
        if start.shape[0] == 0:
            raise UserError("there are no images to score")
        self.probe(start)
        chunk = self._chunk(start.shape[0] * 2)

        def build():
            def run(start, end, keep, classes):
                total = tf.shape(start)[0] * 2

                def compute(items):
                    image = items // 2
                    blended = _blend_soft(start, end, keep, image, tf.equal(items % 2, 0))
                    return tf.gather(self._outputs(blended), tf.gather(classes, image),
                                     batch_dims=1)

                return tf.reshape(self._chunked(total, compute, chunk), [-1, 2])
            return run

        run = self._function(("soft", chunk), build)
        workload.count("forward", start.shape[0] * 2)
        return run(start, tf.convert_to_tensor(end, tf.float32),
                   tf.convert_to_tensor(keep, tf.float32), tf.constant(classes, tf.int32)).numpy()
