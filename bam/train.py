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
from __future__ import annotations

import dataclasses
import os
import shutil
import time
from typing import TYPE_CHECKING, Any, Callable, Optional, Sequence

import numpy as np
from numpy.typing import ArrayLike

import models
from models.foundation import provenance
from models.foundation.cli import option, run_binary
from models.foundation.errors import UserError, check_one_of, required
from models.foundation.files import ensure_directory, read_json, write_json
from models.foundation.lazy import lazy_module
from models.training import distribution, recipes
from models.training.recipes import RunOptions, TrainingFlags

# Loaded on first use: --help and a bad flag are answered before TensorFlow starts
# (docs/architecture.md, "Light imports").
if TYPE_CHECKING:  # the type checker's view of the same modules
    import keras
    import tensorflow as tf

    from models.formats import preprocessing
    from models.training import loop
    from saliency_gen.data.world import dataset
else:
    keras = lazy_module("keras")
    tf = lazy_module("tensorflow")
    preprocessing = lazy_module("models.formats.preprocessing")
    loop = lazy_module("models.training.loop")
    dataset = lazy_module("saliency_gen.data.world.dataset")


@dataclasses.dataclass(frozen=True)
class BamRecipe:
    """How BAM trains (docs/bam.md, "Training"); the model and its initial weights are the
    run's (`RunOptions.model_name`, `model_options`)."""

    input_size: Optional[int] = None  # None: the images' own size
    epochs: int = 3
    batch_size: int = 64
    optimizer: str = "adam"
    learning_rate: float = 1e-3


@dataclasses.dataclass(frozen=True)
class Preset:
    """A preset: the model, its initial weights ("imagenet", a Keras weights file, or None)
    and the recipe."""

    model: str = "small_cnn"
    weights: Optional[str] = None
    recipe: BamRecipe = BamRecipe()


PRESETS = {
    "synthetic": Preset(),
    "real": Preset(model="keras_resnet50", weights="imagenet",
                   recipe=BamRecipe(input_size=224, epochs=5, learning_rate=1e-4)),
}
MEMORY_LIMIT_BYTES = 2 << 30  # decoded training pixels above this stream from disk
PIPELINES = ("auto", "memory", "stream")


def detect_preset(data_dir: str) -> str:
    """"synthetic" for a `bam.synthetic` world (it has world.json), else "real"."""
    return "synthetic" if os.path.isfile(os.path.join(data_dir, "world.json")) else "real"


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
        return preprocessing.load_bam_pixels(path.decode("utf-8"), input_size)

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


def _claim_backup(backup_dir, config, overwrite=False):
    """Records `config` in `backup_dir`; a backup made with another config stops the run with
    one line naming the differing setting (docs/bam.md, "Outputs"), unless `overwrite`
    discards it."""
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


def epoch_stream(data: tf.data.Dataset, num_images: int, *, first_epoch: int, epochs: int,
                 batch_size: int, seed: int, input_size: int, pipeline: str,
                 space: preprocessing.InputSpace, whole_batches: bool = False) -> tf.data.Dataset:
    """Training batches of epochs `first_epoch`..`epochs - 1`, each a fresh shuffle of `data`
    with random flips, ending in a partial batch (dropped when `whole_batches`).

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
                .batch(batch_size, drop_remainder=whole_batches))

    stream = one_epoch(first_epoch)
    for epoch in range(first_epoch + 1, epochs):
        stream = stream.concatenate(one_epoch(epoch))
    return stream.prefetch(tf.data.AUTOTUNE)


def train_classifier(data_dir: str, dataset_name: str,
                     run: RunOptions = RunOptions(recipe=BamRecipe()), *,
                     max_seconds: Optional[float] = None, pipeline: str = "auto",
                     backup_dir: Optional[str] = None,
                     callbacks: Sequence = ()) -> tuple[Any, dict]:
    """Trains `run.model_name` on `<data_dir>/<dataset_name>` with the BAM `run.recipe`;
    returns (model, report dict). The classes are the data's (`run.num_classes` is not used).

    The recipe's `input_size` defaults to the images' own size. `run.model_options` go to
    `models.build` (e.g. `weights="imagenet"` or a weights-file path for keras_resnet50). The
    report holds the validation accuracy, the numbers of images, the pipeline, the training
    seconds (of every attempt) and the resumptions. `max_seconds` stops training early at that
    wall-clock budget (which makes the epoch count machine-dependent). Training runs in the
    project's one loop (`models.training.loop.fit`: `run.strategy`, `run.precision`, seeding
    and op determinism) and is deterministic: the seed fixes initialisation, order and flips.
    With `backup_dir` a killed run resumes from its last finished epoch and ends with the
    weights an uninterrupted run gives; a backup made with other arguments stops with one line
    unless `run.overwrite`. Under several replicas each epoch ends with its last whole batch.
    `run.stop_after_epochs` ends the call after that many epochs with (None,
    {"stopped_after_epoch": n}).
    """
    recipe = recipes.own_recipe(run, BamRecipe)
    root = os.path.join(data_dir, dataset_name)
    train, val = _listings(root)
    input_size = recipe.input_size or preprocessing.load_bam_pixels(train[0][0]).shape[0]
    chosen = choose_pipeline(pipeline, len(train), input_size)
    space = preprocessing.INPUT_SPACES["caffe_rgb"]
    train_y = np.array([label for _, label in train], np.int64)
    val_y = np.array([label for _, label in val], np.int64)
    num_classes = int(train_y.max()) + 1
    started = time.time()
    train_data = labelled_images([p for p, _ in train], train_y, input_size, chosen)
    val_data = labelled_images([p for p, _ in val], val_y, input_size, chosen)
    decode_seconds = time.time() - started
    model_options = dict(run.model_options or {})
    config = _run_record(dataset_name, run, input_size, max_seconds, model_options)
    if backup_dir is not None:
        _claim_backup(backup_dir, config, run.overwrite)

    def build():
        model = loop.build_model(run.model_name, num_classes, input_size, None, run.precision,
                                 model_options)
        model.compile(loop.make_optimizer(recipe.optimizer, recipe.learning_rate),
                      keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                      metrics=["accuracy"])
        return model

    val_inputs = finish(val_data, input_size, chosen).map(
        lambda x, y: space.from_uint8(x)).batch(256)
    whole = _whole_batches(run, len(train_y), root)

    def stream_from(first_epoch):
        return epoch_stream(train_data, len(train_y), first_epoch=first_epoch,
                            epochs=recipe.epochs, batch_size=recipe.batch_size, seed=run.seed,
                            input_size=input_size, pipeline=chosen, space=space,
                            whole_batches=whole)

    def first_batch():
        images = next(iter(val_inputs))
        return images, val_y[:len(images)]

    try:
        fitted = loop.fit(loop.FitPlan(
            build, stream_from, epochs=recipe.epochs,
            steps_per_epoch=(len(train_y) // recipe.batch_size if whole
                             else -(-len(train_y) // recipe.batch_size)),
            backup=backup_dir, keep_backup=True, first_batch=first_batch,
            callbacks=[loop.TimeLimit(max_seconds), *callbacks],
            after=lambda model: model.predict(val_inputs, verbose=0)), run)
    except loop.DataError as error:  # e.g. an unreadable image met while streaming
        raise UserError(f"training on {root} failed: {error}") from None
    except loop.Stopped as stop:  # --stop_after_epochs: the backup is kept
        return None, {"stopped_after_epoch": stop.epochs}
    accuracy = float(np.mean(np.argmax(fitted.after, axis=1) == val_y))
    model = fitted.model if run.precision == "float32" else loop.float32_twin(
        fitted.model, run.model_name, num_classes, input_size, None, model_options)
    return model, _report(config, accuracy, len(train_y), len(val_y), fitted, decode_seconds,
                          chosen)


def _whole_batches(run: RunOptions, num_train: int, root: str) -> bool:
    """Whether training runs on several replicas, which split whole batches only
    (models.training.distribution); then at least one batch of images is needed."""
    whole = distribution.start(run.strategy, run.cpu_replicas).num_replicas_in_sync > 1
    if whole and num_train < run.recipe.batch_size:
        raise UserError(f"{root} has {num_train} training images, fewer than one batch of "
                        f"{run.recipe.batch_size}; lower --batch_size")
    return whole


def _listings(root: str) -> tuple:
    """(train, validation) listings of [(path, label)] of the data set in `root`, both
    non-empty (else one line)."""
    train, val = dataset.train_listing(root), dataset.val_listing(root)
    if not train or not val:
        raise UserError(f"{root} has {len(train)} training and {len(val)} validation images; "
                        "both must be non-empty")
    return train, val


def _run_record(dataset_name: str, run: RunOptions, input_size: int,
                max_seconds: Optional[float], model_options: dict) -> dict:
    """Every argument of a training that changes its weights: its backup's origin, and the
    first part of its report."""
    recipe = recipes.own_recipe(run, BamRecipe)
    return {"dataset": dataset_name, "model": run.model_name, "input_size": input_size,
            "epochs": recipe.epochs, "batch_size": recipe.batch_size,
            "learning_rate": recipe.learning_rate, "optimizer": recipe.optimizer,
            "seed": run.seed, "max_seconds": max_seconds,
            "model_options": {k: str(v) for k, v in sorted(model_options.items())},
            "strategy": run.strategy, "cpu_replicas": run.cpu_replicas,
            "precision": run.precision}


def _report(config: dict, accuracy: float, num_train: int, num_val: int, fitted: Any,
            decode_seconds: float, pipeline: str) -> dict:
    """The training's report: its arguments (`config`), the validation accuracy and the
    numbers of images, and what the loop's fit did (epochs, resumptions, seconds, losses)."""
    return dict(
        config, val_accuracy=accuracy, num_train=num_train, num_val=num_val,
        epochs_run=fitted.first_epoch + len(fitted.losses),
        resumed_from_epoch=fitted.first_epoch, resumptions=len(fitted.resumed_at_epochs),
        resumed_at_epochs=fitted.resumed_at_epochs, train_seconds=fitted.seconds,
        decode_seconds=decode_seconds, pipeline=pipeline, loss_per_epoch=fitted.losses,
        replicas=fitted.replicas)


_MEASURED = ("val_accuracy", "num_train", "num_val", "epochs_run", "resumed_from_epoch",
             "resumptions", "resumed_at_epochs", "train_seconds", "decode_seconds",
             "pipeline", "loss_per_epoch", "replicas")  # results, not settings


def train_and_export(data_dir: str, dataset_name: str, model_dir: str,
                     run: RunOptions = RunOptions(recipe=BamRecipe()), *,
                     settings: Optional[dict] = None, max_seconds: Optional[float] = None,
                     pipeline: str = "auto", callbacks: Sequence = ()) -> dict:
    """Trains on `<data_dir>/<dataset_name>` as `train_classifier` does, exports
    `<model_dir>/<dataset_name>` (SavedModel) and writes the report beside it as
    `<model_dir>/<dataset_name>.json`; returns the report ({"stopped_after_epoch": n} when
    `run.stop_after_epochs` ended it). The export's origin holds the training settings, plus
    `settings` (e.g. the preset).

    Until the export, an epoch backup lives in `<model_dir>/<dataset_name>.backup` so that a
    killed run resumes there.
    """
    backup_dir = os.path.join(model_dir, f"{dataset_name}.backup")
    model, report = train_classifier(data_dir, dataset_name, run, max_seconds=max_seconds,
                                     pipeline=pipeline, backup_dir=backup_dir,
                                     callbacks=callbacks)
    if model is None:  # stopped by run.stop_after_epochs, to be resumed
        return report
    path = os.path.join(model_dir, dataset_name)
    info = models.export(model, path, preprocessing="caffe_rgb", overwrite=True,
                         extra=dict(report, origin=provenance.origin(
                             {**{k: report[k] for k in sorted(report) if k not in _MEASURED},
                              **(settings or {})}, data_dir=os.path.abspath(data_dir))))
    report = dict(report, model_path=path, model_id=info["model_id"])
    write_json(os.path.join(model_dir, f"{dataset_name}.json"), report, indent=2, sort_keys=True)
    shutil.rmtree(backup_dir, ignore_errors=True)
    return report


def evaluate_export(checkpoint: str, data_dir: str, dataset_name: str,
                    pipeline: str = "auto") -> dict:
    """The validation accuracy of the exported model `checkpoint` on
    `<data_dir>/<dataset_name>/val` (BAM geometry, the model's input space and size), without
    training: what `--mode=eval` prints."""
    loaded = models.load(checkpoint)
    root = os.path.join(data_dir, dataset_name)
    val = dataset.val_listing(root)
    if not val:
        raise UserError(f"{root} has no validation images")
    labels = np.array([label for _, label in val], np.int64)
    if int(labels.max()) >= loaded.num_classes:
        raise UserError(f"--checkpoint {checkpoint} has {loaded.num_classes} classes; "
                        f"{root} has labels up to {int(labels.max())}")
    size = int(loaded.input_shape[0])
    chosen = choose_pipeline(pipeline, len(val), size)
    space = preprocessing.INPUT_SPACES[loaded.preprocessing]
    inputs = finish(labelled_images([p for p, _ in val], labels, size, chosen), size,
                    chosen).map(lambda x, y: (space.from_uint8(x), y)).batch(256)
    accuracy, _, count = loop.top_k_accuracy(loaded, inputs)
    return {"val_accuracy": accuracy, "num_val": count,
            "dataset": dataset_name, "checkpoint": os.path.abspath(checkpoint),
            "model_id": loaded.model_id}


@dataclasses.dataclass(frozen=True)
class Config(TrainingFlags):
    """bam.train's options (one flag each; the training flags shared with the other trainers
    first); unset recipe options come from the preset."""

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
        recipes.OPTIMIZERS)
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



def preset_with(values: dict, preset: str) -> Preset:
    """The preset `preset` with the option `values` that are set (None = unset) applied:
    `model` and `weights` to the preset, the others to its recipe; `weights` "none" means
    none. Weights apply to keras_resnet50 and vgg16 only, and name "imagenet" or a file."""
    chosen = PRESETS[preset]
    recipe = recipes.with_overrides(chosen.recipe, **{key: value for key, value in values.items()
                                                      if key not in ("model", "weights")})
    model = values.get("model") or chosen.model
    weights = chosen.weights if values.get("weights") is None else values["weights"]
    if weights is not None and weights.lower() == "none":
        weights = None
    if weights is not None:
        if model not in ("keras_resnet50", "vgg16"):
            raise UserError(f"--weights applies to keras_resnet50 and vgg16, not {model}")
        if weights != "imagenet" and not os.path.isfile(weights):
            raise UserError(f"--weights={weights} is neither 'imagenet' nor an existing file")
    return Preset(model, weights, recipe)


def run(config: Config) -> dict:
    """Trains and exports one BAM model with `config`; returns the training report. With
    --mode=eval, evaluates the export --checkpoint on the dataset's validation images instead
    (`evaluate_export`)."""
    f = config
    if f.mode == "eval" and f.checkpoint:  # (TrainingFlags: eval needs a checkpoint)
        result = evaluate_export(f.checkpoint, required(f, "data_dir")[0], f.dataset,
                                 f.pipeline)
        print(f"{f.dataset}: val accuracy {result['val_accuracy']:.4f} on {result['num_val']} "
              f"images ({f.checkpoint}, --mode=eval)")
        return result
    data_dir, model_dir = required(f, "data_dir", "model_dir")
    # A multi-worker strategy (and logical CPUs) must exist before TensorFlow runs anything.
    distribution.start(f.strategy, f.cpu_replicas)
    preset = detect_preset(data_dir) if f.preset == "auto" else f.preset
    chosen = preset_with(
        {name: getattr(f, name) for name in ("model", "weights", "input_size", "epochs",
                                             "batch_size", "optimizer", "learning_rate")},
        preset)
    shown = {"model": chosen.model, **({"weights": chosen.weights} if chosen.weights else {}),
             **dataclasses.asdict(chosen.recipe)}
    print(f"training {f.dataset} with the {preset} preset: "
          + ", ".join(f"{key}={value}" for key, value in sorted(shown.items())))
    options = f.run_options(model_name=chosen.model, recipe=chosen.recipe, seed=f.seed,
                            model_options={"weights": chosen.weights} if chosen.weights else None,
                            overwrite=f.overwrite, verbose=1)
    report = train_and_export(data_dir, f.dataset, model_dir, options,
                              settings={"preset": preset}, max_seconds=f.max_seconds,
                              pipeline=f.pipeline)
    if "stopped_after_epoch" in report:
        print(loop.stopped_message(report["stopped_after_epoch"]))
        return report
    print(f"{f.dataset}: val accuracy {report['val_accuracy']:.4f} on {report['num_val']} images "
          f"after {report['epochs_run']} epochs ({report['train_seconds']:.0f} s, "
          f"{report['pipeline']} pipeline); exported to {report['model_path']}")
    return report


if __name__ == "__main__":
    run_binary(Config, run)
