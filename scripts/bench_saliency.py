"""Benchmarks the attribution engine against its ceiling and against PAIR `saliency.core`.

    python scripts/bench_saliency.py [--model=small_resnet --image_size=64 --num_images=64]

In one run, on the same model and images, for vanilla gradient, IG (25 steps), SmoothGrad^2
(25 samples) and VarGrad (25 samples):

* engine: `saliency_gen.attribute` images/s (after one warm-up call);
* ceiling: the best raw batched input-gradient throughput over batch sizes (a bare traced
  gradient of the target logits), divided by the gradients each method needs per image. The
  batch size is chosen once; the ceiling is then re-measured beside each method's engine runs
  (interleaved, best of --repeats each), so machine drift affects both alike;
* PAIR: `saliency.core` images/s at its defaults (one gradient per call) and with `batch_size`
  tuned where PAIR has one (IG); PAIR has no VarGrad, so its row times the equivalent loop of 25
  `GetMask` calls on noisy inputs.

Prints a table with the ratios engine/ceiling (target >= 0.9) and engine/PAIR (target >= 3 on the
SmoothGrad family) and writes it as JSON with --output_json.
"""
import json
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from absl import flags  # noqa: E402

import keras  # noqa: E402
import models  # noqa: E402
import saliency_gen  # noqa: E402
from models.errors import run_main  # noqa: E402
from saliency_gen import pair  # noqa: E402

FLAGS = flags.FLAGS
flags.DEFINE_string("model", "small_resnet", "Registered model to benchmark (random weights).")
flags.DEFINE_integer("image_size", 64, "Square input size.")
flags.DEFINE_integer("num_images", 64, "Images explained per measurement.")
flags.DEFINE_integer("pair_images", 4, "Images explained by PAIR (it is slow; rates are per image).")
flags.DEFINE_string("batch_sizes", "8,16,32,64,128,256", "Batch sizes tried for the ceiling.")
flags.DEFINE_integer("repeats", 3, "Timed repetitions; the best is kept.")
flags.DEFINE_string("output_json", None, "Optional JSON output.")

METHODS = (  # (label, engine name, gradients per image, parameters)
    ("gradient", "gradient", 1, {}),
    ("IG (25 steps)", "integrated_gradients", 25, {"steps": 25}),
    ("SmoothGrad^2 (25)", "smoothgrad_sq(gradient)", 25, {"nsamples": 25}),
    ("VarGrad (25)", "vargrad(gradient)", 25, {"nsamples": 25}),
)


def _best_time(function, repeats):
    function()  # warm-up: tracing and caches
    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        function()
        best = min(best, time.perf_counter() - started)
    return best


def gradient_runner(model, images, targets, size):
    """A callable computing `size` x `rounds` raw input gradients; returns (callable, count)."""
    shape = images.shape[1:]

    @tf.function(input_signature=[tf.TensorSpec([None, *shape], tf.float32),
                                  tf.TensorSpec([None], tf.int32)])
    def gradient(x, t):
        with tf.GradientTape() as tape:
            tape.watch(x)
            score = tf.reduce_sum(tf.gather(model(x, training=False), t, batch_dims=1))
        return tape.gradient(score, x)

    reps = np.resize(np.arange(len(images)), max(size, len(images)))
    x = tf.constant(images[reps[:size]])
    t = tf.constant(targets[reps[:size]].astype(np.int32))
    rounds = max(1, 256 // size)

    def run():
        for _ in range(rounds):
            gradient(x, t).numpy()

    return run, size * rounds


def ceiling(model, images, targets, batch_sizes, repeats):
    """(best gradients/s, its batch size, {batch size: gradients/s}) of a bare traced gradient."""
    rates = {}
    for size in batch_sizes:
        run, count = gradient_runner(model, images, targets, size)
        rates[size] = count / _best_time(run, repeats)
    best = max(rates, key=rates.get)
    return rates[best], best, rates


def interleaved(engine_run, ceiling_run, repeats):
    """Best times of two callables measured alternately (after one warm-up each)."""
    engine_run()
    ceiling_run()
    engine_best = ceiling_best = float("inf")
    for _ in range(repeats):
        for run, which in ((engine_run, 0), (ceiling_run, 1)):
            started = time.perf_counter()
            run()
            elapsed = time.perf_counter() - started
            if which == 0:
                engine_best = min(engine_best, elapsed)
            else:
                ceiling_best = min(ceiling_best, elapsed)
    return engine_best, ceiling_best


def pair_rate(model, images, targets, method, params, batch_size=None):
    from saliency import core

    call = pair.as_call_model_function(model)

    def run():
        for image, target in zip(images, targets):
            args = {"class": int(target)}
            if method == "gradient":
                core.GradientSaliency().GetMask(image, call, args)
            elif method == "integrated_gradients":
                core.IntegratedGradients().GetMask(image, call, args, x_steps=params["steps"],
                                                   batch_size=batch_size or 1)
            elif method == "smoothgrad_sq(gradient)":
                core.GradientSaliency().GetSmoothedMask(image, call, args,
                                                        nsamples=params["nsamples"],
                                                        magnitude=True)
            else:  # VarGrad: PAIR has none; the equivalent loop of GetMask on noisy inputs
                sigma = 0.15 * (image.max() - image.min())
                for _ in range(params["nsamples"]):
                    core.GradientSaliency().GetMask(
                        image + np.random.normal(0, sigma, image.shape), call, args)

    return len(images) / _best_time(run, 1)


def main(argv):
    del argv
    keras.utils.set_random_seed(0)
    size = FLAGS.image_size
    model = models.build(FLAGS.model, 10, (size, size, 3))
    images = np.random.default_rng(0).normal(0, 50, (FLAGS.num_images, size, size, 3)).astype(
        np.float32)
    targets = np.argmax(saliency_gen.predict(model, images), axis=1)
    batch_sizes = [int(b) for b in FLAGS.batch_sizes.split(",")]
    gradients_per_second, best_batch, rates = ceiling(model, images, targets, batch_sizes,
                                                      FLAGS.repeats)
    print(f"model {FLAGS.model} at {size}x{size}, {os.cpu_count()} CPUs; raw gradient "
          f"throughput by batch size: " + ", ".join(f"{b}: {r:.0f}/s" for b, r in rates.items()))
    ceiling_run, ceiling_count = gradient_runner(model, images, targets, best_batch)
    rows = []
    for label, method, per_image, params in METHODS:
        engine_seconds, ceiling_seconds = interleaved(
            lambda method=method, params=params: saliency_gen.attribute(
                model, images, method, targets, batch_size=best_batch, **params),
            ceiling_run, FLAGS.repeats)
        engine = len(images) / engine_seconds
        limit = ceiling_count / ceiling_seconds / per_image
        pair_images, pair_targets = images[:FLAGS.pair_images], targets[:FLAGS.pair_images]
        pair_default = pair_rate(model, pair_images, pair_targets, method, params)
        pair_tuned = pair_default
        if method == "integrated_gradients":
            pair_tuned = max(pair_rate(model, pair_images, pair_targets, method, params, b)
                             for b in (5, 25))
        rows.append({"method": label, "engine_images_per_s": engine, "ceiling_images_per_s": limit,
                     "ratio_to_ceiling": engine / limit, "pair_default_images_per_s": pair_default,
                     "pair_tuned_images_per_s": pair_tuned,
                     "speedup_vs_pair_default": engine / pair_default,
                     "speedup_vs_pair_tuned": engine / pair_tuned})
    print(f"\nchunk size {best_batch} (the ceiling's best batch size), {len(images)} images\n")
    header = (f"{'method':<20}{'engine img/s':>13}{'ceiling':>10}{'ratio':>7}"
              f"{'PAIR dflt':>11}{'PAIR tuned':>11}{'x dflt':>8}{'x tuned':>8}")
    print(header)
    for row in rows:
        print(f"{row['method']:<20}{row['engine_images_per_s']:>13.2f}"
              f"{row['ceiling_images_per_s']:>10.2f}{row['ratio_to_ceiling']:>7.2f}"
              f"{row['pair_default_images_per_s']:>11.2f}{row['pair_tuned_images_per_s']:>11.2f}"
              f"{row['speedup_vs_pair_default']:>8.1f}{row['speedup_vs_pair_tuned']:>8.1f}")
    ceiling_ok = all(row["ratio_to_ceiling"] >= 0.9 for row in rows)
    pair_ok = all(row["speedup_vs_pair_tuned"] >= 3 for row in rows[2:])
    print(f"\nengine/ceiling >= 0.9 for every method: {'yes' if ceiling_ok else 'NO'}; "
          f"SmoothGrad family >= 3x PAIR: {'yes' if pair_ok else 'NO'}")
    if FLAGS.output_json:
        with open(FLAGS.output_json, "w", encoding="utf-8") as handle:
            json.dump({"model": FLAGS.model, "image_size": size, "chunk_size": best_batch,
                       "ceiling_rates": rates, "rows": rows}, handle, indent=2)
    return 0 if ceiling_ok and pair_ok else 1


if __name__ == "__main__":
    run_main(main)
