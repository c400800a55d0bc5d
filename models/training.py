"""Training a zoo classifier from scratch with a recipe: the loop that ROAR / KAR retraining
and the synthetic world's clean model share, and the one recipe convention of the project
(docs/architecture.md, "Recipes and presets").

Recipes are frozen dataclasses; a binary keeps its presets in a dict `PRESETS = {"synthetic":
..., "real": ...}` and applies the flags the user set with `with_overrides`. `Recipe` here is
the ROAR recipe (label smoothing 0.1, Nesterov SGD with momentum 0.9, a learning rate scaled by
batch / 256 with a linear warm-up and step decays, weight decay where the model has it);
`train_and_evaluate` fits a registered model on batched (image, label) data under a
`tf.distribute` strategy, keeps an epoch backup so a killed run resumes, logs to TensorBoard,
evaluates on every test image and exports the model with `metrics.json` beside it.
"""
import dataclasses
import math
import os
import shutil
import time
from typing import Optional

import keras
import tensorflow as tf

from models.errors import UserError
from models.export import export
from models.files import write_json
from models.zoo import build

STRATEGIES = ("default", "mirrored", "multi_worker", "tpu")


@dataclasses.dataclass(frozen=True)
class Recipe:
    """The ROAR optimisation recipe; the defaults are the original's shape with a short
    schedule for small models."""

    epochs: float = 10.0
    batch_size: int = 64
    optimizer: str = "sgd"
    base_learning_rate: float = 0.1
    weight_decay: float = 1e-4
    label_smoothing: float = 0.1
    momentum: float = 0.9
    warmup_epochs: float = 5.0
    decay_epochs: tuple = (30.0, 60.0, 80.0)
    decay_multipliers: tuple = (0.1, 0.01, 0.001)


# Small models on the synthetic world (Adam, 4 epochs) and the paper's ImageNet schedule.
SYNTHETIC_RECIPE = Recipe(epochs=4.0, batch_size=64, optimizer="adam", base_learning_rate=0.004,
                          warmup_epochs=1.0, decay_epochs=(3.0,), decay_multipliers=(0.1,))
REAL_RECIPE = Recipe(epochs=90.0, batch_size=256, optimizer="sgd", base_learning_rate=0.1,
                     warmup_epochs=5.0, decay_epochs=(30.0, 60.0, 80.0),
                     decay_multipliers=(0.1, 0.01, 0.001))


def with_overrides(recipe, **overrides):
    """`recipe` with every override that is not None (a flag the user set) applied."""
    given = {key: value for key, value in overrides.items() if value is not None}
    fields = {field.name for field in dataclasses.fields(recipe)}
    unknown = sorted(set(given) - fields)
    if unknown:
        raise UserError(f"{type(recipe).__name__} has no setting {', '.join(unknown)}")
    return dataclasses.replace(recipe, **given)


@keras.saving.register_keras_serializable(package="models")
class WarmupStepSchedule(keras.optimizers.schedules.LearningRateSchedule):
    """base_lr * batch / 256, linear warm-up from 0 over `warmup_epochs`, then step decays."""

    def __init__(self, scaled_lr, steps_per_epoch, warmup_epochs, decay_epochs,
                 decay_multipliers):
        self.scaled_lr = float(scaled_lr)
        self.steps_per_epoch = float(steps_per_epoch)
        self.warmup_epochs = float(warmup_epochs)
        self.decay_epochs = tuple(float(e) for e in decay_epochs)
        self.decay_multipliers = tuple(float(m) for m in decay_multipliers)

    def __call__(self, step):
        epoch = tf.cast(step, tf.float32) / self.steps_per_epoch
        rate = self.scaled_lr * tf.minimum(1.0, epoch / max(self.warmup_epochs, 1e-9))
        for start, multiplier in zip(self.decay_epochs, self.decay_multipliers):
            rate = tf.where(epoch >= start, self.scaled_lr * multiplier, rate)
        return rate

    def get_config(self):
        return {"scaled_lr": self.scaled_lr, "steps_per_epoch": self.steps_per_epoch,
                "warmup_epochs": self.warmup_epochs, "decay_epochs": self.decay_epochs,
                "decay_multipliers": self.decay_multipliers}


def make_strategy(name: str):
    """The `tf.distribute` strategy called `name` (default: the current one)."""
    if name == "default":
        return tf.distribute.get_strategy()
    if name == "mirrored":
        return tf.distribute.MirroredStrategy()
    if name == "multi_worker":
        return tf.distribute.MultiWorkerMirroredStrategy()
    if name == "tpu":
        resolver = tf.distribute.cluster_resolver.TPUClusterResolver()
        tf.config.experimental_connect_to_cluster(resolver)
        tf.tpu.experimental.initialize_tpu_system(resolver)
        return tf.distribute.TPUStrategy(resolver)
    raise UserError(f"--strategy must be one of {', '.join(STRATEGIES)}; got {name!r}")


def make_optimizer(recipe: Recipe, schedule):
    """Nesterov SGD on the schedule (the recipe), or Adam on the same schedule (a faster
    choice for small models and short schedules)."""
    if recipe.optimizer == "sgd":
        return keras.optimizers.SGD(schedule, momentum=recipe.momentum, nesterov=True)
    if recipe.optimizer == "adam":
        return keras.optimizers.Adam(schedule)
    raise UserError(f"--optimizer must be sgd or adam; got {recipe.optimizer!r}")


def build_model(model_name: str, num_classes: int, size: int, recipe: Recipe):
    """A registered model with the recipe's weight decay where the builder takes one."""
    options = {}
    if model_name == "resnet50":
        options["weight_decay"] = recipe.weight_decay
    return build(model_name, num_classes, (size, size, 3), **options)


def _one_hot(num_classes):
    return lambda images, labels: (images, tf.one_hot(labels, num_classes))


def train_and_evaluate(train_data, eval_data, *, num_classes: int, num_train: int,
                       num_eval: int, size: int, output_dir: str, model_name: str = "small_cnn",
                       recipe: Recipe = Recipe(), strategy: str = "default", seed: int = 0,
                       verbose: int = 1, flags_record: Optional[dict] = None, callbacks=(),
                       preprocessing: str = "imagenet") -> dict:
    """Trains on `train_data`, evaluates on all of `eval_data`, exports; returns the metrics.

    `train_data` / `eval_data` are batched datasets of (normalised image, int label). Writes
    `<output_dir>/model` (SavedModel, `models.load`), `<output_dir>/metrics.json` and
    TensorBoard logs in `<output_dir>/logs`; `<output_dir>/backup` holds the last finished epoch
    until the run completes, so a re-run of a killed job resumes there.
    """
    keras.utils.set_random_seed(seed)
    tf.config.experimental.enable_op_determinism()
    steps_per_epoch = max(1, num_train // recipe.batch_size)
    epochs = max(1, int(math.ceil(recipe.epochs)))
    distribution = make_strategy(strategy)
    with distribution.scope():
        model = build_model(model_name, num_classes, size, recipe)
        schedule = WarmupStepSchedule(recipe.base_learning_rate * recipe.batch_size / 256.0,
                                      steps_per_epoch, recipe.warmup_epochs,
                                      recipe.decay_epochs, recipe.decay_multipliers)
        model.compile(
            make_optimizer(recipe, schedule),
            keras.losses.CategoricalCrossentropy(from_logits=True,
                                                 label_smoothing=recipe.label_smoothing),
            metrics=[keras.metrics.CategoricalAccuracy(name="top1"),
                     keras.metrics.TopKCategoricalAccuracy(k=min(5, num_classes), name="top5")])
    backup = os.path.join(output_dir, "backup")
    os.makedirs(output_dir, exist_ok=True)
    started = time.time()
    try:
        model.fit(train_data.map(_one_hot(num_classes)).repeat(), epochs=epochs,
                  steps_per_epoch=steps_per_epoch, verbose=verbose, shuffle=False,
                  callbacks=[keras.callbacks.BackupAndRestore(backup),
                             keras.callbacks.TensorBoard(os.path.join(output_dir, "logs")),
                             *callbacks])
    except tf.errors.OpError as error:
        raise UserError(f"training failed while reading the data: "
                        f"{error.message.strip().splitlines()[0]}") from None
    train_seconds = time.time() - started
    scores = model.evaluate(eval_data.map(_one_hot(num_classes)), verbose=0, return_dict=True)
    counted = sum(int(images.shape[0]) for images, _ in eval_data)
    if counted != num_eval:
        raise UserError(f"evaluation saw {counted} test images, expected {num_eval}")
    info = export(model, os.path.join(output_dir, "model"), preprocessing=preprocessing,
                  overwrite=True)
    result = {"top1": float(scores["top1"]), "top5": float(scores["top5"]), "n_eval": counted,
              "n_train": num_train, "steps": steps_per_epoch * epochs,
              "train_seconds": train_seconds, "model_id": info["model_id"],
              "model": model_name, "seed": seed, "recipe": dataclasses.asdict(recipe),
              "flags": flags_record or {}}
    write_json(os.path.join(output_dir, "metrics.json"), result, indent=2, sort_keys=True)
    shutil.rmtree(backup, ignore_errors=True)
    return result
