"""Training BAM classifiers on a dataset in BAM's layout (obj, scene, scene_only, sceneK, ...).

    python -m bam.train --dataset=obj --data_dir=data --model_dir=models

`train_classifier` reads `<data_dir>/<dataset>/train/<class>/*` and `val/` + `val.txt`, applies
BAM preprocessing (PIL bilinear resize to the model input, mean-subtracted RGB), trains a model
from `models` with random flips, and reports validation accuracy. Two presets pick the defaults:

* `synthetic` (a `bam.synthetic` world): small_cnn at the images' size, Adam 1e-3, 3 epochs;
* `real` (anything else, e.g. the MSCOCO + MiniPlaces build): ImageNet ResNet-50
  (`keras_resnet50`, weights "imagenet" or a local weights file) fine-tuned at 224 x 224 with
  Adam 1e-4 for 5 epochs. The original's hyper-parameters were never published; this recipe is
  ours.

Small sets are decoded once into memory; large ones (more than 2 GiB of decoded pixels, e.g.
90,000 images at 224 px) stream from disk through tf.data with the same decoding, so both
pipelines feed the same batches. Training is deterministic for a seed, and a killed run resumes
at its last finished epoch with the result of an uninterrupted one (`train_and_export` keeps a
backup beside the model until it is exported).
"""
import dataclasses
import os
import shutil
import time
from typing import Any, Callable, Optional, Sequence

import keras
import numpy as np
import tensorflow as tf
from numpy.typing import ArrayLike

import models
from models.formats.preprocessing import INPUT_SPACES, InputSpace, load_bam_pixels
from models.foundation import provenance
from models.foundation.cli import option, run_binary
from models.foundation.errors import UserError, check_one_of, required
from models.foundation.files import ensure_directory, read_json, write_json
from models.training import loop, recipes
from saliency_gen.world import dataset


@dataclasses.dataclass(frozen=True)
class Recipe:
    """What BAM trains and how (docs/bam.md, "Training")."""

    model: str = "small_cnn"
    weights: Optional[str] = None  # "imagenet", a Keras weights file, or None
    input_size: Optional[int] = None  # None: the images' own size
    epochs: int = 3
    batch_size: int = 64
    optimizer: str = "adam"
    learning_rate: float = 1e-3


PRESETS = {
    "synthetic": Recipe(),
    "real": Recipe(model="keras_resnet50", weights="imagenet", input_size=224, epochs=5,
                   learning_rate=1e-4),
}
MEMORY_LIMIT_BYTES = 2 << 30  # decoded training pixels above this stream from disk
PIPELINES = ("auto", "memory", "stream")
OPTIMIZERS = ("adam", "sgd")


def detect_preset(data_dir: str) -> str:
    """"synthetic" for a `bam.synthetic` world (it has world.json), else "real"."""
    return "synthetic" if os.path.isfile(os.path.join(data_dir, "world.json")) else "real"


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


def _optimizer(name, learning_rate):
    if name == "adam":
        return keras.optimizers.Adam(learning_rate)
    if name == "sgd":
        return keras.optimizers.SGD(learning_rate, momentum=0.9, nesterov=True)
    check_one_of("optimizer", name, OPTIMIZERS)


def choose_pipeline(pipeline: str, num_images: int, input_size: int) -> str:
    """"memory" or "stream": `auto` streams when the decoded images exceed MEMORY_LIMIT_BYTES."""
    check_one_of("pipeline", pipeline, PIPELINES)
    if pipeline == "auto":
        fits = num_images * input_size * input_size * 3 <= MEMORY_LIMIT_BYTES
        return "memory" if fits else "stream"
    return pipeline


def decoder(input_size: int) -> Callable:
    """A tf function: image path -> uint8 [size, size, 3] with BAM geometry (PIL, as eval)."""

    def load(path):
        return load_bam_pixels(path.decode("utf-8"), input_size)

    def decode(path):
        pixels = tf.numpy_function(load, [path], tf.uint8, stateful=False)
        return tf.ensure_shape(pixels, (input_size, input_size, 3))

    return decode


def labelled_images(paths: Sequence[str], labels: ArrayLike, input_size: int,
                    pipeline: str) -> tf.data.Dataset:
    """A tf.data dataset of (uint8 image, label) in order, with BAM geometry.

    "memory" decodes everything now and yields tensors; "stream" yields file names and decodes
    them in `finish`. Shuffling before `finish` moves file names, not pixels; both pipelines see
    the same images in the same order.
    """
    label_array = np.asarray(labels, np.int64)
    if pipeline == "memory":
        return tf.data.Dataset.from_tensor_slices(
            (dataset.load_pixels(paths, input_size), label_array))
    return tf.data.Dataset.from_tensor_slices((list(paths), labels))


def finish(images: tf.data.Dataset, input_size: int, pipeline: str) -> tf.data.Dataset:
    """Decodes streamed file names (a no-op for the memory pipeline)."""
    if pipeline == "memory":
        return images
    decode = decoder(input_size)
    return images.map(lambda path, label: (decode(path), label),
                      num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)


def _backup_callbacks(backup_dir, config, overwrite=False):
    """Keras' BackupAndRestore in `backup_dir` and the progress keeper; a backup made with
    another config stops the run with one line naming the differing setting (docs/bam.md,
    "Outputs"), unless `overwrite` discards it. Returns (callbacks, finished epochs, progress)."""
    if backup_dir is None:
        return [], 0, loop.Progress(None, loop.resume_state(None)[1])
    config_path = os.path.join(backup_dir, "config.json")
    if os.path.isdir(backup_dir):
        recorded = read_json(config_path, "backup config") if os.path.exists(config_path) else {}
        error = provenance.mismatch_error(f"training backup {backup_dir}",
                                          {"settings": recorded}, {"settings": config})
        if error is not None and not overwrite:
            raise error
        if error is not None:
            shutil.rmtree(backup_dir)
    ensure_directory(backup_dir)
    write_json(config_path, config, sort_keys=True)
    done_epochs, state = loop.resume_state(backup_dir)
    progress = loop.Progress(os.path.join(backup_dir, loop.PROGRESS), state)
    return ([keras.callbacks.BackupAndRestore(backup_dir, delete_checkpoint=False), progress],
            done_epochs, progress)


def epoch_stream(data: tf.data.Dataset, num_images: int, *, first_epoch: int, epochs: int,
                 batch_size: int, seed: int, input_size: int, pipeline: str,
                 space: InputSpace) -> tf.data.Dataset:
    """Training batches of epochs `first_epoch`..`epochs - 1`, each a fresh shuffle of `data`
    with random flips, ending in a partial batch.

    Epoch e's order and flips depend only on (seed, e), so a run resumed at epoch e sees exactly
    the batches an uninterrupted run sees from there (docs/bam.md, "Training").
    """
    def one_epoch(epoch):
        epoch_seed = seed * 1_000_003 + epoch
        shuffled = data.shuffle(num_images, seed=epoch_seed, reshuffle_each_iteration=False)

        def augment(index, item):
            image, label = item
            flipped = tf.image.stateless_random_flip_left_right(
                image, seed=tf.stack([tf.constant(epoch_seed, tf.int64), index]))
            return space.from_uint8(flipped), label

        return (finish(shuffled, input_size, pipeline).enumerate()
                .map(augment, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
                .batch(batch_size))

    stream = one_epoch(first_epoch)
    for epoch in range(first_epoch + 1, epochs):
        stream = stream.concatenate(one_epoch(epoch))
    return stream.prefetch(tf.data.AUTOTUNE)


def train_classifier(data_dir: str, dataset_name: str, model_name: str = "small_cnn",
                     input_size: Optional[int] = None, epochs: int = 10, batch_size: int = 64,
                     learning_rate: float = 1e-3, seed: int = 0,
                     max_seconds: Optional[float] = None, verbose: int = 0,
                     optimizer: str = "adam", pipeline: str = "auto",
                     backup_dir: Optional[str] = None, callbacks: Sequence = (),
                     overwrite: bool = False, **model_options: Any) -> tuple[Any, dict]:
    """Trains `model_name` on `<data_dir>/<dataset_name>`; returns (model, report dict).

    `input_size` defaults to the images' own size. `model_options` go to `models.build` (e.g.
    `weights="imagenet"` or a weights-file path for keras_resnet50). The report holds the
    validation accuracy, the numbers of images, the pipeline, the training seconds (of every
    attempt) and the resumptions. `max_seconds` stops training early at that wall-clock budget
    (which makes the epoch count machine-dependent). Training is deterministic: the seed fixes
    initialisation, order and flips, and TensorFlow's op determinism is enabled for the process.
    With `backup_dir` a killed run resumes from its last finished epoch and ends with the
    weights an uninterrupted run gives; a backup made with other arguments stops with one line
    unless `overwrite`.
    """
    root = os.path.join(data_dir, dataset_name)
    train = dataset.train_listing(root)
    val = dataset.val_listing(root)
    if not train or not val:
        raise UserError(f"{root} has {len(train)} training and {len(val)} validation images; "
                        "both must be non-empty")
    if input_size is None:
        input_size = load_bam_pixels(train[0][0]).shape[0]
    chosen = choose_pipeline(pipeline, len(train), input_size)
    space = INPUT_SPACES["caffe_rgb"]
    train_y = np.array([label for _, label in train], np.int64)
    val_y = np.array([label for _, label in val], np.int64)
    num_classes = int(train_y.max()) + 1
    started = time.time()
    train_data = labelled_images([p for p, _ in train], train_y, input_size, chosen)
    val_data = labelled_images([p for p, _ in val], val_y, input_size, chosen)
    decode_seconds = time.time() - started

    tf.config.experimental.enable_op_determinism()
    keras.utils.set_random_seed(seed)
    model = models.build(model_name, num_classes, (input_size, input_size, 3), **model_options)
    model.compile(_optimizer(optimizer, learning_rate),
                  keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])
    config = {"dataset": dataset_name, "model": model_name, "input_size": input_size,
              "epochs": epochs, "batch_size": batch_size, "learning_rate": learning_rate,
              "optimizer": optimizer, "seed": seed, "max_seconds": max_seconds,
              "model_options": {k: str(v) for k, v in sorted(model_options.items())}}
    backup, resumed_from, progress = _backup_callbacks(backup_dir, config, overwrite)
    stream = epoch_stream(train_data, len(train_y), first_epoch=resumed_from, epochs=epochs,
                          batch_size=batch_size, seed=seed, input_size=input_size,
                          pipeline=chosen, space=space)
    try:
        history = model.fit(stream, epochs=epochs, verbose=verbose, shuffle=False,
                            steps_per_epoch=-(-len(train_y) // batch_size),
                            callbacks=[_TimeLimit(max_seconds), *backup, *callbacks])
    except tf.errors.OpError as error:  # e.g. an unreadable image met while streaming
        raise UserError(f"training on {root} failed: {error.message.strip().splitlines()[-1]}") \
            from None
    train_seconds = progress.seconds()
    val_inputs = finish(val_data, input_size, chosen).map(
        lambda x, y: space.from_uint8(x)).batch(256)
    logits = model.predict(val_inputs, verbose=0)
    accuracy = float(np.mean(np.argmax(logits, axis=1) == val_y))
    return model, dict(
        config, val_accuracy=accuracy, num_train=len(train_y), num_val=len(val_y),
        epochs_run=resumed_from + len(history.history.get("loss", [])),
        resumed_from_epoch=resumed_from, resumptions=len(progress.state["resumed_at_epochs"]),
        resumed_at_epochs=progress.state["resumed_at_epochs"], train_seconds=train_seconds,
        decode_seconds=decode_seconds, pipeline=chosen)


_MEASURED = ("val_accuracy", "num_train", "num_val", "epochs_run", "resumed_from_epoch",
             "resumptions", "resumed_at_epochs", "train_seconds", "decode_seconds",
             "pipeline")  # results, not settings


def train_and_export(data_dir: str, dataset_name: str, model_dir: str,
                     settings: Optional[dict] = None, **options: Any) -> dict:
    """Trains on `<data_dir>/<dataset_name>`, exports `<model_dir>/<dataset_name>` (SavedModel)
    and writes the report beside it as `<model_dir>/<dataset_name>.json`; returns the report.
    The export's origin holds the training settings, plus `settings` (e.g. the preset).

    Until the export, an epoch backup lives in `<model_dir>/<dataset_name>.backup` so that a
    killed run resumes there.
    """
    backup_dir = os.path.join(model_dir, f"{dataset_name}.backup")
    model, report = train_classifier(data_dir, dataset_name, backup_dir=backup_dir, **options)
    path = os.path.join(model_dir, dataset_name)
    info = models.export(model, path, preprocessing="caffe_rgb", overwrite=True,
                         extra=dict(report, origin=provenance.origin(
                             {**{k: report[k] for k in sorted(report) if k not in _MEASURED},
                              **(settings or {})}, data_dir=os.path.abspath(data_dir))))
    report = dict(report, model_path=path, model_id=info["model_id"])
    write_json(os.path.join(model_dir, f"{dataset_name}.json"), report, indent=2, sort_keys=True)
    shutil.rmtree(backup_dir, ignore_errors=True)
    return report


@dataclasses.dataclass(frozen=True)
class Config:
    """bam.train's options (one flag each); unset recipe options come from the preset."""

    dataset: str = option(
        "obj",
        'Dataset folder to train on: obj, scene, scene_only, scene1..scene10.')
    data_dir: Optional[str] = option(None, 'BAM data root (holds obj/, scene/, ...).')
    model_dir: Optional[str] = option(None, 'Where to export the model (<model_dir>/<dataset>).',
                                      origin=False)
    preset: str = option(
        "auto",
        'Defaults for the flags below: synthetic (small_cnn) or real (ImageNet ResNet-50 '
        'fine-tuning at 224 px); auto picks synthetic for a synthetic world.',
        ("auto", *PRESETS))
    model: Optional[str] = option(None, 'Registered model (models.REGISTRY).')
    weights: Optional[str] = option(
        None,
        "Initial weights for keras_resnet50 / vgg16: 'imagenet' (downloaded by Keras), a "
        "local Keras weights file, or 'none'.", origin="model_options")
    input_size: Optional[int] = option(None, "Model input side (synthetic: the images' size).")
    epochs: Optional[int] = option(None, 'Training epochs.')
    batch_size: Optional[int] = option(None, 'Training batch size.')
    optimizer: Optional[str] = option(
        None,
        'adam, or sgd (Nesterov momentum 0.9).',
        OPTIMIZERS)
    learning_rate: Optional[float] = option(None, 'Learning rate.')
    pipeline: str = option(
        "auto",
        'memory: decode once into RAM; stream: decode in tf.data; auto: stream above 2 '
        'GiB of decoded pixels.',
        PIPELINES, origin=False)  # the same batches either way (tested)
    max_seconds: Optional[float] = option(None, 'Stop training after this wall-clock budget.')
    seed: int = option(0, 'Seed of initialisation and data order.')
    overwrite: bool = option(False, 'Discard a backup made with other settings instead of '
                             'stopping.', origin=False)



def resolved_options(values: dict, preset: str) -> dict:
    """Training keyword arguments from option `values` (None = unset) and a preset's recipe."""
    options = dataclasses.asdict(recipes.with_overrides(PRESETS[preset], **values))
    weights = options.pop("weights")
    model_options = {}
    if weights is not None and weights.lower() != "none":
        if options["model"] not in ("keras_resnet50", "vgg16"):
            raise UserError(f"--weights applies to keras_resnet50 and vgg16, not "
                            f"{options['model']}")
        if weights != "imagenet" and not os.path.isfile(weights):
            raise UserError(f"--weights={weights} is neither 'imagenet' nor an existing file")
        model_options["weights"] = weights
    options["model_name"] = options.pop("model")
    return dict(options, **model_options)


def run(config: Config) -> dict:
    """Trains and exports one BAM model with `config`; returns the training report."""
    f = config
    data_dir, model_dir = required(f, "data_dir", "model_dir")
    preset = detect_preset(data_dir) if f.preset == "auto" else f.preset
    options = resolved_options(
        {name: getattr(f, name) for name in ("model", "weights", "input_size", "epochs",
                                             "batch_size", "optimizer", "learning_rate")},
        preset)
    print(f"training {f.dataset} with the {preset} preset: "
          + ", ".join(f"{key}={value}" for key, value in sorted(options.items())))
    report = train_and_export(data_dir, f.dataset, model_dir, {"preset": preset}, seed=f.seed,
                              max_seconds=f.max_seconds, pipeline=f.pipeline, verbose=1,
                              overwrite=f.overwrite, **options)
    print(f"{f.dataset}: val accuracy {report['val_accuracy']:.4f} on {report['num_val']} images "
          f"after {report['epochs_run']} epochs ({report['train_seconds']:.0f} s, "
          f"{report['pipeline']} pipeline); exported to {report['model_path']}")
    return report


if __name__ == "__main__":
    run_binary(Config, run)
