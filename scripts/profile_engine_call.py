"""Where a small engine call's time goes (docs/saliency.md, "By call size"), measured in one run:

    python -m scripts.profile_engine_call [--model=plain_cnn@64] [--images=24] [--batch_size=64]
        [--repeats=40]

Times one call of a one-gradient method (`--method`, default the plain gradient) on
`--images` images in six ways, best of --repeats each, taken in turn
(`scripts.bench_faithfulness.best_times`):

* bare: a bare traced input gradient of exactly those images (`scripts.bench_saliency`'s
  ceiling at that call size, traced for that batch);
* stream: the engine's traced stream alone, on tensors made beforehand;
* group: the engine's run of one group of images (`engine._run_group`): the stream with its
  copy of the images into a tensor, its argument tensors and the maps' read-back (which turns
  -0.0 into 0.0);
* attribute: the whole `saliency_gen.attribute` call (the group, the argument checks, the
  images' finiteness check, the targets), its method resolved once beforehand;
* named: the same call naming the method, as a user's call does (the name resolved at each
  call, a researcher's method checked for an edit of its files: docs/saliency.md, "Your own
  method");
* predicted targets: the same call without targets, which predicts them first (a forward pass
  of the images through the model's kept, traced predictor).

Prints each one's milliseconds and the bare gradient's time over it.
"""
import dataclasses
from typing import TYPE_CHECKING

import numpy as np

import models  # noqa: F401,I001  (first: TensorFlow loads quietly)
import saliency_gen
from models.foundation import provenance
from models.foundation.cli import option, run_binary
from models.foundation.lazy import lazy_module
from models.foundation.rules import Checked, at_least
from scripts.bench_faithfulness import best_times
from scripts.bench_saliency import (
    ENGINE_DEFAULT_CHUNK,
    USER_FUNCTIONS,
    benchmark_model,
    traced_gradient,
)

# Loaded on first use: --help is answered before TensorFlow starts (docs/architecture.md,
# "Light imports").
if TYPE_CHECKING:  # the type checker's view of the same modules
    import tensorflow as tf

    from models.formats import adapter
    from models.foundation import executor
    from saliency_gen.attribution import engine, names
else:
    tf = lazy_module("tensorflow")
    adapter = lazy_module("models.formats.adapter")
    executor = lazy_module("models.foundation.executor")
    engine = lazy_module("saliency_gen.attribution.engine")
    names = lazy_module("saliency_gen.attribution.names")


@dataclasses.dataclass(frozen=True)
class Config(Checked):
    model: str = option("plain_cnn@64", "The model as name@side (random weights, as in "
                                        "scripts/bench_saliency.py).")
    images: int = option(24, "Images in the call.", rule=at_least(1))
    method: str = option("gradient", "A one-gradient method of the engine, or the benchmark's "
                         "user method (bench_blob: scripts/bench_saliency.py's gradient x "
                         "blob).")
    batch_size: int = option(ENGINE_DEFAULT_CHUNK, "The engine's largest chunk (its "
                             "`batch_size`): a call of more images runs its chunk loop.",
                             rule=at_least(1))
    repeats: int = option(40, "Timings of each way (the best counts).", rule=at_least(1))


def run(args: Config) -> None:
    print(f"machine: {provenance.machine()}")
    for name, function in USER_FUNCTIONS.items():  # as bench_saliency registers them
        saliency_gen.register_method(name, function, replace=True)
    model, side = benchmark_model(args.model)
    images = np.random.default_rng(0).normal(0, 50, (args.images, side, side, 3)).astype(
        np.float32)
    targets = np.argmax(saliency_gen.predict(model, images), axis=1)
    chosen = names.resolved(args.method)
    shape = images.shape[1:]
    count = len(images)
    # the runner `saliency_gen.attribute` makes for this call
    chunk = executor.chunk_size(count, args.batch_size)
    runner = engine._runner(adapter.adapt(model), model, chosen.spec, shape, chunk, None, 0,
                            args.method, single=count == chunk)
    x, t = tf.constant(images), tf.constant(targets, tf.int32)
    ids, sigmas = np.arange(count, dtype=np.int64), np.zeros(count, np.float32)
    bare = traced_gradient(model, shape, count)
    arguments = (x, t, tf.constant(ids), tf.constant(sigmas), tf.zeros([1, *shape]))
    ways = {"bare": lambda: bare(x, t).numpy(),
            "stream": lambda: np.asarray(runner.run(*arguments)),
            "group": lambda: engine._run_group(runner, images, targets, ids, sigmas, 0, count,
                                               args.method),
            "attribute": lambda: saliency_gen.attribute(model, images, chosen, targets,
                                                        batch_size=args.batch_size),
            "named": lambda: saliency_gen.attribute(model, images, args.method, targets,
                                                    batch_size=args.batch_size),
            "predicted targets": lambda: saliency_gen.attribute(model, images, chosen,
                                                                batch_size=args.batch_size)}
    seconds = dict(zip(ways, best_times(list(ways.values()), args.repeats)))
    print(f"{args.model}, {args.method}, {count} images a call in chunks of {chunk}")
    print(f"{'way':18} {'ms':>7} {'bare / way':>11}")
    for way, spent in seconds.items():
        print(f"{way:18} {spent * 1000:7.3f} {seconds['bare'] / spent:11.2f}")


if __name__ == "__main__":
    run_binary(Config, run)
