"""Throughput of the batched faithfulness metrics against their ceiling and the reference.

    python scripts/bench_faithfulness.py [--images=8] [--size=224] [--batch_size=64]

One CNN (three stride-2 convolutions, global pooling, softmax) built identically in Keras and
PyTorch. For Deletion (14 x 14 maps, 197 forward passes per image), Insertion (same, blur
substrate) and IDSDS single deletion (4 x 4 grid, 17 passes per image) it prints images/s of:

* ours: the `faithfulness` metric, end to end;
* ceiling: the same number of forward passes of the Keras model on one fixed batch inside one
  traced loop (no perturbation, no data movement), the best any implementation can do here;
* reference: `saliency_maps_metrics` 0.0.26 on the PyTorch twin (Deletion, Insertion), and for
  single deletion a PyTorch loop over cells structured like the IDSDS code (one cloned batch
  per cell); skipped when torch or the package is missing.

Targets (faithfulness issue): ours >= 0.9 x ceiling and >= 5 x reference. The last column,
ceiling / reference, is the largest speed-up any implementation could reach with that model:
forward passes alone, without building a single perturbed image.
"""
import functools
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from absl import app, flags  # noqa: E402

import faithfulness  # noqa: E402
from faithfulness import torch_twin  # noqa: E402

flags.DEFINE_integer("images", 16, "Images per deletion/insertion measurement (x8 for single "
                     "deletion).")
flags.DEFINE_integer("size", 224, "Image side.")
flags.DEFINE_integer("batch_size", 20, "Work items per model call (ours and the ceiling); 20 is "
                     "the reference's default chunk.")
flags.DEFINE_integer("repeats", 5, "Timed repeats; the best is reported.")
flags.DEFINE_list("models", ["16-32-64", "8-16-32"], "Benchmark CNNs by their three conv widths; "
                  "one table each (the forward pass gets cheaper from left to right).")
FLAGS = flags.FLAGS
CLASSES = 10


def keras_model(size, widths=(16, 32, 64)):
    keras.utils.set_random_seed(0)
    layers = [keras.Input((size, size, 3))]
    for width in widths:  # explicit padding 1 + valid conv = PyTorch's padding=1
        layers += [keras.layers.ZeroPadding2D(1),
                   keras.layers.Conv2D(width, 3, strides=2, activation="relu")]
    layers += [keras.layers.GlobalAveragePooling2D(), keras.layers.Dense(CLASSES),
               keras.layers.Softmax()]
    return keras.Sequential(layers)


def torch_model(model, widths):
    import torch

    modules, channels = [], 3
    for width in widths:
        modules += [torch.nn.Conv2d(channels, width, 3, stride=2, padding=1), torch.nn.ReLU()]
        channels = width
    modules += [torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(),
                torch.nn.Linear(channels, CLASSES), torch.nn.Softmax(dim=1)]
    return torch_twin.copy_weights(model, torch.nn.Sequential(*modules))


def best_times(runs, repeats):
    """The best of `repeats` timings of each callable, measured in turn (so that a slow spell of
    a shared machine hits all of them alike); each is run once first (tracing)."""
    runs = [run for run in runs if run is not None]
    for run in runs:
        run()
    best = [float("inf")] * len(runs)
    for _ in range(repeats):
        for index, run in enumerate(runs):
            started = time.perf_counter()
            run()
            best[index] = min(best[index], time.perf_counter() - started)
    return best + [None] * (3 - len(best))


def ceiling_run(model, passes, batch_size, size):
    """`passes` forward passes of `model` on one fixed batch, in one traced loop."""
    batch = tf.random.normal([batch_size, size, size, 3])
    chunks = -(-passes // batch_size)

    @tf.function
    def loop():
        def body(i, total):
            return i + 1, total + tf.reduce_sum(model(batch, training=False))
        return tf.while_loop(lambda i, _: i < chunks, body, [0, 0.0], parallel_iterations=1)[1]

    return lambda: loop().numpy()


def reference_single_deletion(twin, data, labels, grid):
    """IDSDS's structure in PyTorch: one clone and forward pass per cell for the whole batch."""
    import torch

    with torch.no_grad():
        base = twin(data).gather(1, labels[:, None])
        side = data.shape[2] // grid
        for row in range(grid):
            for col in range(grid):
                changed = data.clone()
                changed[:, :, row * side:(row + 1) * side, col * side:(col + 1) * side] = 0
                _ = base - twin(changed).gather(1, labels[:, None])


def main(argv):
    del argv
    for config in FLAGS.models:
        widths = tuple(int(w) for w in config.split("-"))
        print_table(f"CNN widths {config}", measure(widths))


def measure(widths):
    """[(metric, images, forward passes, ours s, ceiling s, reference s or None)]."""
    size, batch_size = FLAGS.size, FLAGS.batch_size
    model = keras_model(size, widths)
    rng = np.random.RandomState(0)
    try:
        import torch
        import saliency_maps_metrics.multi_step_metrics as reference
        if not hasattr(np, "trapz"):
            np.trapz = np.trapezoid
        torch.set_num_threads(os.cpu_count())
        twin = torch_model(model, widths)
    except ImportError:
        twin = None
    rows = []

    # Deletion and Insertion: 14 x 14 maps, 197 forward passes per image.
    count = FLAGS.images
    data = rng.randn(count, size, size, 3).astype(np.float32)
    maps = rng.rand(count, 14, 14)
    classes = rng.randint(0, CLASSES, count)
    for name in ("Deletion", "Insertion"):
        metric = getattr(faithfulness, name)(batch_size=batch_size)
        passes = count * 197
        reference_run = None
        if twin is not None:
            reference_run = functools.partial(
                getattr(reference, name)(), twin, torch.tensor(data.transpose(0, 3, 1, 2)),
                torch.tensor(maps[:, None], dtype=torch.float32), torch.tensor(classes))
        seconds, ceiling, reference_seconds = best_times(
            [functools.partial(metric, model, data, maps, classes),
             ceiling_run(model, passes, batch_size, size), reference_run], FLAGS.repeats)
        rows.append((name, count, passes, seconds, ceiling, reference_seconds))

    # IDSDS single deletion: 4 x 4 grid, 17 forward passes per image.
    count = FLAGS.images * 8
    data = rng.randn(count, size, size, 3).astype(np.float32)
    attributions = rng.rand(count, size, size)
    labels = rng.randint(0, CLASSES, count)
    scorer = faithfulness.engine.Scorer(model, None, batch_size)
    passes = count * 17
    reference_run = None
    if twin is not None:
        torch_data = torch.tensor(data.transpose(0, 3, 1, 2))
        torch_labels = torch.tensor(labels)

        def reference_run():
            for i in range(0, count, 64):  # the reference's batches of images
                reference_single_deletion(twin, torch_data[i:i + 64], torch_labels[i:i + 64], 4)
    seconds, ceiling, reference_seconds = best_times(
        [lambda: faithfulness.single_deletion(scorer, data, labels, attributions),
         ceiling_run(model, passes, batch_size, size), reference_run], FLAGS.repeats)
    rows.append(("single deletion", count, passes, seconds, ceiling, reference_seconds))
    return rows


def print_table(title, rows):
    print(f"\n{title}: {FLAGS.size}x{FLAGS.size} images, chunk {FLAGS.batch_size}, "
          f"{os.cpu_count()} CPU threads, TF {tf.__version__}")
    print(f"{'metric':<16} {'images':>6} {'passes':>7} {'ours img/s':>10} {'ceiling':>8} "
          f"{'ratio':>6} {'reference':>9} {'speed-up':>8} {'ceiling/reference':>17}")
    for name, count, passes, seconds, ceiling, reference_seconds in rows:
        ours_rate, ceiling_rate = count / seconds, count / ceiling
        ref_rate = f"{count / reference_seconds:9.2f}" if reference_seconds else f"{'-':>9}"
        speed = f"{reference_seconds / seconds:7.1f}x" if reference_seconds else f"{'-':>8}"
        bound = f"{reference_seconds / ceiling:16.1f}x" if reference_seconds else f"{'-':>17}"
        print(f"{name:<16} {count:>6} {passes:>7} {ours_rate:>10.2f} {ceiling_rate:>8.2f} "
              f"{ours_rate / ceiling_rate:>6.2f} {ref_rate} {speed} {bound}")


if __name__ == "__main__":
    app.run(main)
