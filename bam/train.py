"""Training BAM classifiers on a dataset in BAM's layout (obj, scene, scene_only, ...).

    python -m bam.train --dataset=obj --data_dir=data/bam_synthetic --model_dir=models_dir

`train_classifier` reads `<data_dir>/<dataset>/train/<class>/*` and `val/` + `val.txt`, applies
BAM preprocessing (PIL bilinear resize to the model input, mean-subtracted RGB), trains a model
from `models` with Adam, and reports validation accuracy. Images are decoded once into memory
(fine for the synthetic world; the real dataset needs a streaming reader).
"""
import json
import os
import time

import keras
import numpy as np
import tensorflow as tf
from absl import flags

import models
from bam import dataset
from models.errors import UserError, run_main
from models.files import atomic_output
from models.preprocessing import INPUT_SPACES, load_bam_pixels


class _TimeLimit(keras.callbacks.Callback):
    """Stops training at the end of the batch on which `seconds` have passed."""

    def __init__(self, seconds):
        super().__init__()
        self.seconds = seconds
        self.started = None

    def on_train_begin(self, logs=None):
        self.started = time.time()

    def on_train_batch_end(self, batch, logs=None):
        if self.seconds and time.time() - self.started > self.seconds:
            self.model.stop_training = True


def train_classifier(data_dir, dataset_name, model_name="small_cnn", input_size=None, epochs=10,
                     batch_size=64, learning_rate=1e-3, seed=0, max_seconds=None, verbose=0,
                     **model_options):
    """Trains `model_name` on `<data_dir>/<dataset_name>`; returns (model, report dict).

    `input_size` defaults to the images' own size. The report holds the validation accuracy, the
    numbers of images and the training seconds (decoding excluded). `max_seconds` stops training
    early at that wall-clock budget (which makes the epoch count machine-dependent). Training is
    deterministic: the seed fixes initialisation and order, and TensorFlow's op determinism is
    enabled for the process (same seed, same weights; no measurable cost on CPU).
    """
    root = os.path.join(data_dir, dataset_name)
    train = dataset.train_listing(root)
    val = dataset.val_listing(root)
    if input_size is None:
        input_size = load_bam_pixels(train[0][0]).shape[0]
    space = INPUT_SPACES["caffe_rgb"]
    started = time.time()
    train_x = dataset.load_pixels([path for path, _ in train], input_size)
    val_x = dataset.load_pixels([path for path, _ in val], input_size)
    decode_seconds = time.time() - started
    train_y = np.array([label for _, label in train], np.int64)
    val_y = np.array([label for _, label in val], np.int64)
    num_classes = int(train_y.max()) + 1

    tf.config.experimental.enable_op_determinism()
    keras.utils.set_random_seed(seed)
    model = models.build(model_name, num_classes, (input_size, input_size, 3), **model_options)
    model.compile(keras.optimizers.Adam(learning_rate),
                  keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])
    pipeline = (tf.data.Dataset.from_tensor_slices((train_x, train_y))
                .shuffle(len(train_y), seed=seed, reshuffle_each_iteration=True)
                .map(lambda x, y: (space.from_uint8(tf.image.random_flip_left_right(x, seed=seed)),
                                   y), num_parallel_calls=tf.data.AUTOTUNE)
                .batch(batch_size).prefetch(tf.data.AUTOTUNE))
    started = time.time()
    history = model.fit(pipeline, epochs=epochs, verbose=verbose, shuffle=False,  # shuffled above
                        callbacks=[_TimeLimit(max_seconds)])
    train_seconds = time.time() - started
    val_inputs = space.from_uint8(val_x)
    logits = model.predict(val_inputs, batch_size=256, verbose=0)
    accuracy = float(np.mean(np.argmax(logits, axis=1) == val_y))
    return model, {
        "dataset": dataset_name, "model": model_name, "input_size": input_size,
        "val_accuracy": accuracy, "num_train": len(train_y), "num_val": len(val_y),
        "epochs_run": len(history.history["loss"]), "train_seconds": train_seconds,
        "decode_seconds": decode_seconds, "seed": seed,
    }


def train_and_export(data_dir, dataset_name, model_dir, **options):
    """Trains on `<data_dir>/<dataset_name>`, exports `<model_dir>/<dataset_name>` (SavedModel)
    and writes the report beside it as `<model_dir>/<dataset_name>.json`; returns the report."""
    model, report = train_classifier(data_dir, dataset_name, **options)
    path = os.path.join(model_dir, dataset_name)
    info = models.export(model, path, preprocessing="caffe_rgb", extra=report, overwrite=True)
    report = dict(report, model_path=path, model_id=info["model_id"])
    with atomic_output(os.path.join(model_dir, f"{dataset_name}.json")) as temporary:
        with open(temporary, "w", encoding="utf-8") as handle:
            json.dump(report, handle, indent=2, sort_keys=True)
    return report


def define_flags():
    """The binary's flags (defined only when it runs)."""
    flags.DEFINE_string("dataset", "obj", "Dataset folder to train on: obj, scene, scene_only, "
                        "sceneK.")
    flags.DEFINE_string("data_dir", None, "BAM data root (holds obj/, scene/, ...).")
    flags.DEFINE_string("model_dir", None, "Where to export the model (<model_dir>/<dataset>).")
    flags.DEFINE_string("model", "small_cnn", "Registered model (models.REGISTRY).")
    flags.DEFINE_integer("input_size", None, "Model input side (default: the images' size).")
    flags.DEFINE_integer("epochs", 3, "Training epochs.")
    flags.DEFINE_integer("batch_size", 64, "Training batch size.")
    flags.DEFINE_float("learning_rate", 1e-3, "Adam learning rate.")
    flags.DEFINE_float("max_seconds", None, "Stop training after this wall-clock budget.")
    flags.DEFINE_integer("seed", 0, "Seed of initialisation and data order.")


def main(argv):
    del argv
    for name in ("data_dir", "model_dir"):
        if not getattr(flags.FLAGS, name):
            raise UserError(f"--{name} is required")
    f = flags.FLAGS
    report = train_and_export(f.data_dir, f.dataset, f.model_dir, model_name=f.model,
                              input_size=f.input_size, epochs=f.epochs, batch_size=f.batch_size,
                              learning_rate=f.learning_rate, seed=f.seed,
                              max_seconds=f.max_seconds, verbose=1)
    print(f"{f.dataset}: val accuracy {report['val_accuracy']:.4f} on {report['num_val']} images "
          f"after {report['epochs_run']} epochs ({report['train_seconds']:.0f} s); exported to "
          f"{report['model_path']}")


if __name__ == "__main__":
    define_flags()
    run_main(main)
