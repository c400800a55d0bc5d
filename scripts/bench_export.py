"""Export and load times of `models.export` against Keras' ExportArchive with the same
endpoints, measured in one run (docs/models.md): `python scripts/bench_export.py`.

The peer is what `models.export` used before: a `keras.export.ExportArchive` that tracks the
model and adds the same endpoints (serve, features_and_logits, cam, guided). Both are loaded
with `tf.saved_model.load`. Prints seconds and the peer / ours ratio per model, with the CPU.
"""
import dataclasses
import os
import tempfile
import time
from typing import TYPE_CHECKING

import models
from models.foundation import progress, provenance
from models.foundation.cli import option, run_binary
from models.foundation.lazy import lazy_module

# Loaded on first use: --help and a bad flag are answered before TensorFlow starts
# (docs/architecture.md, "Light imports").
if TYPE_CHECKING:  # the type checker's view of the same modules
    from models.architectures import folding, zoo
    from models.architectures import guided as guided_views
else:
    folding = lazy_module("models.architectures.folding")
    guided_views = lazy_module("models.architectures.guided")
    zoo = lazy_module("models.architectures.zoo")


@dataclasses.dataclass(frozen=True)
class Config:
    """The script's options (one flag each)."""

    models: tuple = option(("small_cnn", "resnet50"), "Zoo models to export (small variants).")
    size: int = option(32, "Input side.")


def keras_archive_export(model, path: str) -> None:
    """The peer: Keras' ExportArchive with the endpoints `models.export` writes."""
    import keras  # here, so that --help answers without starting TensorFlow
    import tensorflow as tf

    model = guided_views.logits_model(model)
    features = zoo.features_and_logits_model(model, zoo.feature_layer_name(model))
    image_spec = tf.TensorSpec([None, *model.inputs[0].shape[1:]], tf.float32)
    target_spec = tf.TensorSpec([None], tf.int32)
    archive = keras.export.ExportArchive()
    archive.track(model)
    # the same passes as models.export's (batch norms folded, docs/models.md)
    serve, features_and_logits = folding.folded_call(model), folding.folded_call(features)
    archive.add_endpoint("serve", serve, [image_spec])
    archive.add_endpoint("features_and_logits", lambda x: dict(zip(
        ("features", "logits"), features_and_logits(x))), [image_spec])
    archive.add_endpoint("cam", lambda x, t: dict(zip(
        ("features", "logits", "gradients"), zoo.cam_outputs(features_and_logits, x, t))),
        [image_spec, target_spec])
    guided = guided_views.guided_model(model)
    archive.track(guided)
    archive.add_endpoint("guided", folding.folded_call(guided), [image_spec])
    archive.write_out(path, verbose=False)


def _timed(function) -> float:
    started = time.perf_counter()
    function()
    return time.perf_counter() - started


def run(config: Config) -> dict:
    """Exports and loads each model both ways; prints the table and returns the seconds."""
    print(f"machine: {provenance.machine()}", flush=True)
    import tensorflow as tf

    rows = {}
    work = tempfile.mkdtemp(prefix="bench-export-")
    done = progress.bar(len(config.models), "bench_export: models", "model")
    for name in config.models:
        side = max(config.size, models.spec(name).min_size)
        model = models.build(name, 5, (side, side, 3), **dict(models.spec(name).small))
        ours_path, peer_path = os.path.join(work, f"{name}-ours"), os.path.join(work, name)
        # ours first: what the first export warms up (the guided copy, Keras' caches) helps
        # the peer, so the ratio is not flattered
        ours = _timed(lambda: models.export(model, ours_path))
        peer = _timed(lambda: keras_archive_export(model, peer_path))
        ours_load = _timed(lambda: tf.saved_model.load(ours_path))
        peer_load = _timed(lambda: tf.saved_model.load(peer_path))
        rows[name] = {"export": ours, "export_peer": peer, "load": ours_load,
                      "load_peer": peer_load}
        done.update(1)
    done.close()
    print(f"{'model':<12}{'export s':>10}{'peer s':>9}{'ratio':>7}{'load s':>9}{'peer s':>9}"
          f"{'ratio':>7}   ({provenance.cpu_model()}, {os.cpu_count()} CPUs)")
    for name, row in rows.items():
        print(f"{name:<12}{row['export']:>10.1f}{row['export_peer']:>9.1f}"
              f"{row['export_peer'] / row['export']:>7.2f}{row['load']:>9.1f}"
              f"{row['load_peer']:>9.1f}{row['load_peer'] / row['load']:>7.2f}")
    return rows


if __name__ == "__main__":
    run_binary(Config, run)
