"""BAM's delta patch (docs/bam.md, "The delta patch"): a dog-shaped change to bamboo-forest images
that the scene_only model should not notice, and the `bamboo_forest_patch` set built from it.

For each bamboo_forest image x (preprocessed) and the composite with the dog d (preprocessed
`scene/val/<same name>`), delta starts at d and takes `num_steps` gradient steps
delta <- M * (delta - step_size * grad L(delta)) of

    L(delta) = ||f(x + delta) - f(x)||_2 - alpha ||delta||_2
               + beta * sum(relu(x + delta - hi) + relu(lo - x - delta))

(the out-of-range hinge; the spec's form differs by a constant), with f the logits, M the dog's
mask in the box (the same mask routine as the scores), lo = -103.94, hi = 131.32. All images are
optimised at once (loss summed, so each gets its own gradient; norms are safe at 0) in a traced
loop over steps, run in segments of `SEGMENT` steps so that a bar can follow it (plain gradient
steps: the segments give the same result as one loop); `batch_size` chunks give identical
results. The patch p = x + delta is clipped
to [0, 255] after adding the mean back, rounded, and saved as lossless PNG.
"""
import csv
import os
from typing import Any, Callable, Optional

import numpy as np
import tensorflow as tf
from PIL import Image

from bam import region
from bam.val_set_scores import load_val_set
from models.formats.adapter import adapt
from models.formats.preprocessing import BAM_RGB_MEAN, INPUT_SPACES
from models.foundation.errors import UserError
from models.foundation.files import atomic_output
from saliency_gen.data.world import dataset

LOW, HIGH = -103.94, 131.32
SEGMENT = 25  # gradient steps per traced call


def _optimiser(logits, step_size, alpha, beta):
    @tf.function(reduce_retracing=True)
    def optimise(x, delta, mask, num_steps):
        reference = logits(x)

        def step(index, delta):
            with tf.GradientTape() as tape:
                tape.watch(delta)
                moved = logits(x + delta) - reference
                change = tf.sqrt(tf.reduce_sum(tf.square(moved), axis=1) + 1e-12)
                size = tf.sqrt(tf.reduce_sum(tf.square(delta), axis=[1, 2, 3]) + 1e-12)
                hinge = tf.reduce_sum(tf.nn.relu(x + delta - HIGH) + tf.nn.relu(LOW - x - delta),
                                      axis=[1, 2, 3])
                loss = tf.reduce_sum(change - alpha * size + beta * hinge)
            return index + 1, mask * (delta - step_size * tape.gradient(loss, delta))

        _, delta = tf.while_loop(lambda index, _: index < num_steps, step,
                                 [tf.constant(0), delta])
        return delta

    return optimise


def to_uint8(images: np.ndarray) -> np.ndarray:
    """Mean-subtracted RGB -> uint8 pixels: add the mean, clip to [0, 255], round (fix D4)."""
    return np.clip(np.round(np.asarray(images, np.float64) + np.asarray(BAM_RGB_MEAN)), 0,
                   255).astype(np.uint8)


def construct_patches(data_dir: str, model: Any, *, num_steps: int = 300,
                      step_size: float = 500.0, alpha: float = 0.01, beta: float = 0.01,
                      batch_size: Optional[int] = None, output_name: str = "bamboo_forest_patch",
                      progress: Optional[Callable[[int, int], None]] = None) -> dict:
    """Builds `<data_dir>/<output_name>` from bamboo_forest with `model` (scene_only);
    `progress(done, total)` follows the gradient steps of all images."""
    adapter = adapt(model)
    if adapter.input_shape is None:
        raise UserError("the delta patch needs a model with a fixed input shape")
    input_size = adapter.input_shape[0]
    source = load_val_set(data_dir, "bamboo_forest")
    space = INPUT_SPACES["caffe_rgb"]
    stems = source.stems
    composites = [os.path.join(data_dir, "scene", "val", os.path.basename(p))
                  for p in source.paths]
    missing = [p for p in composites if not os.path.isfile(p)]
    if missing:
        raise UserError(f"{missing[0]} does not exist: the patch starts from scene/val composites")
    x = space.from_uint8(dataset.load_pixels(source.paths, input_size))
    start = space.from_uint8(dataset.load_pixels(composites, input_size))
    masks = region.object_masks(source.masks, source.boxes, source.image_size, input_size, stems)
    masks = np.repeat(masks[..., None].astype(np.float32), 3, axis=-1)
    optimise = _optimiser(adapter.logits, step_size, alpha, beta)
    chunk = batch_size or len(x)
    report = progress or (lambda done, total: None)
    segments = [min(SEGMENT, num_steps - first) for first in range(0, num_steps, SEGMENT)]
    total, done = len(segments) * -(-len(x) // chunk), 0
    report(0, total)

    def patch_delta(i):  # one chunk of images, segment after segment
        nonlocal done
        images, found, mask = (tf.constant(a[i:i + chunk]) for a in (x, start, masks))
        for steps in segments:
            found = optimise(images, found, mask, tf.constant(steps))
            done += 1
            report(done, total)
        return found.numpy()

    delta = np.concatenate([patch_delta(i) for i in range(0, len(x), chunk)])
    patched = x + delta
    pixels = to_uint8(patched)

    clean_logits, patched_logits = adapter.predict(x), adapter.predict(patched)
    reloaded_logits = adapter.predict(space.from_uint8(pixels))
    names = [f"{stem}.png" for stem in stems]
    root = os.path.join(data_dir, output_name)
    with atomic_output(root) as temporary:
        os.makedirs(os.path.join(temporary, "val"))
        for name, image in zip(names, pixels):
            Image.fromarray(image).save(os.path.join(temporary, "val", name), "PNG")
        dataset.write_labels(os.path.join(temporary, "val.txt"), [(n, 0) for n in names])
        dataset.write_locations(os.path.join(temporary, "val_loc.txt"),
                                list(zip(names, source.boxes)))
        dataset.save_masks(os.path.join(temporary, "val_mask"), source.masks)
        with open(os.path.join(temporary, "patch_stats.csv"), "w", newline="") as handle:
            writer = csv.writer(handle)
            writer.writerow(["stem", "l2_before_saving", "l2_after_reloading", "pred_x",
                             "pred_patch", "delta_l2"])
            for n, stem in enumerate(stems):
                writer.writerow([stem, f"{np.linalg.norm(patched_logits[n] - clean_logits[n]):.6g}",
                                 f"{np.linalg.norm(reloaded_logits[n] - clean_logits[n]):.6g}",
                                 int(np.argmax(clean_logits[n])),
                                 int(np.argmax(reloaded_logits[n])),
                                 f"{np.linalg.norm(delta[n]):.6g}"])
    kept = int(np.sum(np.argmax(clean_logits, 1) == np.argmax(reloaded_logits, 1)))
    return {"images": len(stems), "kept_prediction": kept, "path": root,
            "mean_l2_after": float(np.mean(np.linalg.norm(reloaded_logits - clean_logits,
                                                          axis=1)))}
