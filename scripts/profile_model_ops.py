"""Where a zoo network's inference time goes, and what folding its batch norms buys
(docs/models.md, "Folded inference"):

    python scripts/profile_model_ops.py [--models=efficientnet_lite0@224,resnet50@224,...]

For each NAME@SIDE: the zoo network with seeded weights and batch-norm statistics drawn far
from the identity (the rates do not depend on the values), on one batch of --batch_size
random images. It prints the forward and input-gradient rates (images/s) of the model as
Keras runs it (`model(x, training=False)`) and of `models.architectures.folding.folded_call`
(its conv + batch-norm pairs folded, its "same" zero pads merged), timed in turn (best of
--repeats), their ratio, and the largest logit and gradient differences relative to the
largest value; with --ops, the forward pass's time by TensorFlow operation type, from
TensorFlow's profiler, for both. Writes <output>.json.
"""
import collections
import dataclasses
import glob
import os
import tempfile
import time
from typing import TYPE_CHECKING, Any

import numpy as np

from models.foundation import progress, provenance
from models.foundation.cli import option, run_binary
from models.foundation.files import write_json
from models.foundation.lazy import lazy_module
from models.foundation.rules import at_least

if TYPE_CHECKING:  # the type checker's view of the same modules
    import keras
    import tensorflow as tf

    from models.architectures import folding, zoo
else:
    keras = lazy_module("keras")
    tf = lazy_module("tensorflow")
    folding = lazy_module("models.architectures.folding")
    zoo = lazy_module("models.architectures.zoo")
# (scripts/ is a folder of scripts, not a package the type checker follows)
# run as `python -m scripts.profile_model_ops` or as `python scripts/profile_model_ops.py`
bench_faithfulness: Any = lazy_module(
    f"{__package__}.bench_faithfulness" if __package__ else "bench_faithfulness")


@dataclasses.dataclass(frozen=True)
class Config:
    """The script's options (one flag each)."""

    models: tuple = option(("efficientnet_lite0@224", "resnet50@224", "small_resnet@64"),
                           "Zoo networks as NAME@SIDE.")
    batch_size: int = option(32, "Images per pass.", rule=at_least(1))
    repeats: int = option(3, "Timings of each rate (the best counts).", rule=at_least(1))
    ops: bool = option(False, "Also the forward pass's time by operation type (profiler).")
    output: str = option("model_ops", "Output stem: <output>.json.")
    seed: int = option(0, "Seed of the weights and images.")


def network(name: str, side: int, seed: int) -> Any:
    """The zoo network `name` at `side` pixels, 1,000 classes, seeded weights, its batch norms'
    statistics and affine parameters drawn from U(0.5, 2) (variance, gamma) and N(0, 0.5)."""
    keras.utils.set_random_seed(seed)
    model = zoo.build(name, 1000, (side, side, 3))
    rng = np.random.default_rng(seed)
    for layer in model.layers:
        if isinstance(layer, keras.layers.BatchNormalization):
            layer.set_weights([
                rng.uniform(0.5, 2.0, value.shape).astype(np.float32)
                if "variance" in weight.path or "gamma" in weight.path
                else rng.normal(0.0, 0.5, value.shape).astype(np.float32)
                for value, weight in zip(layer.get_weights(), layer.weights)])
    return model


def passes(call: Any) -> tuple:
    """(forward, input gradient of the summed class-0 logits), traced."""
    @tf.function
    def forward(x):
        return call(x)

    @tf.function
    def gradient(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            total = tf.reduce_sum(call(x)[:, 0])
        return tape.gradient(total, x)
    return forward, gradient


def op_seconds(function: Any, x: Any, runs: int = 3) -> dict:
    """{operation type: seconds per call} of `function(x)` from TensorFlow's profiler (summed
    over threads)."""
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    function(x)
    with tempfile.TemporaryDirectory() as folder:
        tf.profiler.experimental.start(folder)
        for _ in range(runs):
            np.asarray(function(x))
        tf.profiler.experimental.stop()
        space = xplane_pb2.XSpace()
        with open(glob.glob(os.path.join(folder, "plugins", "profile", "*", "*.xplane.pb"))[0],
                  "rb") as handle:
            space.ParseFromString(handle.read())
    totals: collections.Counter = collections.Counter()
    for plane in space.planes:
        for line in plane.lines:
            for event in line.events:
                name = plane.event_metadata[event.metadata_id].name
                kind = name.rsplit(":", 1)[-1].strip()
                # an operation's event is "layer/op:OpType"; the executor's own ("Run",
                # "Process", the traced function) enclose them
                if ":" in name and "::" not in name and not kind.startswith("__inference"):
                    totals[kind] += event.duration_ps / 1e12 / runs
    return dict(totals.most_common())


def profile(entry: str, config: Config) -> dict:
    name, _, side = entry.partition("@")
    size = int(side or 224)
    model = network(name, size, config.seed)
    x = tf.constant(np.random.default_rng(config.seed).normal(
        size=(config.batch_size, size, size, 3)).astype(np.float32))
    norms, pads = folding.foldable(model)
    plain = passes(lambda images: model(images, training=False))
    folded = passes(folding.folded_call(model))
    seconds = bench_faithfulness.best_times(
        [lambda: np.asarray(plain[0](x)), lambda: np.asarray(folded[0](x)),
         lambda: np.asarray(plain[1](x)), lambda: np.asarray(folded[1](x))], config.repeats)
    rates = [config.batch_size / value for value in seconds]
    found = {"model": entry, "folded_pairs": len(norms), "merged_pads": len(pads),
             "batch_norms": sum(isinstance(layer, keras.layers.BatchNormalization)
                                for layer in model.layers),
             "forward": {"keras": rates[0], "folded": rates[1], "ratio": rates[1] / rates[0]},
             "gradient": {"keras": rates[2], "folded": rates[3], "ratio": rates[3] / rates[2]}}
    for kind, index in (("logits", 0), ("gradients", 1)):
        first, second = np.asarray(plain[index](x)), np.asarray(folded[index](x))
        found[f"{kind}_relative_difference"] = float(np.abs(first - second).max()
                                                     / np.abs(first).max())
    if config.ops:
        found["forward_ops_s"] = {"keras": op_seconds(plain[0], x),
                                  "folded": op_seconds(folded[0], x)}
    return found


def run(config: Config) -> list:
    rows = []
    with progress.bar(len(config.models), "networks profiled", "network") as bar:
        for entry in config.models:
            rows.append(profile(entry, config))
            bar.update(1)
    machine = provenance.machine()
    print(f"{time.strftime('%Y-%m-%d')}, {machine}, batch {config.batch_size}, best of "
          f"{config.repeats}")
    print("| network | BN folded / all | pads merged | forward: Keras, folded (images/s) | "
          "ratio | gradient: Keras, folded | ratio | logits, gradients: largest difference |")
    print("|---|---|---|---|---|---|---|---|")
    for row in rows:
        forward, gradient = row["forward"], row["gradient"]
        print(f"| {row['model']} | {row['folded_pairs']} / {row['batch_norms']} | "
              f"{row['merged_pads']} | {forward['keras']:.1f}, {forward['folded']:.1f} | "
              f"{forward['ratio']:.2f} | {gradient['keras']:.1f}, {gradient['folded']:.1f} | "
              f"{gradient['ratio']:.2f} | {row['logits_relative_difference']:.1e}, "
              f"{row['gradients_relative_difference']:.1e} |")
    for row in rows:
        if "forward_ops_s" in row:
            for kind, table in row["forward_ops_s"].items():
                total = sum(table.values())
                shares = ", ".join(f"{op} {seconds * 1e3:.1f} ms" for op, seconds in
                                   list(table.items())[:8])
                print(f"{row['model']} forward ({kind}), ms per batch by operation: {shares} "
                      f"(all operations {total * 1e3:.1f} ms)")
    write_json(f"{config.output}.json", {"date": time.strftime("%Y-%m-%d"), "machine": machine,
                                         "config": dataclasses.asdict(config), "rows": rows})
    return rows


if __name__ == "__main__":
    run_binary(Config, run)
