"""The IDSDS fine-tuning itself (docs/faithfulness.md, "Fine-tuning"): the recipe, the model
with PyTorch-style coupled weight decay, the augmented and cell-deleted training stream, the
best-epoch keeper and `finetune`, which `python -m faithfulness.finetune` runs."""
import dataclasses
import json
import math
import os
import shutil
from typing import Any, Optional, Sequence

import keras
import tensorflow as tf

import models
from faithfulness import idsds
from models.architectures import zoo
from models.formats import preprocessing
from models.foundation import provenance
from models.foundation.errors import UserError
from models.foundation.files import atomic_output, exclusive, write_json
from models.training import loop, recipes
from models.training.recipes import RunOptions
from saliency_gen.data import pipelines, records


@dataclasses.dataclass(frozen=True)
class FinetuneRecipe:
    """The IDSDS fine-tuning recipe (defaults: the released checkpoints' settings)."""

    epochs: int = 30
    batch_size: int = 256
    learning_rate: float = 0.001
    momentum: float = 0.9
    weight_decay: float = 1e-4
    decay_every: int = 10
    grid: int = 4
    baseline: str = "zeros"
    p_delete: float = 0.5
    min_crop_area: float = 0.08  # RandomResizedCrop's scale=(0.08, 1)


# Small images whose object can fill a fraction of the frame: milder crops, a short schedule.
PRESETS = {"synthetic": FinetuneRecipe(epochs=3, batch_size=64, decay_every=2,
                                       min_crop_area=0.25),
           "real": FinetuneRecipe()}


class CoupledDecayModel(keras.Model):
    """A functional model whose loss adds 0.5 * wd * sum ||w||^2 over every trainable weight,
    i.e. PyTorch's SGD weight decay (added to the gradient before momentum)."""

    def __init__(self, *args: Any, weight_decay: float = 0.0, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.weight_decay = weight_decay

    def compute_loss(self, x: Any = None, y: Any = None, y_pred: Any = None,
                     sample_weight: Any = None, training: bool = True) -> Any:
        loss = super().compute_loss(x=x, y=y, y_pred=y_pred, sample_weight=sample_weight,
                                    training=training)
        if not self.weight_decay:
            return loss
        penalty = tf.add_n([tf.reduce_sum(tf.square(tf.cast(w, tf.float32)))
                            for w in self.trainable_weights])
        return loss + 0.5 * self.weight_decay * penalty


class BestWeights(keras.callbacks.Callback):
    """Keeps the weights of the epoch with the best clean validation top-1 in `weights_path`,
    and every epoch's accuracy in `log_path`, so that a resumed run still knows the best."""

    def __init__(self, weights_path: str, log_path: str):
        super().__init__()
        self.weights_path, self.log_path = weights_path, log_path

    def accuracies(self) -> dict:
        if not os.path.isfile(self.log_path):
            return {}
        with open(self.log_path, encoding="utf-8") as handle:
            return {int(epoch): value for epoch, value in json.load(handle).items()}

    def on_epoch_end(self, epoch: int, logs: Optional[dict] = None) -> None:
        history = self.accuracies()
        accuracy = float((logs or {})["val_top1"])
        if not history or accuracy > max(history.values()):
            with atomic_output(self.weights_path) as temporary:
                self.model.save_weights(temporary + ".weights.h5")
                os.replace(temporary + ".weights.h5", temporary)
        history[epoch] = accuracy
        write_json(self.log_path, history)


def random_resized_crop(image: tf.Tensor, size: int, key: tf.Tensor,
                        area: tuple[float, float] = (0.08, 1.0),
                        ratio: tuple[float, float] = (3 / 4, 4 / 3)) -> tf.Tensor:
    """torchvision's RandomResizedCrop(size) as a stateless op: a box of 8-100% of the area and
    aspect 3/4-4/3, resized (bilinear) to size x size."""
    begin, extent, _ = tf.image.stateless_sample_distorted_bounding_box(
        tf.shape(image), tf.zeros([1, 0, 4]), key, area_range=area, aspect_ratio_range=ratio,
        max_attempts=10, use_image_if_no_bounding_boxes=True)
    crop = tf.slice(image, begin, extent)
    return tf.image.resize(crop, (size, size), method="bilinear")


def training_dataset(files: Sequence[str], size: int, space: preprocessing.InputSpace,
                     recipe: "FinetuneRecipe", seed: int, num_train: int,
                     first_epoch: int = 0) -> tf.data.Dataset:
    """Batches of (augmented, cell-deleted, normalised image, label), repeated forever, from
    training epoch `first_epoch` on; the draws of example k of pass e are keyed on (seed, e, k),
    so a resumed run reads exactly what an uninterrupted one reads from that epoch."""
    def augment(index, item):
        key, serialized = item
        parsed = records.parse_image_record(serialized)
        image = preprocessing.decode_image(parsed["encoded"])
        # (epoch, example) id: the epoch in the high bits, a hash of the record key below
        draw_id = (index // num_train) * (1 << 32) + tf.strings.to_hash_bucket_fast(key, 1 << 32)
        draw_key = tf.stack([tf.constant(int(seed), tf.int64), draw_id])
        image = random_resized_crop(image, size, draw_key, area=(recipe.min_crop_area, 1.0))
        flip = tf.random.stateless_uniform([], draw_key + 1) < 0.5
        image = tf.where(flip, tf.reverse(image, [1]), image)
        return (space.from_pixels(tf.ensure_shape(image, (size, size, 3))), parsed["label"],
                draw_id)

    def delete_cells(images, labels, draw_ids):
        deleted = idsds.random_cell_deletion(images, grid=recipe.grid, baseline=recipe.baseline,
                                             p_delete=recipe.p_delete, seed=seed, ids=draw_ids)
        return deleted, labels

    dataset = records.keyed_records(files).shuffle(min(num_train, 10_000), seed=int(seed),
                                                   reshuffle_each_iteration=True).repeat()
    # Skipping serialized records before decoding makes a resume cheap.
    skipped = first_epoch * (num_train // recipe.batch_size) * recipe.batch_size
    return (dataset.enumerate().skip(skipped).map(augment, num_parallel_calls=tf.data.AUTOTUNE,
                                    deterministic=True)
            .batch(recipe.batch_size, drop_remainder=True).map(delete_cells)
            .prefetch(tf.data.AUTOTUNE))


def evaluation_dataset(files: Sequence[str], size: int, space: preprocessing.InputSpace,
                       batch_size: int = 128) -> tf.data.Dataset:
    """Batches of (centre-cropped normalised image, label), every record once, in order (the
    generator's image pipeline)."""
    return (pipelines.explanation_inputs(files, (size, size, 3), space, "auto")
            .map(lambda key, encoded, label, image, height, width: (image, label))
            .batch(batch_size).prefetch(tf.data.AUTOTUNE))


def initial_model(init_model: Optional[str] = None, model_name: Optional[str] = None,
                  num_classes: Optional[int] = None, size: Optional[int] = None,
                  weights: Optional[str] = None) -> tuple[keras.Model, str]:
    """(Keras model, input space name): an exported zoo model rebuilt, or a zoo architecture."""
    if init_model:
        return models.rebuild(init_model), models.read_info(init_model)["preprocessing"]
    if not (model_name and num_classes and size):
        raise UserError("pass --init_model, or --model with --num_classes and --image_size")
    options = {"weights": weights} if weights else {}
    model = models.build(model_name, num_classes, (size, size, 3), **options)
    return model, models.spec(model_name).preprocessing


def finetune(train_files: Sequence[str], eval_files: Sequence[str], output_dir: str,
             run: RunOptions = RunOptions(recipe=FinetuneRecipe(), verbose=1), *,
             init_model: Optional[str] = None, size: Optional[int] = None,
             weights: Optional[str] = None, callbacks: Sequence = ()) -> dict:
    """Fine-tunes, keeps the best clean validation top-1, exports; returns the metrics.

    Starts from the export `init_model`, or else from the zoo architecture `run.model_name`
    with `run.num_classes`, input side `size` and `weights`; trains with `run.recipe` (a
    `FinetuneRecipe`) in the project's one loop (`models.training.loop.fit`: `run.strategy`,
    `run.precision`, `run.seed`, `run.stop_after_epochs`). Like ROAR's runs
    (docs/architecture.md, "Outputs and provenance"): `<output_dir>/origin.json` records what
    makes the run; a finished run of the same origin is reused, another origin stops with one
    line unless `run.overwrite`, and a killed run resumes to the uninterrupted result.
    """
    recipe = recipes.own_recipe(run, FinetuneRecipe)
    if init_model:
        info = models.read_info(init_model)
        size, classes = int(info["input_shape"][0]), int(info["num_classes"])
        start, space_name = {"init_model_id": info["model_id"]}, info["preprocessing"]
    elif run.model_name and size:
        classes, space_name = run.num_classes, models.spec(run.model_name).preprocessing
        start = {"model": run.model_name, "weights": weights, "num_classes": classes,
                 "size": size}
    else:
        raise UserError("pass --init_model, or --model with --num_classes and --image_size")
    num_train, num_eval = pipelines.count_records(train_files), pipelines.count_records(eval_files)
    if num_train < recipe.batch_size:
        raise UserError(f"{num_train} training images are fewer than one batch of "
                        f"{recipe.batch_size}; lower --batch_size")
    requested = provenance.origin(
        {**dataclasses.asdict(recipe), "seed": run.seed, "strategy": run.strategy,
         "cpu_replicas": run.cpu_replicas, "precision": run.precision, **start},
        train_data=provenance.listing_digest(train_files),
        eval_data=provenance.listing_digest(eval_files))
    with exclusive(output_dir, "run folder"):
        finished = loop.prepare_run_folder(output_dir, requested, run.overwrite)
        if finished is not None:
            return finished
        try:
            return _finetune(train_files, eval_files, output_dir, requested, run, size=size,
                             space_name=space_name, init_model=init_model, weights=weights,
                             callbacks=callbacks, num_train=num_train, num_eval=num_eval)
        except loop.Stopped as stop:  # the backup is kept: a re-run resumes
            return {"stopped_after_epoch": stop.epochs}


def _finetune(train_files, eval_files, output_dir, requested, run: RunOptions, *, size,
              space_name, init_model, weights, callbacks, num_train, num_eval):
    recipe = recipes.own_recipe(run, FinetuneRecipe)
    made: dict = {}

    def initial():
        return initial_model(init_model, run.model_name, run.num_classes, size, weights)[0]

    def build():
        base = made["base"] = zoo.in_precision(initial, run.precision)
        model = CoupledDecayModel(base.inputs, base.outputs, name=base.name,
                                  weight_decay=recipe.weight_decay)
        decays = math.ceil(recipe.epochs / recipe.decay_every)  # learning rates used
        schedule = recipe.learning_rate if decays <= 1 else (  # (Keras wants >= 1 boundary)
            keras.optimizers.schedules.PiecewiseConstantDecay(
                [steps * recipe.decay_every * k for k in range(1, decays)],
                [recipe.learning_rate * 0.1 ** k for k in range(decays)]))
        model.compile(keras.optimizers.SGD(schedule, momentum=recipe.momentum),
                      keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                      metrics=[keras.metrics.SparseCategoricalAccuracy(name="top1")])
        return model

    steps = num_train // recipe.batch_size
    space = preprocessing.input_space(space_name)
    keeper = BestWeights(os.path.join(output_dir, "best.weights.h5"),
                         os.path.join(output_dir, "epochs.json"))
    clean_eval = evaluation_dataset(eval_files, size, space)
    before = []

    def after(model):
        model.load_weights(keeper.weights_path)  # the base shares these weights
        exported = made["base"]
        if run.precision != "float32":  # explanations and evaluations run in float32
            exported = initial()
            exported.set_weights(made["base"].get_weights())
        return models.export(exported, os.path.join(output_dir, "model"),
                             preprocessing=space_name, overwrite=True,
                             extra={"origin": requested})

    backup = os.path.join(output_dir, "backup")
    fitted = loop.fit(loop.FitPlan(
        build, lambda first: training_dataset(train_files, size, space, recipe, run.seed,
                                              num_train, first),
        steps_per_epoch=steps, epochs=recipe.epochs, backup=backup,
        first_batch=clean_eval.take(1).get_single_element,
        logs=os.path.join(output_dir, "logs"), callbacks=[keeper, *callbacks],
        validation_data=clean_eval,
        before=lambda model: before.append(
            model.evaluate(clean_eval, verbose=0, return_dict=True)["top1"]),
        after=after), run)
    info, base = fitted.after, made["base"]
    accuracies = [value for _, value in sorted(keeper.accuracies().items())]
    result = {"best_val_top1": max(accuracies),
              "initial_val_top1": float(before[0]), "val_top1_per_epoch": accuracies,
              "n_train": num_train, "n_eval": num_eval, "classes": int(base.outputs[0].shape[-1]),
              "seconds": fitted.seconds, "resumptions": len(fitted.resumed_at_epochs),
              "resumed_at_epochs": fitted.resumed_at_epochs, "model_id": info["model_id"],
              "init_model": init_model, "model": base.name, "seed": run.seed,
              "recipe": dataclasses.asdict(recipe), "precision": run.precision,
              "replicas": fitted.replicas, "origin": requested}
    result = provenance.canonical(result)  # as metrics.json will give it back when reused
    write_json(os.path.join(output_dir, "metrics.json"), result, indent=2, sort_keys=True)
    shutil.rmtree(backup, ignore_errors=True)
    for finished in (keeper.weights_path, keeper.log_path):  # only the export is kept
        os.remove(finished)
    return result


def evaluate_export(checkpoint: str, eval_files: Sequence[str]) -> dict:
    """The clean top-1 of the exported model `checkpoint` on `eval_files` (every record once,
    centre-cropped to its input size in its input space), without training: what
    `--mode=eval` prints."""
    loaded = models.load(checkpoint)
    top1, _, count = loop.top_k_accuracy(
        loaded, evaluation_dataset(eval_files, int(loaded.input_shape[0]),
                                   preprocessing.input_space(loaded.preprocessing)))
    return {"top1": top1, "n_eval": count,
            "checkpoint": os.path.abspath(checkpoint), "model_id": loaded.model_id}
