"""ROAR / KAR / ROAD retraining: `python -m roar.train --ratio=0.5`.

    python -m roar.train --ratio=0.5                                   # built-in synthetic world
    python -m roar.train --ratio=0.5 --saliency_method=gradient_smooth_2 \\
        --data_dir=saliency/IG_SG_2 --output_dir=runs --dataset_name=imagenet --model=resnet50

Trains a model from scratch on masked images (train and test masked identically, docs/roar.md,
"Masks") with the ROAR recipe (docs/roar.md, "Training"): label smoothing 0.1, Nesterov SGD with
momentum 0.9, a learning rate scaled by batch / 256 with a linear warm-up and step decays, weight
decay where the model has it (resnet50: L2 on every kernel and the head's bias). Smaller models and
shorter schedules by flag. Runs under `tf.distribute` (`--strategy`), keeps an epoch backup so a
killed run resumes, logs to TensorBoard, shows Keras' progress bar with ETA, evaluates on every test
image and writes `metrics.json` (top-1, top-5, number of test images, all flags) beside the exported
model.
"""
import dataclasses
import os
from typing import TYPE_CHECKING, Any, Mapping, Optional, Sequence

import models
from models.foundation import provenance
from models.foundation.cli import flag_of, option, origin_flags, run_binary
from models.foundation.errors import UserError
from models.foundation.files import ensure_directory, write_json
from models.foundation.lazy import lazy_module
from models.foundation.rules import LABEL_OFFSETS, POSITIVE, at_least
from models.training import distribution, recipes
from models.training.recipes import Recipe, RunOptions, TrainingFlags
from roar import mask_settings, metric_definitions
from roar.mask_settings import MaskConfig

# Loaded on first use: a bad flag is reported before TensorFlow starts (docs/architecture.md).
if TYPE_CHECKING:  # the type checker's view of the same modules
    from models.training import loop as training
    from roar import masked_data
else:
    training = lazy_module("models.training.loop")
    masked_data = lazy_module("roar.masked_data")
if TYPE_CHECKING:  # the type checker's view of the same modules
    from roar import synthetic_setup, tfds_source
    from saliency_gen.data import pipelines, records
else:
    synthetic_setup = lazy_module("roar.synthetic_setup")
    tfds_source = lazy_module("roar.tfds_source")
    pipelines = lazy_module("saliency_gen.data.pipelines")
    records = lazy_module("saliency_gen.data.records")


def run_masked(train_files: Sequence[str], eval_files: Sequence[str],
               config: "masked_data.MaskConfig", read: "masked_data.Records",
               run: RunOptions = RunOptions(), *, output_dir: str, eval_batch_size: int = 256,
               flags_record: Optional[dict] = None, num_train: Optional[int] = None,
               num_eval: Optional[int] = None,
               callbacks: Sequence = ()) -> "training.RunMetrics":
    """One ROAR / KAR run on record files, read as `read` says and trained as `run` says: the
    masked train and test pipelines (`roar.masked_data`) with the same masking, then
    `train_and_evaluate`; returns the metrics. The numbers of train and test records are
    counted (a full read) unless given. The run's origin holds the data listings' digests;
    training that stops on bad data names the first bad record."""
    train_data = masked_data.masked_dataset(train_files, read, config, training=True,
                                            batch_size=run.recipe.batch_size, seed=run.seed)
    eval_data = masked_data.masked_dataset(eval_files, read, config, training=False,
                                           batch_size=eval_batch_size, seed=run.seed)
    size = train_data.element_spec[0].shape[1]
    inputs = {"train_data": provenance.listing_digest(train_files),
              "eval_data": provenance.listing_digest(eval_files)}
    # the data pipeline's settings belong to the origin whoever calls (the side is the run's)
    flags_record = dict(flags_record or {}, **{
        key: value for key, value in dataclasses.asdict(read).items() if key != "size"},
        **masked_data.masking.solver_setting(config.fill))
    try:
        return training.train_and_evaluate(
            train_data, eval_data, run,
            num_train=num_train or pipelines.count_records(train_files),
            num_eval=num_eval or pipelines.count_records(eval_files), size=size,
            output_dir=output_dir, flags_record=flags_record, inputs=inputs, callbacks=callbacks)
    except training.DataError as error:
        source_files = list(train_files) + [p for p in eval_files if p not in train_files]
        found = masked_data.find_bad_record(source_files, read, run.num_classes, size)
        raise UserError(found or str(error)) from None


@dataclasses.dataclass(frozen=True)
class MaskedData:
    """One method's data for ROAR / KAR: its train and test record files, how their maps are
    read (`read`), and the folder its runs go to (`<folder>/<roar|kar>/seed_<seed>`)."""

    train_files: Sequence[str]
    eval_files: Sequence[str]
    read: "masked_data.Records"
    folder: str


class Retraining:
    """ROAR and KAR at `ratio` as a measure (`models.foundation.metric_spec.Measure`): its units
    are the training `seeds`; `score(data)` runs (or reuses, when finished with the same
    origin) one `run_masked` run per (mode, seed), trained as `run` says (its seed replaced by
    the unit's), and gives each mode's test top-1 per seed. `roar.train` runs one such unit."""

    metrics = metric_definitions.RETRAINING

    def __init__(self, ratio: float, seeds: Sequence[int], run: RunOptions):
        self.ratio, self.seeds, self.run = ratio, [int(seed) for seed in seeds], run

    def score(self, data: MaskedData) -> dict:
        """{"ROAR top-1" / "KAR top-1": [one value per seed]}."""
        values: dict[str, list] = {spec.name: [] for spec in self.metrics}
        for keep, mode in ((False, "ROAR"), (True, "KAR")):
            for seed in self.seeds:
                result = run_masked(
                    data.train_files, data.eval_files,
                    MaskConfig(ratio=self.ratio, keep_information=keep, seed=seed), data.read,
                    dataclasses.replace(self.run, seed=seed),
                    output_dir=os.path.join(data.folder, "kar" if keep else "roar",
                                            f"seed_{seed}"))
                values[metric_definitions.RETRAINING_MODES[mode]].append(result["top1"])
        return values


def evaluate_checkpoint(checkpoint: str, eval_files: Sequence[str],
                        config: "masked_data.MaskConfig", read: "masked_data.Records",
                        run: RunOptions = RunOptions(), *, output_dir: str,
                        eval_batch_size: int = 256, num_eval: Optional[int] = None) -> dict:
    """Top-1 / top-5 of a saved model or checkpoint on the masked test records (read as `read`
    says), without training: `checkpoint` is an exported model folder (`models.load`) or a
    Keras weights file of `run.model_name` (a run's backup). Writes
    `<output_dir>/eval_<name>.json`."""
    num_classes, model_name, seed = run.num_classes, run.model_name, run.seed
    if not os.path.exists(checkpoint):
        raise UserError(f"--checkpoint {checkpoint} does not exist")
    is_folder = os.path.isdir(checkpoint)
    if not is_folder and not checkpoint.endswith(".weights.h5"):
        raise UserError(f"--checkpoint {checkpoint} must be a model folder or a .weights.h5 "
                        "file")
    loaded = models.load(checkpoint) if is_folder else None
    data = masked_data.masked_dataset(eval_files, read, config, training=False,
                                      batch_size=eval_batch_size, seed=seed,
                                      space=loaded.preprocessing if loaded else "imagenet")
    model: Any
    if loaded is not None:
        model, model_id = loaded, loaded.model_id
    else:
        side = data.element_spec[0].shape[1]
        model = training.build_model(model_name, num_classes, side,
                                     recipes.own_recipe(run, Recipe))
        try:
            model.load_weights(checkpoint)
        except (ValueError, OSError) as error:
            raise UserError(f"--checkpoint {checkpoint} does not hold {model_name} weights for "
                            f"{num_classes} classes at {side} px ({str(error).splitlines()[0]})"
                            ) from None
        model_id = provenance.listing_digest([checkpoint])

    def check_classes(classes):
        if classes != num_classes:
            raise UserError(f"--checkpoint {checkpoint} has {classes} classes, not "
                            f"{num_classes}; check --num_classes or --dataset_name")

    top1, top5, count = training.top_k_accuracy(model, data, 5, check_classes)
    if num_eval is not None and count != num_eval:
        raise UserError(f"evaluation saw {count} test images, expected {num_eval}")
    result = {"top1": top1, "top5": top5, "n_eval": count,
              "checkpoint": os.path.abspath(checkpoint), "model_id": model_id}
    name = os.path.basename(os.path.normpath(checkpoint)).replace(".weights.h5", "")
    path = os.path.join(ensure_directory(output_dir), f"eval_{name}.json")
    write_json(path, result, indent=2, sort_keys=True)
    print(f"top-1 {result['top1']:.4f}  top-5 {result['top5']:.4f}  on {count} test images "
          f"(evaluation only); wrote {path}")
    return result


# ----------------------------------------------------------------------------------------------
# The binary.

DATASETS = {"imagenet": 1000, "food_101": 101, "birdsnap": 500, "synthetic": 10}
# (train, test) images of the paper's datasets (docs/roar.md, "Training"): no full read to count
# them.
DATASET_SIZES = {"imagenet": (1281167, 50000), "food_101": (75750, 25250),
                 "birdsnap": (47386, 2443)}


@dataclasses.dataclass(frozen=True)
class Config(TrainingFlags):
    """roar.train's options (one flag each; the training flags shared with the other trainers
    first), checked when built."""

    ratio: Optional[float] = flag_of(MaskConfig, "ratio", None)  # (required but for raw_image)
    transformation: str = option(
        "modified_image",
        'Mask by a saliency map (or the oracle), by a random map, or not at all.',
        ["modified_image", "random_baseline", "raw_image"])
    saliency_method: Optional[str] = option(
        None,
        'The map: a record key or generator code (e.g. gradient_smooth_2 or SH_SG_2), any '
        "saliency_gen method name or 'package.module:function' (on the synthetic world its "
        "records are generated), or 'oracle' (the records' object masks). Default: "
        'gradient_image on the synthetic world, else ig_smooth_2.')
    random_mask: str = option(
        "fixed",
        'Random baseline: one map per image (default), or re-drawn every epoch as the '
        'original (evaluation then uses the fixed draw).',
        ["fixed", "per_read"])
    # The mask settings, declared once (roar.mask_settings).
    keep_information: bool = flag_of(MaskConfig, "keep_information")
    fill: str = flag_of(MaskConfig, "fill")
    ranking: str = flag_of(MaskConfig, "ranking")
    squared_value: bool = flag_of(MaskConfig, "squared")
    tie_break: str = flag_of(MaskConfig, "tie_break")
    road_noise: float = flag_of(MaskConfig, "road_noise")
    cg_tol: float = flag_of(MaskConfig, "cg_tol")
    cg_max_iters: int = flag_of(MaskConfig, "cg_max_iters")
    data_dir: Optional[str] = option(
        None,
        "Folder of the method's saliency records, or of image records for "
        'random/oracle/raw runs. Default: the built-in synthetic world (set up once in a '
        'cache it names).', origin=False)
    tfds_name: Optional[str] = option(
        None,
        'Read a tensorflow-datasets dataset instead: its splits are converted once to '
        'image records in <output_dir>/tfds/<name> (for random, oracle-free and raw runs, '
        'or to generate saliency records from).', origin=False)
    tfds_train_split: str = option("train", 'tensorflow-datasets training split.', origin=False)
    tfds_eval_split: str = option("test", 'tensorflow-datasets test split.', origin=False)
    tfds_data_dir: Optional[str] = option(None, 'tensorflow-datasets data directory.', origin=False)
    train_pattern: str = option("train-*", 'Training shards in --data_dir.', origin=False)
    eval_pattern: str = option("validation-*", 'Test shards in --data_dir.', origin=False)
    dataset_name: Optional[str] = option(
        None,
        'Sets --num_classes (default: synthetic without --data_dir, else imagenet).',
        tuple(DATASETS))
    num_classes: Optional[int] = option(None, 'Number of classes (default: by dataset).',
                                        origin="num_classes", rule=at_least(1))
    label_offset: int = option(0, 'Added to image-record labels (TF-slim ImageNet: -1).',
                              rule=LABEL_OFFSETS)
    geometry: str = option(
        "none",
        "none: images are already the model's size; center_crop: ROAR's crop_224.",
        ["none", "center_crop"])
    image_size: Optional[int] = option(
        None,
        "Model input side (default: the maps', or 64 for the synthetic world, 224 "
        'otherwise).', origin="size", rule=at_least(1))
    output_dir: str = option("roar_runs", 'Root of the run folders.', origin=False)
    model: Optional[str] = option(
        None,
        'Registered model (default: small_cnn on the synthetic world, resnet50 '
        'otherwise).', origin="model")
    seed: int = option(0, 'Seed of initialisation, order, masks and noise.')
    epochs: Optional[float] = option(None, 'Training epochs (synthetic default 4, else 90).',
                                     origin="epochs", rule=POSITIVE)
    batch_size: Optional[int] = option(None, 'Global training batch (synthetic 64, else 256).',
                                       origin="batch_size", rule=at_least(1))
    optimizer: Optional[str] = option(
        None,
        'Nesterov SGD (the recipe; default off the synthetic world) or Adam.',
        recipes.OPTIMIZERS, origin="optimizer")
    base_learning_rate: Optional[float] = option(
        None,
        'Learning rate at batch 256 (scaled by batch / 256). Synthetic: 0.004 (Adam), '
        'else 0.1 (SGD).', origin="base_learning_rate")
    weight_decay: float = option(1e-4, 'L2 weight decay (resnet50).', origin="weight_decay")
    warmup_epochs: Optional[float] = option(None, 'Linear warm-up (synthetic 1, else 5).',
                                            origin="warmup_epochs")
    lr_decay_epochs: Optional[tuple] = option(
        None,
        'Epochs of the x0.1 steps (synthetic: 3; else 30,60,80).', origin="decay_epochs")
    eval_batch_size: int = option(256, 'Evaluation batch.', origin=False, rule=at_least(1))
    num_train_images: Optional[int] = option(
        None,
        "Training records (default: the paper's count for imagenet / food_101 / birdsnap, "
        'else counted).', origin="num_train", rule=at_least(1))
    num_eval_images: Optional[int] = option(
        None,
        'Test records (as above); evaluation checks that it saw exactly this many.',
        origin="num_eval", rule=at_least(1))
    overwrite: bool = option(
        False, 'Replace a run folder made with other settings or data instead of stopping.',
        origin=False)
    train_crop: str = option("none", "Training augmentation before the flip: none, or ROAR's "
                             "Inception-style random crop (for 224-px real data).",
                             ("none", "inception"))


def check_flags(f: Config) -> None:
    """What the options' own rules cannot say (they are checked when the config is built):
    a ratio is needed unless the images stay raw."""
    if f.transformation != "raw_image" and f.ratio is None:
        raise UserError("--ratio is required (the fraction of features replaced)")


PRESETS = {"synthetic": recipes.SYNTHETIC_RECIPE, "real": recipes.REAL_RECIPE}


def recipe_from_flags(f: Config, synthetic: bool) -> Recipe:
    """The recipe: the synthetic or real preset with the options the user set; one x0.1 step
    per decay epoch."""
    recipe = recipes.with_overrides(
        PRESETS["synthetic" if synthetic else "real"], epochs=f.epochs, batch_size=f.batch_size,
        optimizer=f.optimizer, base_learning_rate=f.base_learning_rate,
        warmup_epochs=f.warmup_epochs, weight_decay=f.weight_decay,
        decay_epochs=None if f.lr_decay_epochs is None else tuple(
            float(e) for e in f.lr_decay_epochs))
    multipliers = tuple(0.1 ** (k + 1) for k in range(len(recipe.decay_epochs)))
    return recipes.with_overrides(recipe, decay_multipliers=multipliers)


def run_directory(output_dir: str, transformation: str, ratio: float, method: Optional[str],
                  keep: bool, ranking: str, fill: str, seed: int) -> str:
    """`<output_dir>/<transformation>/<ratio>/<method>/<keep|remove>/<ranking>-<fill>/seed_<s>`."""
    return os.path.join(output_dir, transformation, f"{ratio:.2f}", method or "none",
                        "keep" if keep else "remove", f"{ranking}-{fill}", f"seed_{seed}")


def _method_and_control(f: Config, synthetic: bool) -> tuple:
    """(saliency method or None, control or None) of the run's flags: the transformation's
    control ("random", "none") or the oracle's, else the method's maps (default: the synthetic
    world's gradient maps, ImageNet's IG-SG²)."""
    method: Optional[str] = f.saliency_method or ("gradient_image" if synthetic else "ig_smooth_2")
    if f.transformation == "random_baseline":
        return "random", "random"
    if f.transformation == "raw_image":
        return None, "none"
    return method, "oracle" if method == "oracle" else None


def _data_source(f: Config, synthetic: bool, method: Optional[str],
                 control: Optional[str]) -> tuple:
    """(records folder, number of classes): a TFDS data set written as image records, the
    synthetic world's records or maps (made if missing), or --data_dir."""
    dataset_name = f.dataset_name or ("synthetic" if synthetic else "imagenet")
    num_classes = f.num_classes or DATASETS[dataset_name]
    if f.tfds_name:
        data_dir = os.path.join(f.output_dir, "tfds", f.tfds_name)
        for split, prefix in ((f.tfds_train_split, "train"), (f.tfds_eval_split, "validation")):
            tfds_source.tfds_to_records(f.tfds_name, split, data_dir, prefix, f.tfds_data_dir)
        num_classes = f.num_classes or tfds_source.tfds_num_classes(f.tfds_name,
                                                                    f.tfds_data_dir)
        if control is None:
            raise UserError(f"--tfds_name gives images only; generate saliency records from "
                            f"{data_dir} with saliency_gen.generate and pass --data_dir")
        return data_dir, num_classes
    if f.data_dir is None:
        setup = synthetic_setup.prepare(seed=0, method=method if control is None else None)
        return setup["saliency"] if control is None else setup["records"], num_classes
    return f.data_dir, num_classes


def run(config: Config, verbose: int = 1) -> Mapping[str, Any]:
    """One ROAR / KAR run with `config`; prints the run folder and the result line and returns
    the metrics (also written to `<run folder>/metrics.json`). `verbose=0` hides Keras'
    per-step progress bar (a caller with its own bar over many runs)."""
    f = config
    check_flags(f)
    # A multi-worker strategy (and logical CPUs) must exist before TensorFlow runs anything.
    distribution.start(f.strategy if f.mode == "train" else "default", f.cpu_replicas)
    # The small-model defaults apply to the synthetic world.
    synthetic = (f.data_dir is None and not f.tfds_name) or f.dataset_name == "synthetic"
    transformation = f.transformation
    # (check_flags: a ratio is given unless the transformation is raw_image)
    ratio = 0.0 if transformation == "raw_image" or f.ratio is None else f.ratio
    method, control = _method_and_control(f, synthetic)
    size = f.image_size or (synthetic_setup.IMAGE_SIZE if f.data_dir is None and not f.tfds_name
                            else None)
    data_dir, num_classes = _data_source(f, synthetic, method, control)
    mask = mask_settings.mask_config(f, ratio=ratio)  # (its seed: --seed, as the run's)
    recipe = recipe_from_flags(f, synthetic)
    train_files = masked_data.list_shards(os.path.join(data_dir, f.train_pattern),
                                          "--train_pattern")
    eval_files = masked_data.list_shards(os.path.join(data_dir, f.eval_pattern), "--eval_pattern")
    source = "images" if control else "saliency"
    known_sizes = DATASET_SIZES.get(f.dataset_name or "", (None, None))  # only when named
    output = run_directory(f.output_dir, transformation, ratio, method, f.keep_information,
                           f.ranking, f.fill, f.seed)
    if verbose:
        print(f"ROAR run -> {output}")
    # every flag that changes results (docs/architecture.md, "Outputs and provenance"), then
    # the resolved masking, method and ratio
    record = provenance.with_code(
        {**origin_flags(f), **dataclasses.asdict(mask), "saliency_method": method,
         "ratio": ratio}, records.manifest_code(data_dir) if source == "saliency" else {})
    options = f.run_options(
        model_name=f.model or ("small_cnn" if synthetic else "resnet50"),
        num_classes=num_classes, recipe=recipe, seed=f.seed, overwrite=f.overwrite,
        verbose=verbose)
    read = masked_data.Records(
        source, control,
        map_key=masked_data.record_key_of(method) if source == "saliency" and method else None,
        size=size, geometry=f.geometry, label_offset=f.label_offset, random_mask=f.random_mask,
        train_crop=f.train_crop)
    if f.mode == "eval" and f.checkpoint:  # (TrainingFlags: eval needs a checkpoint)
        return evaluate_checkpoint(
            f.checkpoint, eval_files, mask, read, options, output_dir=output,
            eval_batch_size=f.eval_batch_size, num_eval=f.num_eval_images or known_sizes[1])
    result = run_masked(
        train_files, eval_files, mask, read, options, output_dir=output,
        eval_batch_size=f.eval_batch_size, flags_record=record,
        num_train=f.num_train_images or known_sizes[0],
        num_eval=f.num_eval_images or known_sizes[1])
    if "stopped_after_epoch" in result:
        print(training.stopped_message(result["stopped_after_epoch"],
                                       os.path.join(output, "backup")))
        return result
    if verbose:
        print(f"top-1 {result['top1']:.4f}  top-5 {result['top5']:.4f}  on {result['n_eval']} "
              f"test images ({'KAR' if f.keep_information else 'ROAR'}, {method}, ratio "
              f"{ratio}); wrote {os.path.join(output, 'metrics.json')}")
    return result


if __name__ == "__main__":
    run_binary(Config, run)
