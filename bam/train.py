"""Training BAM classifiers on a dataset in BAM's layout (obj, scene, scene_only, ...).

`train_classifier` reads `<data_dir>/<dataset>/train/<class>/*` and `val/` + `val.txt`, applies
BAM preprocessing (PIL bilinear resize to the model input, mean-subtracted RGB), trains a model
from `models` with Adam, and reports validation accuracy. Images are decoded once into memory
(fine for the synthetic world; the real dataset needs a streaming reader).
"""
import os
import time

import keras
import numpy as np
import tensorflow as tf

import models
from bam import dataset
from models.preprocessing import INPUT_SPACES, load_bam_pixels


def load_split(paths, size):
    """uint8 [N, size, size, 3] of the images at `paths`, BAM geometry (PIL bilinear)."""
    return np.stack([load_bam_pixels(path, size) for path in paths])


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
    early at that wall-clock budget.
    """
    root = os.path.join(data_dir, dataset_name)
    train = dataset.train_listing(root)
    val = dataset.val_listing(root)
    if input_size is None:
        input_size = load_bam_pixels(train[0][0]).shape[0]
    space = INPUT_SPACES["caffe_rgb"]
    started = time.time()
    train_x = load_split([path for path, _ in train], input_size)
    val_x = load_split([path for path, _ in val], input_size)
    decode_seconds = time.time() - started
    train_y = np.array([label for _, label in train], np.int64)
    val_y = np.array([label for _, label in val], np.int64)
    num_classes = int(train_y.max()) + 1

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
