"""ROAR / KAR / ROAD retraining: `python -m roar.train --ratio=0.5`.

    python -m roar.train --ratio=0.5                                   # built-in synthetic world
    python -m roar.train --ratio=0.5 --saliency_method=gradient_smooth_2 \\
        --data_dir=saliency/IG_SG_2 --output_dir=runs --dataset_name=imagenet --model=resnet50

Trains a model from scratch on masked images (train and test masked identically, roar.md §3)
with the ROAR recipe (roar.md §4): label smoothing 0.1, Nesterov SGD with momentum 0.9, a learning
rate scaled by batch / 256 with a linear warm-up and step decays, weight decay where the model
has it (resnet50: L2 on every kernel and the head's bias). Smaller models and shorter schedules by
flag. Runs under `tf.distribute` (`--strategy`), keeps an epoch backup so a killed run resumes,
logs to TensorBoard, shows Keras' progress bar with ETA, evaluates on every test image and writes
`metrics.json` (top-1, top-5, number of test images, all flags) beside the exported model.
"""
import dataclasses
import math
import os
import shutil
import time

import keras
import tensorflow as tf
from absl import flags

import models
from models.errors import UserError, run_main
from models.files import write_json
from roar import data

STRATEGIES = ("default", "mirrored", "multi_worker", "tpu")


@dataclasses.dataclass(frozen=True)
class Recipe:
    """The optimisation recipe (roar.md §4.2); the defaults are the original's shape with a
    short schedule for small models."""

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


class RoarSchedule(keras.optimizers.schedules.LearningRateSchedule):
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


def make_strategy(name):
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


def make_optimizer(recipe, schedule):
    """Nesterov SGD on the ROAR schedule (the recipe), or Adam on the same schedule (a faster
    choice for small models and short schedules)."""
    if recipe.optimizer == "sgd":
        return keras.optimizers.SGD(schedule, momentum=recipe.momentum, nesterov=True)
    if recipe.optimizer == "adam":
        return keras.optimizers.Adam(schedule)
    raise UserError(f"--optimizer must be sgd or adam; got {recipe.optimizer!r}")


def _one_hot(num_classes):
    return lambda images, labels: (images, tf.one_hot(labels, num_classes))


def build_model(model_name, num_classes, size, recipe):
    """A registered model with the recipe's weight decay where the builder takes one."""
    options = {}
    if model_name == "resnet50":
        options["weight_decay"] = recipe.weight_decay
    return models.build(model_name, num_classes, (size, size, 3), **options)


def train_and_evaluate(train_data, eval_data, *, num_classes, num_train, num_eval, size,
                       output_dir, model_name="small_cnn", recipe=Recipe(), strategy="default",
                       seed=0, verbose=1, flags_record=None, callbacks=()):
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
        schedule = RoarSchedule(recipe.base_learning_rate * recipe.batch_size / 256.0,
                                steps_per_epoch, recipe.warmup_epochs, recipe.decay_epochs,
                                recipe.decay_multipliers)
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
    info = models.export(model, os.path.join(output_dir, "model"), preprocessing="imagenet",
                         overwrite=True)
    result = {"top1": float(scores["top1"]), "top5": float(scores["top5"]), "n_eval": counted,
              "n_train": num_train, "steps": steps_per_epoch * epochs,
              "train_seconds": train_seconds, "model_id": info["model_id"],
              "model": model_name, "seed": seed, "recipe": dataclasses.asdict(recipe),
              "flags": flags_record or {}}
    write_json(os.path.join(output_dir, "metrics.json"), result, indent=2, sort_keys=True)
    shutil.rmtree(backup, ignore_errors=True)
    return result


def run_masked(train_files, eval_files, config, *, output_dir, recipe=Recipe(),
               source="images", control=None, map_key=None, size=None, geometry="none",
               label_offset=0, num_classes=10, model_name="small_cnn", strategy="default",
               seed=0, eval_batch_size=256, verbose=0, flags_record=None, random_mask="fixed",
               num_train=None, num_eval=None):
    """One ROAR / KAR run on record files: the masked train and test pipelines (`roar.data`)
    with the same masking, then `train_and_evaluate`; returns the metrics. The numbers of
    train and test records are counted (a full read) unless given."""
    common = dict(map_key=map_key, size=size, geometry=geometry, label_offset=label_offset,
                  control=control, seed=seed)
    train_data = data.masked_dataset(train_files, source, config, training=True,
                                     batch_size=recipe.batch_size, random_mask=random_mask,
                                     **common)
    eval_data = data.masked_dataset(eval_files, source, config, training=False,
                                    batch_size=eval_batch_size, **common)
    return train_and_evaluate(
        train_data, eval_data, num_classes=num_classes,
        num_train=num_train or data.count_records(train_files),
        num_eval=num_eval or data.count_records(eval_files),
        size=train_data.element_spec[0].shape[1], output_dir=output_dir,
        model_name=model_name, recipe=recipe, strategy=strategy, seed=seed, verbose=verbose,
        flags_record=flags_record)


# ----------------------------------------------------------------------------------------------
# The binary.

DATASETS = {"imagenet": 1000, "food_101": 101, "birdsnap": 500, "synthetic": 10}
# (train, test) images of the paper's datasets (roar.md §4.3): no full read to count them.
DATASET_SIZES = {"imagenet": (1281167, 50000), "food_101": (75750, 25250),
                 "birdsnap": (47386, 2443)}


def define_flags():
    """The binary's flags (defined only when it runs)."""
    flags.DEFINE_float("ratio", None, "Fraction of features replaced (ROAR: the top ones; KAR: "
                       "all but the top 1 - ratio). Required unless --transformation=raw_image.")
    flags.DEFINE_enum("transformation", "modified_image",
                      ["modified_image", "random_baseline", "raw_image"],
                      "Mask by a saliency map (or the oracle), by a random map, or not at all.")
    flags.DEFINE_string("saliency_method", None, "Record key or generator code of the map "
                        "(e.g. gradient_smooth_2 or SH_SG_2), or 'oracle' (the records' object "
                        "masks). Default: gradient_image on the synthetic world, else "
                        "ig_smooth_2.")
    flags.DEFINE_enum("random_mask", "fixed", ["fixed", "per_read"],
                      "Random baseline: one map per image (default), or re-drawn every epoch "
                      "as the original (evaluation then uses the fixed draw).")
    flags.DEFINE_bool("keep_information", False, "KAR: keep the top features, replace the rest.")
    flags.DEFINE_enum("fill", "mean", ["mean", "zero", "noisy_linear"],
                      "Replacement: ImageNet's mean colour (original), zero, or ROAD's noisy "
                      "linear imputation (needs --ranking=pixel).")
    flags.DEFINE_enum("ranking", "element", ["element", "pixel"],
                      "Rank channel entries independently (original) or whole pixels (ROAD).")
    flags.DEFINE_bool("squared_value", True, "Rank by e^2 (original) instead of the signed e.")
    flags.DEFINE_enum("tie_break", "index", ["index", "jitter"],
                      "Ties: lower flat index first (original) or ROAD's shared 1e-4 jitter.")
    flags.DEFINE_float("road_noise", 0.01, "ROAD imputation noise (absolute, [0, 1] pixels).")
    flags.DEFINE_float("cg_tol", 1e-5, "ROAD solver: relative residual to stop at.")
    flags.DEFINE_integer("cg_max_iters", 2000, "ROAD solver: iteration limit.")
    flags.DEFINE_string("data_dir", None, "Folder of the method's saliency records, or of image "
                        "records for random/oracle/raw runs. Default: the built-in synthetic "
                        "world (set up once in a cache it names).")
    flags.DEFINE_string("tfds_name", None, "Read a tensorflow-datasets dataset instead: its "
                        "splits are converted once to image records in <output_dir>/tfds/<name>"
                        " (for random, oracle-free and raw runs, or to generate saliency records "
                        "from).")
    flags.DEFINE_string("tfds_train_split", "train", "tensorflow-datasets training split.")
    flags.DEFINE_string("tfds_eval_split", "test", "tensorflow-datasets test split.")
    flags.DEFINE_string("tfds_data_dir", None, "tensorflow-datasets data directory.")
    flags.DEFINE_string("train_pattern", "train-*", "Training shards in --data_dir.")
    flags.DEFINE_string("eval_pattern", "validation-*", "Test shards in --data_dir.")
    flags.DEFINE_enum("dataset_name", None, list(DATASETS), "Sets --num_classes (default: "
                      "synthetic without --data_dir, else imagenet).")
    flags.DEFINE_integer("num_classes", None, "Number of classes (default: by dataset).")
    flags.DEFINE_integer("label_offset", 0, "Added to image-record labels (TF-slim ImageNet: -1).")
    flags.DEFINE_enum("geometry", "none", ["none", "center_crop"],
                      "none: images are already the model's size; center_crop: ROAR's crop_224.")
    flags.DEFINE_integer("image_size", None, "Model input side (default: the maps', or 64 for "
                         "the synthetic world, 224 otherwise).")
    flags.DEFINE_string("output_dir", "roar_runs", "Root of the run folders.")
    flags.DEFINE_string("model", None, "Registered model (default: small_cnn on the synthetic "
                        "world, resnet50 otherwise).")
    flags.DEFINE_enum("strategy", "default", list(STRATEGIES), "tf.distribute strategy.")
    flags.DEFINE_integer("seed", 0, "Seed of initialisation, order, masks and noise.")
    flags.DEFINE_float("epochs", None, "Training epochs (synthetic default 4, else 90).")
    flags.DEFINE_integer("batch_size", None, "Global training batch (synthetic 64, else 256).")
    flags.DEFINE_enum("optimizer", None, ["sgd", "adam"],
                      "Nesterov SGD (the recipe; default off the synthetic world) or Adam.")
    flags.DEFINE_float("base_learning_rate", None, "Learning rate at batch 256 (scaled by "
                       "batch / 256). Synthetic: 0.004 (Adam), else 0.1 (SGD).")
    flags.DEFINE_float("weight_decay", 1e-4, "L2 weight decay (resnet50).")
    flags.DEFINE_float("warmup_epochs", None, "Linear warm-up (synthetic 1, else 5).")
    flags.DEFINE_list("lr_decay_epochs", None, "Epochs of the x0.1 steps (synthetic: 3; else "
                      "30,60,80).")
    flags.DEFINE_integer("eval_batch_size", 256, "Evaluation batch.")
    flags.DEFINE_integer("num_train_images", None, "Training records (default: the paper's "
                         "count for imagenet / food_101 / birdsnap, else counted).")
    flags.DEFINE_integer("num_eval_images", None, "Test records (as above); evaluation checks "
                         "that it saw exactly this many.")


SYNTHETIC_RECIPE = {"epochs": 4.0, "batch_size": 64, "optimizer": "adam",
                    "base_learning_rate": 0.004, "warmup_epochs": 1.0, "decay_epochs": (3.0,)}
REAL_RECIPE = {"epochs": 90.0, "batch_size": 256, "optimizer": "sgd",
               "base_learning_rate": 0.1, "warmup_epochs": 5.0,
               "decay_epochs": (30.0, 60.0, 80.0)}


def recipe_from_flags(f, synthetic):
    """The Recipe: flag values where given, else the synthetic or real defaults."""
    values = dict(SYNTHETIC_RECIPE if synthetic else REAL_RECIPE)
    for name in ("epochs", "batch_size", "optimizer", "base_learning_rate", "warmup_epochs"):
        if getattr(f, name) is not None:
            values[name] = getattr(f, name)
    if f.lr_decay_epochs is not None:
        values["decay_epochs"] = tuple(float(e) for e in f.lr_decay_epochs)
    multipliers = tuple(0.1 ** (k + 1) for k in range(len(values["decay_epochs"])))
    return Recipe(weight_decay=f.weight_decay, decay_multipliers=multipliers, **values)


def run_directory(output_dir, transformation, ratio, method, keep, ranking, fill, seed):
    """`<output_dir>/<transformation>/<ratio>/<method>/<keep|remove>/<ranking>-<fill>/seed_<s>`."""
    return os.path.join(output_dir, transformation, f"{ratio:.2f}", method or "none",
                        "keep" if keep else "remove", f"{ranking}-{fill}", f"seed_{seed}")


def main(argv):
    del argv
    from roar import synthetic_setup

    f = flags.FLAGS
    # The small-model defaults apply to the synthetic world.
    synthetic = (f.data_dir is None and not f.tfds_name) or f.dataset_name == "synthetic"
    transformation = f.transformation
    if transformation != "raw_image" and f.ratio is None:
        raise UserError("--ratio is required (the fraction of features replaced)")
    ratio = 0.0 if transformation == "raw_image" else f.ratio
    method = f.saliency_method or ("gradient_image" if synthetic else "ig_smooth_2")
    if transformation == "random_baseline":
        method, control = "random", "random"
    elif transformation == "raw_image":
        method, control = None, "none"
    else:
        control = "oracle" if method == "oracle" else None
    dataset_name = f.dataset_name or ("synthetic" if synthetic else "imagenet")
    num_classes = f.num_classes or DATASETS[dataset_name]
    size = f.image_size or (synthetic_setup.IMAGE_SIZE if f.data_dir is None and not f.tfds_name
                            else None)
    if f.tfds_name:
        from roar import tfds_source

        data_dir = os.path.join(f.output_dir, "tfds", f.tfds_name)
        for split, prefix in ((f.tfds_train_split, "train"), (f.tfds_eval_split, "validation")):
            tfds_source.tfds_to_records(f.tfds_name, split, data_dir, prefix, f.tfds_data_dir)
        num_classes = f.num_classes or tfds_source.tfds_num_classes(f.tfds_name,
                                                                    f.tfds_data_dir)
        if control is None:
            raise UserError(f"--tfds_name gives images only; generate saliency records from "
                            f"{data_dir} with saliency_gen.generate and pass --data_dir")
    elif f.data_dir is None:
        setup = synthetic_setup.prepare(seed=0, method=method if control is None else None)
        data_dir = setup["saliency"] if control is None else setup["records"]
    else:
        data_dir = f.data_dir
    config = data.MaskConfig(ratio=ratio, keep_information=f.keep_information,
                             ranking=f.ranking, squared=f.squared_value, tie_break=f.tie_break,
                             fill=f.fill, road_noise=f.road_noise, cg_tol=f.cg_tol,
                             cg_max_iters=f.cg_max_iters, seed=f.seed).check()
    recipe = recipe_from_flags(f, synthetic)
    train_files = data.list_shards(os.path.join(data_dir, f.train_pattern), "--train_pattern")
    eval_files = data.list_shards(os.path.join(data_dir, f.eval_pattern), "--eval_pattern")
    source = "images" if control else "saliency"
    known_sizes = DATASET_SIZES.get(f.dataset_name or "", (None, None))  # only when named
    output = run_directory(f.output_dir, transformation, ratio, method, f.keep_information,
                           f.ranking, f.fill, f.seed)
    print(f"ROAR run -> {output}")
    record = {name: getattr(f, name) for name in f}  # every flag, for metrics.json
    record = {k: v for k, v in record.items() if isinstance(v, (int, float, str, bool, list,
                                                                  type(None)))}
    record.update(saliency_method=method, ratio=ratio)  # resolved defaults
    result = run_masked(
        train_files, eval_files, config, output_dir=output, recipe=recipe, source=source,
        control=control,
        map_key=synthetic_setup.method_key(method) if source == "saliency" else None,
        size=size, geometry=f.geometry, label_offset=f.label_offset, num_classes=num_classes,
        model_name=f.model or ("small_cnn" if synthetic else "resnet50"), strategy=f.strategy,
        seed=f.seed, eval_batch_size=f.eval_batch_size, verbose=1, flags_record=record,
        random_mask=f.random_mask,
        num_train=f.num_train_images or known_sizes[0],
        num_eval=f.num_eval_images or known_sizes[1])
    print(f"top-1 {result['top1']:.4f}  top-5 {result['top5']:.4f}  on {result['n_eval']} test "
          f"images ({'KAR' if f.keep_information else 'ROAR'}, {method}, ratio {ratio}); "
          f"wrote {os.path.join(output, 'metrics.json')}")


if __name__ == "__main__":
    define_flags()
    run_main(main)
