"""What exact SmoothGrad noise costs next to a cheap model's gradients.

    python scripts/bench_noise_draws.py [--model=plain_cnn --image_size=64 --batch=128]

Inside one traced loop of --chunks chunks of --batch images each, it times: the raw input
gradients alone; the engine's keyed Gaussian draws alone
(`saliency_gen.attribution.noise.group_noise`:
stateless Philox bits and Box-Muller normals); the uniform bits alone (the share of the draws that
is not the logarithm and sine/cosine); the gradients of noisy images with draws and gradients in
turn; and the same with two chunks in flight, to see whether draws overlap idle model time. It
prints items/s, ms per chunk and the bound draws put on any exact noise wrapper:
gradient / (gradient + draws) of the raw-gradient ceiling, and the looser bound the uniform bits
alone put on any noise wrapper that draws fresh keyed bits for every element.
"""
import dataclasses
import time
from typing import TYPE_CHECKING

import numpy as np

import models  # noqa: F401, I001  (first: TensorFlow loads quietly)
from models.foundation import progress, provenance
from models.foundation.cli import option, run_binary
from models.foundation.lazy import lazy_module
from models.foundation.tracing import quiet_retracing

# Loaded on first use: --help and a bad flag are answered before TensorFlow starts
# (docs/architecture.md, "Light imports").
if TYPE_CHECKING:  # the type checker's view of the same modules
    import keras
    import tensorflow as tf

    from saliency_gen.attribution import noise
else:
    keras = lazy_module("keras")
    tf = lazy_module("tensorflow")
    noise = lazy_module("saliency_gen.attribution.noise")


@dataclasses.dataclass(frozen=True)
class Config:
    """The script's options (one flag each)."""

    model: str = option("plain_cnn", "Registered model (random weights).")
    image_size: int = option(64, "Square input size.")
    batch: int = option(128, "Work items (noisy images) per chunk.")
    samples: int = option(25, "Noise samples per image, drawn per image as the engine does.")
    chunks: int = option(20, "Chunks per timed loop.")
    repeats: int = option(3, "Timed repetitions; the best is kept.")


def run(config: Config) -> dict:
    print(f"machine: {provenance.machine()}", flush=True)
    keras.utils.set_random_seed(0)
    shape = [config.image_size, config.image_size, 3]
    model = models.build(config.model, 10, tuple(shape))
    images = tf.constant(np.random.default_rng(0).normal(0, 50, [config.batch, *shape]),
                         tf.float32)
    targets = tf.zeros([config.batch], tf.int32)

    def gradient(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            score = tf.reduce_sum(tf.gather(model(x, training=False), targets, batch_dims=1))
        return tape.gradient(score, x)

    per_chunk = -(-config.batch // config.samples)  # images whose samples fill one chunk

    def draws(index):  # the engine's draws: --samples per image, one keyed stream per image
        ids = tf.range(per_chunk, dtype=tf.int64) + index * per_chunk
        noisy = noise.group_noise(ids, config.samples, 7, shape)
        return tf.reshape(noisy, [-1, *shape])[:config.batch]

    def uniform(index):
        return tf.random.stateless_uniform([config.batch, *shape], tf.stack([index, 7]))

    work = {"gradients": lambda index: gradient(images),
            "normal draws": draws,
            "uniform bits": uniform,
            "draws, then gradients": lambda index: gradient(images + draws(index))}

    def timed_loop(step, parallel):
        @tf.function(autograph=False)
        def loop():
            def body(index, total):
                return index + 1, total + step(index)
            return tf.while_loop(lambda index, _: index < config.chunks, body,
                                 [tf.constant(0, tf.int64), tf.zeros_like(images)],
                                 parallel_iterations=parallel)[1]
        loop = quiet_retracing(loop)  # one traced loop per kind of work, by design
        loop()
        best = float("inf")
        for _ in range(config.repeats):
            started = time.perf_counter()
            loop().numpy()
            best = min(best, time.perf_counter() - started)
        return best / config.chunks

    timings = progress.bar(len(work) + 1, "bench_noise_draws: kinds of work", "kind")
    seconds = {}
    for name, step in work.items():
        seconds[name] = timed_loop(step, 1)
        timings.update(1)
    seconds["draws and gradients, 2 chunks in flight"] = timed_loop(
        work["draws, then gradients"], 2)
    timings.update(1)
    timings.close()
    print(f"{config.model} at {config.image_size}x{config.image_size}, chunks of {config.batch}")
    for name, value in seconds.items():
        print(f"{name:<42}{config.batch / value:>10.0f} items/s{value * 1e3:>9.2f} ms/chunk")
    bound = seconds["gradients"] / (seconds["gradients"] + seconds["normal draws"])
    bits_bound = seconds["gradients"] / (seconds["gradients"] + seconds["uniform bits"])
    normals = config.batch * int(np.prod(shape)) / seconds["normal draws"]
    print(f"\nnormals drawn: {normals / 1e6:.0f} M/s; bound on an exact noise wrapper: "
          f"{bound:.2f} of the raw-gradient ceiling; on any wrapper drawing fresh keyed bits "
          f"for every element (whatever turns them into normals): {bits_bound:.2f}")
    return {"seconds_per_chunk": seconds, "bound": bound, "bits_bound": bits_bound}


if __name__ == "__main__":
    run_binary(Config, run)
