"""Throughput of the batched faithfulness metrics against their ceiling and the reference.

    python scripts/bench_faithfulness.py [--images=8] [--size=224] [--batch_size=64]

One CNN (three stride-2 convolutions, global pooling, softmax) built identically in Keras and
PyTorch, at two widths, and the real-size EfficientNet-Lite0 with its ImageNet weights (docs/
real_model.md; no PyTorch twin, so no reference columns; --real_images images). For Deletion
(14 x 14 maps, 197 forward passes per image), Insertion (same, blur substrate) and IDSDS
single deletion (4 x 4 grid, 17 passes per image) it prints images/s of:

* ours: the `faithfulness` metric, end to end, from images already in a tf.Tensor (as the
  reference gets torch tensors);
* ceiling: the same number of forward passes of the Keras model on one fixed batch inside one
  traced loop (no perturbation, no data movement), the best any implementation can do here;
* reference: `saliency_maps_metrics` 0.0.26 on the PyTorch twin (Deletion, Insertion), and for
  single deletion the IDSDS code's loop over cells rebuilt step for step in PyTorch (no
  package implements it); skipped when torch or the package is missing;
* torch forward: the same number of bare forward passes of the PyTorch twin in chunks of the
  same size, the part of the reference's time that no implementation of the metric removes.

Targets (faithfulness issue): ours >= 0.9 x ceiling and >= 5 x reference. The last column,
ceiling / reference, is the largest speed-up any implementation could reach with that model:
forward passes alone, without building a single perturbed image. The torch forward column shows
how much of that bound is Keras' forward pass against PyTorch's on this CPU rather than the
reference's own work.
"""
import dataclasses
import functools
import os
import time
from typing import TYPE_CHECKING, Optional

import numpy as np

import faithfulness
import models  # noqa: I001  (first: TensorFlow loads quietly)
from faithfulness import torch_twin
from models.foundation import progress, provenance
from models.foundation.cli import option, run_binary
from models.foundation.files import write_json
from models.foundation.lazy import lazy_module

# Loaded on first use: --help and a bad flag are answered before TensorFlow starts
# (docs/architecture.md, "Light imports").
if TYPE_CHECKING:  # the type checker's view of the same modules
    import keras
    import tensorflow as tf

    from models.formats import pretrained
else:
    keras = lazy_module("keras")
    tf = lazy_module("tensorflow")
    pretrained = lazy_module("models.formats.pretrained")

CLASSES = 10


def keras_model(size, widths=(16, 32, 64)):
    """The zoo's plain_cnn with a softmax on top (the reference scores probabilities)."""
    keras.utils.set_random_seed(0)
    model = models.build("plain_cnn", CLASSES, (size, size, 3), widths=tuple(widths))
    return keras.Model(model.input, keras.layers.Softmax()(model.output))


def pretrained_model(name):
    """A pretrained zoo model (`models.formats.pretrained`) with a softmax on top."""
    model = models.rebuild(pretrained.export_path(name))
    return keras.Model(model.input, keras.layers.Softmax()(model.output))


def best_times(runs, repeats):
    """The best of `repeats` timings of each callable (None for a missing one), measured in turn
    so that a slow spell of a shared machine hits all of them alike; each is run once first
    (tracing)."""
    present = [run for run in runs if run is not None]
    for run in present:
        run()
    best: dict = {}
    for _ in range(repeats):
        for run in present:
            started = time.perf_counter()
            run()
            best[run] = min(best.get(run, float("inf")), time.perf_counter() - started)
    return [best.get(run) for run in runs]


def ceiling_run(model, passes, batch_size, size, gradient=False):
    """`passes` forward passes of `model` on one fixed batch, in one traced loop (with
    `gradient`, as many input gradients of the class-0 logit); the model's pass is the one the
    scorer runs (the adapter's: batch norms folded, docs/models.md)."""
    batch = tf.random.normal([batch_size, size, size, 3])
    chunks = -(-passes // batch_size)
    logits = models.adapt(model).logits

    def work():
        if not gradient:
            return logits(batch)
        with tf.GradientTape() as tape:
            tape.watch(batch)
            score = tf.reduce_sum(logits(batch)[:, 0])
        return tape.gradient(score, batch)

    @tf.function
    def loop():
        def body(i, total):
            return i + 1, total + tf.reduce_sum(work())
        return tf.while_loop(lambda i, _: i < chunks, body, [0, 0.0], parallel_iterations=1)[1]

    return lambda: loop().numpy()


def torch_forward_run(twin, passes, batch_size, size):
    """`passes` bare forward passes of the PyTorch twin, `batch_size` at a time."""
    import torch

    batch = torch.randn(batch_size, 3, size, size)
    chunks = -(-passes // batch_size)

    def run():
        with torch.no_grad():
            for _ in range(chunks):
                twin(batch)
    return run


def reference_single_deletion(twin, data, labels, attributions, grid):
    """One batch of the IDSDS code's single deletion in PyTorch, step for step: attribution sums
    per cell, the clean output, then per cell a fresh zeros baseline, a cloned batch with that
    cell replaced and a forward pass, scores kept image by image, and scipy's Spearman per
    image."""
    import torch
    from scipy import stats

    side = data.shape[2] // grid
    cells = [(slice(row * side, (row + 1) * side), slice(col * side, (col + 1) * side))
             for row in range(grid) for col in range(grid)]
    with torch.no_grad():
        cell_attributions = [attributions[:, :, rows, cols].sum(dim=(1, 2, 3)).numpy()
                             for rows, cols in cells]
        original = twin(data).gather(1, labels[:, None])
        scores = np.empty((len(data), len(cells) + 1))
        scores[:, -1] = [original[b].item() for b in range(len(data))]
        drops = []
        for index, (rows, cols) in enumerate(cells):
            baseline = torch.zeros_like(data)
            changed = data.clone()
            changed[:, :, rows, cols] = baseline[:, :, rows, cols]
            deleted = twin(changed).gather(1, labels[:, None])
            scores[:, index] = [deleted[b].item() for b in range(len(data))]
            drops.append((original - deleted).numpy())
        return [stats.spearmanr([a[b] for a in cell_attributions], [d[b] for d in drops])[0]
                for b in range(len(data))]


@dataclasses.dataclass(frozen=True)
class Config:
    """The script's options (one flag each)."""

    images: int = option(16, 'Images per deletion/insertion measurement (x8 for single deletion).')
    size: int = option(224, 'Image side.')
    batch_size: int = option(
        20,
        "Work items per model call (ours and the ceiling); 20 is the reference's default "
        'chunk.')
    repeats: int = option(5, 'Timed repeats; the best is reported.')
    models: tuple = option(
        ("16-32-64", "8-16-32", "efficientnet_lite0"),
        'Benchmark CNNs by their three conv widths, a pretrained model by name, or any zoo '
        'model by name (random weights, --real_images images); one table each (the plain CNN '
        'gets cheaper from left to right).')
    real_images: int = option(4, "Images per deletion/insertion measurement of a pretrained "
                              "model (x8 for single deletion).")
    output_json: Optional[str] = option(None, "Optional JSON output: every row of every table "
                                        "(images/s of ours and the ceiling, their ratio).")


def run(config: Config) -> list:
    """Measures and prints each model's table; returns (and with --output_json writes) its
    rows."""
    print(f"machine: {provenance.machine()}", flush=True)
    found = []
    done = progress.bar(len(config.models) * len(METRICS), "bench_faithfulness: models x "
                        "metrics", "metric")
    for name in config.models:
        if name in pretrained.PRETRAINED:
            real = dataclasses.replace(config, images=config.real_images,
                                       size=pretrained.PRETRAINED[name].image_size)
            title, rows, used = name, measure(None, real, pretrained_model(name), done), real
        elif all(part.isdigit() for part in name.split("-")):
            widths = tuple(int(w) for w in name.split("-"))
            title, rows, used = f"CNN widths {name}", measure(widths, config, done=done), config
        else:  # any zoo model with random weights (resnet50, ...) at --size
            title, used = name, dataclasses.replace(config, images=config.real_images)
            rows = measure(None, used, zoo_model(name, config.size), done)
        print_table(title, rows, used)
        found += [{"model": name, "metric": metric, "images": count, "passes": passes,
                   "images_per_s": count / seconds, "ceiling_images_per_s": count / ceiling,
                   "ratio_to_ceiling": ceiling / seconds, "size": used.size,
                   "batch_size": used.batch_size}
                  for metric, count, passes, seconds, ceiling, *_ in rows]
    done.close()
    if config.output_json:
        write_json(config.output_json, {"machine": provenance.machine(), "rows": found},
                   indent=1)
    return found


def zoo_model(name, size):
    """A zoo model with random weights (seed 0) and a softmax on top."""
    keras.utils.set_random_seed(0)
    model = models.build(name, CLASSES, (size, size, 3))
    return keras.Model(model.input, keras.layers.Softmax()(model.output))


# the metrics `measure` times, in its order
METRICS = ("Deletion", "Insertion", "single deletion")


def measure(widths, config, model=None, done=None):
    """[(metric, images, forward passes, ours s, ceiling s, reference s, torch forward s)], the
    last two None without torch and the reference package (and for a given `model`); each
    metric counted on the progress `done` as it ends."""
    size, batch_size = config.size, config.batch_size
    model = model or keras_model(size, widths)
    rng = np.random.RandomState(0)
    twin = None  # a pretrained model has no PyTorch twin here
    if widths is not None:
        try:
            import saliency_maps_metrics.multi_step_metrics as reference
            import torch
            if not hasattr(np, "trapz"):
                np.trapz = np.trapezoid  # type: ignore[attr-defined]  # NumPy 2.4 removed it
            torch.set_num_threads(os.cpu_count())
            twin = torch_twin.twin(model)  # its softmax layer too
        except ImportError:
            pass
    rows = []

    def timed(name, count, passes, ours, reference_run):
        twin_run = None if twin is None else torch_forward_run(twin, passes, batch_size, size)
        rows.append((name, count, passes, *best_times(
            [ours, ceiling_run(model, passes, batch_size, size), reference_run, twin_run],
            config.repeats)))
        if done is not None:
            done.update(1)

    # Deletion and Insertion: 14 x 14 maps, 197 forward passes per image.
    count = config.images
    data = rng.randn(count, size, size, 3).astype(np.float32)
    maps = rng.rand(count, 14, 14)
    classes = rng.randint(0, CLASSES, count)
    for name in METRICS[:2]:
        metric = getattr(faithfulness, name)(batch_size=batch_size)
        reference_run = None
        if twin is not None:
            reference_run = functools.partial(
                getattr(reference, name)(), twin, torch.tensor(data.transpose(0, 3, 1, 2)),
                torch.tensor(maps[:, None], dtype=torch.float32), torch.tensor(classes))
        timed(name, count, count * 197,
              functools.partial(metric, model, tf.constant(data), maps, classes), reference_run)

    # IDSDS single deletion: 4 x 4 grid, 17 forward passes per image.
    count = config.images * 8
    data = rng.randn(count, size, size, 3).astype(np.float32)
    attributions = rng.rand(count, size, size)
    labels = rng.randint(0, CLASSES, count)
    scorer = faithfulness.scorer.Scorer(model, None, batch_size)
    tf_data = tf.constant(data)
    reference_run = None
    if twin is not None:
        torch_data = torch.tensor(data.transpose(0, 3, 1, 2))
        torch_labels = torch.tensor(labels)

        def peer_run(torch_attributions):
            return np.concatenate([  # the reference's batches of 64 images
                reference_single_deletion(twin, torch_data[i:i + 64], torch_labels[i:i + 64],
                                          torch_attributions[i:i + 64], 4)
                for i in range(0, count, 64)])

        reference_run = functools.partial(  # timed: float32 attributions, as the reference's
            peer_run, torch.tensor(attributions[:, None], dtype=torch.float32))
        # Agreement with float64 attributions in the peer: its timed float32 cell sums of
        # 3,136 values order near-equal cells by rounding, which moved rho by up to 1.5e-2 on
        # the 8-16-32 CNN (docs/faithfulness.md, "Speed").
        our_rho = faithfulness.single_deletion(scorer, tf_data, labels, attributions)["rho"]
        peer_rho = peer_run(torch.tensor(attributions[:, None]))  # float64
        print(f"single deletion, widths {widths}: largest |rho ours - rho IDSDS-structured "
              f"peer (float64 attributions)| = {np.nanmax(np.abs(our_rho - peer_rho)):.1e}")
    timed("single deletion", count, count * 17,
          lambda: faithfulness.single_deletion(scorer, tf_data, labels, attributions),
          reference_run)
    return rows


def print_table(title, rows, config):
    print(f"\n{title}: {config.size}x{config.size} images, chunk {config.batch_size}, "
          f"{os.cpu_count()} CPU threads, TF {tf.__version__}")
    print(f"{'metric':<16} {'images':>6} {'passes':>7} {'ours img/s':>10} {'ceiling':>8} "
          f"{'ratio':>6} {'reference':>9} {'speed-up':>8} {'ceiling/reference':>17} "
          f"{'torch forward':>13}")

    def rate(count, seconds, width):
        return f"{count / seconds:{width}.2f}" if seconds else f"{'-':>{width}}"

    for name, count, passes, seconds, ceiling, reference_seconds, twin_seconds in rows:
        speed = f"{reference_seconds / seconds:7.1f}x" if reference_seconds else f"{'-':>8}"
        bound = f"{reference_seconds / ceiling:16.1f}x" if reference_seconds else f"{'-':>17}"
        print(f"{name:<16} {count:>6} {passes:>7} {rate(count, seconds, 10)} "
              f"{rate(count, ceiling, 8)} {ceiling / seconds:>6.2f} "
              f"{rate(count, reference_seconds, 9)} {speed} {bound} "
              f"{rate(count, twin_seconds, 13)}")

if __name__ == "__main__":
    run_binary(Config, run)
