"""The project's one training loop (docs/architecture.md, "Training"), and ROAR's use of it.

`fit` trains a trainer's compiled model on its stream under a `tf.distribute` strategy and a
precision, seeded, with an epoch backup so a killed run resumes exactly; BAM training
(`bam.train`), IDSDS fine-tuning (`faithfulness.finetune`) and `train_and_evaluate` call it.
`train_and_evaluate` fits a registered model from scratch with a ROAR recipe
(`models.training.recipes`) on batched (image, label) data, as ROAR / KAR retraining and the
synthetic world's clean model do, logs to TensorBoard, evaluates on every test image and
exports the model with `metrics.json` beside it.
"""
import dataclasses
import math
import os
import shutil
import time
from typing import Any, Callable, Iterable, Optional, Sequence, TypedDict

import keras
import numpy as np
import tensorflow as tf

from models.architectures.zoo import build, in_precision
from models.formats.exporting import export
from models.foundation import provenance, results
from models.foundation.errors import UserError, check_one_of
from models.foundation.files import ensure_directory, exclusive, read_json, write_json
from models.training import backup as epoch_backup
from models.training import distribution
from models.training.recipes import OPTIMIZERS, Recipe, RunOptions, own_recipe
from models.training.training_bar import TrainingBar


@keras.saving.register_keras_serializable(package="models")
class WarmupStepSchedule(keras.optimizers.schedules.LearningRateSchedule):
    """base_lr * batch / 256, linear warm-up from 0 over `warmup_epochs`, then step decays."""

    def __init__(self, scaled_lr: float, steps_per_epoch: float, warmup_epochs: float,
                 decay_epochs: Sequence[float], decay_multipliers: Sequence[float]):
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

    def get_config(self) -> dict:
        return {"scaled_lr": self.scaled_lr, "steps_per_epoch": self.steps_per_epoch,
                "warmup_epochs": self.warmup_epochs, "decay_epochs": self.decay_epochs,
                "decay_multipliers": self.decay_multipliers}


def make_optimizer(name: str, schedule: Any, momentum: float = 0.9) -> Any:
    """Nesterov SGD with `momentum`, or Adam (a faster choice for small models and short
    schedules), on `schedule`: a learning rate or a Keras schedule. Every trainer's optimizer."""
    check_one_of("optimizer", name, OPTIMIZERS)
    if name == "sgd":
        return keras.optimizers.SGD(schedule, momentum=momentum, nesterov=True)
    return keras.optimizers.Adam(schedule)


def stopped_message(epoch: int, backup: Optional[str] = None) -> str:
    """The line every trainer prints when --stop_after_epochs ended its run."""
    where = f" from {backup}" if backup else ""
    return (f"stopped after epoch {epoch} (--stop_after_epochs); run the same command again to "
            f"resume{where}")


def top_k_accuracy(call: Callable[[Any], Any], batches: Iterable, k: int = 1,
                   check_classes: Optional[Callable[[int], None]] = None) -> tuple:
    """(top-1, top-k, number of images) of `call` (images -> logits [n, classes]) over
    (images, labels) batches, evaluation only: every trainer's --mode=eval. Ties go to the
    lower class, as argmax. `check_classes(classes)` may refuse the model's number of classes
    (on the first batch, before the rest is read)."""
    top1 = top_k = count = 0
    for images, labels in batches:
        logits = np.asarray(call(images), np.float32)
        labels = np.asarray(labels)
        if count == 0 and check_classes is not None:
            check_classes(int(logits.shape[1]))
        ranked = np.argsort(-logits, axis=1, kind="stable")[:, :min(k, logits.shape[1])]
        top1 += int(np.sum(ranked[:, 0] == labels))
        top_k += int(np.sum(np.any(ranked == labels[:, None], axis=1)))
        count += len(labels)
    return top1 / max(count, 1), top_k / max(count, 1), count


def build_model(model_name: str, num_classes: int, size: int, recipe: Optional[Recipe],
                precision: str = "float32", options: Optional[dict] = None) -> Any:
    """A registered model (with builder `options`, e.g. a small variant's width) with the
    recipe's weight decay where the builder takes one (none without a recipe), built under
    `precision` (`in_precision`)."""
    options = dict(options or {})
    if model_name == "resnet50" and recipe is not None:
        options["weight_decay"] = recipe.weight_decay
    return in_precision(lambda: build(model_name, num_classes, (size, size, 3), **options),
                        precision)


def float32_twin(model: Any, model_name: str, num_classes: int, size: int,
                 recipe: Optional[Recipe], options: Optional[dict] = None) -> Any:
    """A float32 copy of a mixed-precision `model` (the same layers and weights): what is
    exported, since explanations and evaluations run in float32."""
    twin = build_model(model_name, num_classes, size, recipe, options=options)
    twin.set_weights(model.get_weights())
    return twin


def _one_hot(num_classes):
    """(image, label) -> (image, one-hot label), asserting every label is one of the classes
    (an all-zero one-hot row would otherwise train and score silently)."""

    def convert(images, labels):
        labels = tf.cast(labels, tf.int64)
        checks = [tf.debugging.assert_greater_equal(
                      labels, tf.constant(0, tf.int64),
                      message=f"{LABEL_MESSAGE} outside the {num_classes} classes"),
                  tf.debugging.assert_less(
                      labels, tf.constant(num_classes, tf.int64),
                      message=f"{LABEL_MESSAGE} outside the {num_classes} classes")]
        with tf.control_dependencies(checks):
            return images, tf.one_hot(labels, num_classes)

    return convert


LABEL_MESSAGE = "a label lies"
ORIGIN = "origin.json"


class DataError(UserError):
    """Training stopped on bad data (a label, a NaN, a size, corrupt bytes); the caller may
    locate the record."""


class Stopped(Exception):
    """Training stopped by `stop_after_epochs` with its backup kept: a re-run resumes."""

    def __init__(self, epochs: int):
        super().__init__(f"stopped after epoch {epochs}")
        self.epochs = epochs


class StopAfter(keras.callbacks.Callback):
    """Ends this invocation after `epochs` finished epochs (after the backup of the last one),
    as a time-limited or preemptible job would end; a re-run resumes from the backup."""

    def __init__(self, epochs: int):
        super().__init__()
        self.epochs = epochs

    def on_epoch_end(self, epoch: int, logs: Optional[dict] = None) -> None:
        if epoch + 1 >= self.epochs:
            raise Stopped(epoch + 1)


class TimeLimit(keras.callbacks.Callback):
    """Stops training at the end of the batch on which `seconds` have passed."""

    def __init__(self, seconds: Optional[float]):
        super().__init__()
        self.seconds = seconds
        self.started = 0.0

    def on_train_begin(self, logs: Optional[dict] = None) -> None:
        self.started = time.time()

    def on_train_batch_end(self, batch: int, logs: Optional[dict] = None) -> None:
        if self.seconds and time.time() - self.started > self.seconds:
            self.model.stop_training = True


class Progress:
    """The time spent and the resumptions of a run, counted over every attempt of a killed and
    resumed run: the backup keeps them with each epoch's state."""

    def __init__(self, state: Optional[dict]):
        recorded = {} if state is None else state.get("progress", {})
        self.train_seconds = float(recorded.get("train_seconds", 0.0))
        self.resumed_at_epochs = list(recorded.get("resumed_at_epochs", []))
        if state is not None:
            self.resumed_at_epochs.append(int(state["epoch"]))
        self.started = time.time()

    def seconds(self) -> float:
        return self.train_seconds + time.time() - self.started

    def record(self) -> dict:
        return {"train_seconds": self.seconds(), "resumed_at_epochs": self.resumed_at_epochs}


# A finished run's metrics.json, whatever trained it (ROAR, fine-tuning), and a ROAR run's, which
# roar.report and train_and_evaluate's reuse read.
# (METRICS_SCHEMA lives with the results writer, which roar.report loads without TensorFlow.)
FINISHED_SCHEMA = {"type": "object"}


def prepare_run_folder(output_dir: str, requested: dict, overwrite: bool) -> Optional[Any]:
    """Checks the run folder's origin before anything is reused (docs/architecture.md,
    "Outputs and provenance"). Returns the finished metrics to reuse, or None to train (after
    recording the origin)."""
    origin_path = os.path.join(output_dir, ORIGIN)
    what = f"run folder {output_dir}"
    edited = not overwrite and os.path.exists(origin_path) and provenance.code_changed(
        read_json(origin_path, "origin file", provenance.ORIGIN_SCHEMA), requested,
        "the method whose maps it trains on")
    if edited:
        print(f"{what}: {edited} changed since it was made; training it afresh", flush=True)
    if overwrite or edited:
        shutil.rmtree(output_dir, ignore_errors=True)
    elif os.path.exists(origin_path):
        provenance.check(origin_path, requested, what)
        metrics_path = os.path.join(output_dir, "metrics.json")
        if os.path.exists(metrics_path):
            return read_json(metrics_path, "metrics file", FINISHED_SCHEMA)
    elif os.path.isdir(output_dir) and [n for n in os.listdir(output_dir)
                                        if not n.startswith(".")]:
        raise UserError(f"{what} holds a run without {ORIGIN} (from an older version); pass "
                        "--overwrite to replace it or choose a new output path")
    ensure_directory(output_dir)
    provenance.claim(origin_path, requested, what)
    return None


class RunMetrics(TypedDict, total=False):
    """What one `train_and_evaluate` run gives, as its `metrics.json` holds it; a run stopped
    on purpose (`RunOptions.stop_after_epochs`) gives `stopped_after_epoch` alone."""

    top1: float
    top5: float
    n_eval: int
    n_train: int
    steps: int
    train_seconds: float
    resumptions: int
    resumed_at_epochs: list
    model_id: str
    model: str
    seed: int
    recipe: dict
    loss_per_epoch: list
    first_epoch: int
    precision: str
    replicas: int
    flags: dict  # what the caller recorded (`flags_record`)
    origin: dict
    stopped_after_epoch: int


def train_and_evaluate(train_data: Any, eval_data: Any, run: RunOptions, *, num_train: int,
                       num_eval: int, size: int, output_dir: str, preprocessing: str = "imagenet",
                       flags_record: Optional[dict] = None, inputs: Optional[dict] = None,
                       callbacks: Sequence = ()) -> RunMetrics:
    """Trains on `train_data` as `run` says, evaluates on all of `eval_data`, exports; returns
    the metrics.

    `train_data` / `eval_data` are batched datasets of (normalised image, int label), batched
    by the global batch, of `num_train` and `num_eval` images of side `size` in the input space
    `preprocessing`. Writes `<output_dir>/origin.json` (the settings, `flags_record` and the
    `inputs` fingerprints that make the run), `<output_dir>/model` (SavedModel, `models.load`,
    float32 whatever the `precision`), `<output_dir>/metrics.json` (with the loss per epoch)
    and TensorBoard logs in `<output_dir>/logs`. A finished run of the same origin is reused; a
    run folder of another origin stops with one line unless `run.overwrite`. `<output_dir>/backup`
    holds the last finished epoch until the run completes, so a re-run of a killed job resumes
    there exactly: weights, optimizer and random state are restored and the training stream
    skips the batches already seen, so the result equals an uninterrupted run's.
    `run.stop_after_epochs` ends this invocation after that many epochs (counting those already
    backed up) and returns {"stopped_after_epoch": n}. `run.model_options` are part of the
    origin when given.

    Under the strategy "multi_worker" every worker of the TF_CONFIG cluster calls this with the
    same arguments; the chief writes the run folder, the others restore from its backup and
    keep their own files in `<output_dir>.<task>` until they finish (docs/scale_out.md).
    """
    recipe = own_recipe(run, Recipe)
    steps_per_epoch = max(1, num_train // recipe.batch_size)
    epochs = max(1, int(math.ceil(recipe.epochs)))
    requested = provenance.origin(
        {**(flags_record or {}), **dataclasses.asdict(recipe), "model": run.model_name,
         "num_classes": run.num_classes, "size": size, "seed": run.seed,
         "preprocessing": preprocessing, "num_train": num_train, "num_eval": num_eval,
         # float32 runs keep the origin they had before mixed precision existed
         **({} if run.precision == "float32" else {"precision": run.precision}),
         **({"model_options": run.model_options} if run.model_options else {})},
        **(inputs or {}))
    distributed = distribution.start(run.strategy, run.cpu_replicas)
    chief, task = (distribution.role() if distribution.is_multi_worker(distributed)
                   else (True, "chief"))
    job = _Job(train_data, eval_data, num_train, num_eval, size, preprocessing, output_dir,
               requested, flags_record or {}, tuple(callbacks), steps_per_epoch, epochs)
    if not chief:  # a multi-worker run's other workers: their own scratch folder
        scratch = f"{os.path.abspath(output_dir)}.{task}"
        with exclusive(scratch, "worker folder"):
            chiefs = os.path.join(output_dir, "metrics.json")
            if os.path.exists(chiefs) and not run.overwrite:
                return read_json(chiefs, "metrics file", results.METRICS_SCHEMA)
            try:
                return _train(job, run, scratch)
            finally:
                shutil.rmtree(scratch, ignore_errors=True)
    with exclusive(output_dir, "run folder"):
        fresh = not os.path.exists(os.path.join(output_dir, "backup"))
        finished = prepare_run_folder(output_dir, requested, run.overwrite)
        if finished is not None:
            return finished
        try:
            return _train(job, run, None)
        except UserError:
            if fresh:  # a run that failed before its first backup leaves nothing behind
                shutil.rmtree(output_dir, ignore_errors=True)
            raise


@dataclasses.dataclass
class Fitted:
    """What one call of `fit` did: the trained `model`, the loss of each epoch it ran, the epochs
    finished before it (a resumed run's), the training seconds of every attempt, the
    resumptions so far (the backup's epoch counts), the number of replicas and what
    `after(model)` returned."""

    model: Any
    losses: list
    first_epoch: int
    seconds: float
    resumed_at_epochs: list
    replicas: int
    after: Any = None


@dataclasses.dataclass(frozen=True)
class FitPlan:
    """What one training needs besides the run's options (`RunOptions`): the loop's one input.

    `build()` makes the compiled model (called in the strategy's scope); `stream_from(epoch)`
    gives the training batches from that epoch on (the stream of a resumed run skips what the
    finished epochs read), `epochs` epochs of `steps_per_epoch` steps; `first_batch()` one
    unshuffled batch (`distribution.fit_compatible`). `backup` (a folder, or None for none)
    holds Keras' backup of the last finished epoch and the time spent, so a re-run resumes
    there exactly; it is deleted when training ends unless `keep_backup`. `logs`: a TensorBoard
    folder. `scratch`: a multi-worker run's non-chief worker restores from the chief's `backup`
    and writes only there. `before(model)` and `after(model)` run under the strategy, before
    and after training (an evaluation, an export)."""

    build: Callable[[], Any]
    stream_from: Callable[[int], Any]
    steps_per_epoch: int
    epochs: int
    first_batch: Callable[[], tuple]
    backup: Optional[str] = None
    keep_backup: bool = False
    logs: Optional[str] = None
    callbacks: Sequence = ()
    validation_data: Any = None
    scratch: Optional[str] = None
    before: Optional[Callable[[Any], None]] = None
    after: Optional[Callable[[Any], Any]] = None


def fit(plan: FitPlan, run: RunOptions) -> Fitted:
    """The one training loop of BAM training, ROAR / KAR retraining and IDSDS fine-tuning
    (docs/architecture.md, "Training"): seeds the process (`run.seed`, op determinism), starts
    `run.strategy`, builds the model in its scope and trains it as `plan` says, split over the
    replicas as one device would see it. `run.stop_after_epochs` raises `Stopped` after that
    many finished epochs. Training that fails on its data raises `DataError` with one line."""
    build, backup, scratch, logs = plan.build, plan.backup, plan.scratch, plan.logs
    keras.utils.set_random_seed(run.seed)
    tf.config.experimental.enable_op_determinism()
    distributed = distribution.start(run.strategy, run.cpu_replicas)
    with distributed.scope():
        model = build()
    if scratch is not None and backup is None:
        raise ValueError("a worker's scratch folder goes with the chief's backup")
    state = epoch_backup.latest(backup, writer=scratch is None)
    done_epochs = 0 if state is None else int(state["epoch"])
    progress = Progress(state)
    stream = distribution.distribute_training(distributed, plan.stream_from(done_epochs),
                                              run.recipe.batch_size)
    run_callbacks: list = [] if backup is None else [epoch_backup.EpochBackup(
        backup, state, progress.record, keep=plan.keep_backup,
        scratch=None if scratch is None else os.path.join(scratch, "backup"))]
    logs = logs if scratch is None else os.path.join(scratch, "logs")
    if logs is not None:
        run_callbacks.append(keras.callbacks.TensorBoard(logs))
    if run.verbose:  # a bar on a terminal, timestamped lines in a log (Keras' own bar: neither)
        run_callbacks.append(TrainingBar(f"training {run.model_name}"))
    if run.stop_after_epochs is not None:
        run_callbacks.append(StopAfter(run.stop_after_epochs))
    try:
        with distribution.fit_compatible(model, distributed, plan.first_batch):
            if plan.before is not None:
                plan.before(model)
            history = model.fit(stream, epochs=plan.epochs, steps_per_epoch=plan.steps_per_epoch,
                                verbose=0, shuffle=False, validation_data=plan.validation_data,
                                callbacks=[*run_callbacks, *plan.callbacks])
            seconds = progress.seconds()
            finished = None if plan.after is None else plan.after(model)
    except tf.errors.OpError as error:
        raise DataError(_data_problem(error)) from None
    return Fitted(model, [float(v) for v in history.history.get("loss", [])], done_epochs,
                  seconds, list(progress.resumed_at_epochs),
                  int(distributed.num_replicas_in_sync), finished)


@dataclasses.dataclass(frozen=True)
class _Job:
    """One `train_and_evaluate` run as `_train` reads it: its data (batched datasets of
    `num_train` and `num_eval` images of side `size` in the input space `preprocessing`), its
    folder and origin, what the caller adds (`flags_record`, `callbacks`) and its length."""

    train_data: Any
    eval_data: Any
    num_train: int
    num_eval: int
    size: int
    preprocessing: str
    output_dir: str
    requested: dict
    flags_record: dict
    callbacks: tuple
    steps_per_epoch: int
    epochs: int


def _train(job: _Job, run: RunOptions, scratch: Optional[str]) -> RunMetrics:
    """Trains, evaluates and exports `job` (into `scratch` for a non-chief worker)."""
    recipe, num_classes, model_name = own_recipe(run, Recipe), run.num_classes, run.model_name
    train_data, eval_data, output_dir, requested = (job.train_data, job.eval_data,
                                                    job.output_dir, job.requested)
    num_eval, size, steps_per_epoch = job.num_eval, job.size, job.steps_per_epoch
    distributed = distribution.start(run.strategy, run.cpu_replicas)

    def build():
        model = build_model(model_name, num_classes, size, recipe, run.precision,
                            run.model_options)
        schedule = WarmupStepSchedule(recipe.base_learning_rate * recipe.batch_size / 256.0,
                                      steps_per_epoch, recipe.warmup_epochs,
                                      recipe.decay_epochs, recipe.decay_multipliers)
        model.compile(
            make_optimizer(recipe.optimizer, schedule, recipe.momentum),
            keras.losses.CategoricalCrossentropy(from_logits=True,
                                                 label_smoothing=recipe.label_smoothing),
            metrics=[keras.metrics.CategoricalAccuracy(name="top1"),
                     keras.metrics.TopKCategoricalAccuracy(k=min(5, num_classes), name="top5")])
        return model

    evaluation = eval_data.map(_one_hot(num_classes))
    first_batch = evaluation.take(1).get_single_element  # unshuffled: see fit_compatible
    if distribution.is_multi_worker(distributed):
        evaluation = distribution.evaluation_data(evaluation)

    def after(model):
        scores = model.evaluate(evaluation, verbose=0, return_dict=True,
                                steps=-(-num_eval // _batch(eval_data)))
        exported = model if run.precision == "float32" else float32_twin(
            model, model_name, num_classes, size, recipe, run.model_options)
        info = export(exported, os.path.join(scratch or output_dir, "model"),
                      preprocessing=job.preprocessing, overwrite=True,
                      extra={"origin": requested})
        return scores, info

    backup = os.path.join(output_dir, "backup")
    try:
        fitted = fit(FitPlan(
            build, lambda first: train_data.map(_one_hot(num_classes)).repeat().skip(
                first * steps_per_epoch), steps_per_epoch, job.epochs, first_batch, backup=backup,
            keep_backup=True,  # until metrics.json is written (below)
            logs=os.path.join(output_dir, "logs"), callbacks=job.callbacks, scratch=scratch,
            after=after), run)
    except Stopped as stop:
        return {"stopped_after_epoch": stop.epochs}
    scores, info = fitted.after
    counted = sum(int(images.shape[0]) for images, _ in eval_data)
    if counted != num_eval:
        raise UserError(f"evaluation saw {counted} test images, expected {num_eval}")
    result = {"top1": float(scores["top1"]), "top5": float(scores["top5"]), "n_eval": counted,
              "n_train": job.num_train, "steps": steps_per_epoch * job.epochs,
              "train_seconds": fitted.seconds, "resumptions": len(fitted.resumed_at_epochs),
              "resumed_at_epochs": fitted.resumed_at_epochs, "model_id": info["model_id"],
              "model": model_name, "seed": run.seed, "recipe": dataclasses.asdict(recipe),
              "loss_per_epoch": fitted.losses, "first_epoch": fitted.first_epoch,
              "precision": run.precision, "replicas": fitted.replicas,
              "flags": job.flags_record, "origin": requested}
    result = provenance.canonical(result)  # as metrics.json will give it back when reused
    if scratch is None:
        write_json(os.path.join(output_dir, "metrics.json"), result, indent=2, sort_keys=True)
        shutil.rmtree(backup, ignore_errors=True)
    return result


def _batch(data) -> int:
    """The (static) batch size of a batched dataset, else the first batch's (counts steps)."""
    return int(data.element_spec[0].shape[0] or 0) or max(
        1, int(next(iter(data))[0].shape[0]))


def _data_problem(error) -> str:
    """The one-line description of a training failure caused by the data."""
    text = (error.message or "").strip()
    if LABEL_MESSAGE in text:
        line = next(line for line in text.splitlines() if LABEL_MESSAGE in line)
        return line.strip().rstrip(".") + "; check --num_classes and --label_offset"
    if "NaN" in text or "Inf" in text:
        return "a map or image holds NaN or infinite values"
    first = text.splitlines()[0] if text else type(error).__name__
    return f"training failed while reading the data: {first}"
