"""One report card for saliency methods across the benchmarks (docs/report_card.md).

    python scripts/report_card.py                         # the synthetic world, default methods
    python scripts/report_card.py --pretrained=efficientnet_lite0   # a real network, 20 photos
    python scripts/report_card.py --methods=bam:GC,random,my_package.methods:my_map
    python scripts/report_card.py --model_path=runs/clean/model --input_pattern='val-*' \\
        --data_dir=bam_data --bam_model_dir=bam_models --nr_images=500 --num_imgs=200

The thin entry point: it parses the flags, asks bam/ and faithfulness/ for their benchmarks
(`bam.card`, `faithfulness.card`), and leaves the cells, intervals, ranks, agreement and pages to
`models.report.card_engine` and `models.report.pages`. Cells are cached under --output_dir, so
a killed card resumes and one more method costs only that method.
"""
import atexit
import dataclasses
import functools
import os
import shutil
import tempfile
import time
from typing import TYPE_CHECKING, Any, Callable, Optional

import numpy as np

import models  # noqa: I001  (first: TensorFlow loads quietly)
import saliency_gen
from faithfulness import card as faithfulness_card
from faithfulness import evaluate
from models.foundation import cluster, progress, provenance, results, workload
from models.foundation.cli import flag_arguments, flag_of, option, origin_flags, run_binary
from models.foundation.errors import UserError, require_both_or_neither
from models.foundation.files import exclusive
from models.foundation.lazy import lazy_module
from models.foundation.rules import (
    PRECISIONS,
    UNIQUE,
    WHOLE_PERCENTS,
    Checked,
    at_least,
    some,
    some_of,
)
from models.report import card_engine, meta_evaluation, pages
from saliency_gen.attribution import transforms

# Loaded on first use: --help and a bad flag are answered before TensorFlow starts
# (docs/architecture.md, "Light imports").
if TYPE_CHECKING:  # the type checker's view of the same modules
    from bam import card as bam_card
    from bam import synthetic_setup
    from faithfulness import randomisation
    from models.architectures import zoo
    from models.formats import exporting, preprocessing, pretrained
    from roar import card as roar_card
    from saliency_gen.attribution import names
    from saliency_gen.data import pipelines, records
    from saliency_gen.data.sources import photos
    from saliency_gen.data.world import cache, dataset
else:
    bam_card = lazy_module("bam.card")
    synthetic_setup = lazy_module("bam.synthetic_setup")
    randomisation = lazy_module("faithfulness.randomisation")
    zoo = lazy_module("models.architectures.zoo")
    exporting = lazy_module("models.formats.exporting")
    pretrained = lazy_module("models.formats.pretrained")
    preprocessing = lazy_module("models.formats.preprocessing")
    roar_card = lazy_module("roar.card")
    names = lazy_module("saliency_gen.attribution.names")
    pipelines = lazy_module("saliency_gen.data.pipelines")
    records = lazy_module("saliency_gen.data.records")
    photos = lazy_module("saliency_gen.data.sources.photos")
    cache = lazy_module("saliency_gen.data.world.cache")
    dataset = lazy_module("saliency_gen.data.world.dataset")

BAM_METHODS = ("bam:GC", "bam:VG", "bam:SG", "bam:IG", "bam:IG-SG", "bam:GxI", "bam:GB",
               "bam:GGC")
# Controls: the random map and the object mask, and maps that ignore the model (a centre
# Gaussian, Sobel edges, a constant): they test the metrics more than the methods.
MODEL_FREE = ("centre_gaussian", "sobel", "constant")
CONTROLS = ("random", card_engine.ORACLE, *MODEL_FREE)
# The meta-evaluation's perturbations (docs/report_card.md, "Resilience and reactivity"), each
# minor or disruptive: Gaussian noise of sd MINOR_NOISE (a fraction of the images' value range)
# added to the images; every trainable weight multiplied by 1 + Gaussian noise of sd
# WEIGHT_NOISE (MetaQuantus's model resilience test), maps and scores by that model; the maps of
# the model with every weighted layer re-initialised.
SANITY_IMAGES = 16  # the images of the randomisation check (the first ones)
MINOR_NOISE = 0.01
WEIGHT_NOISE = 0.001
PERTURBATIONS = {"input noise": "minor", "weight noise": "minor",
                 "randomised-model maps": "disruptive"}
# Beside them, every card runs its image-level benchmarks on the same first images with each
# method's maps blurred (saliency_gen.attribution.transforms.blur): the "rewards blur" verdict of
# each metric without --blur_controls' full blur(m) rows (which about double the image-level cost).
BLURRED = "blurred maps"
# The free choices of each protocol that its literature varies (docs/report_card.md, "How far
# to trust each metric"): (label, changed evaluate.Options); QUARTER: a quarter of the steps.
QUARTER = "quarter"
VARIANTS = {
    "Deletion": (("blur substrate", {"data_replace_method": "blur"}),
                 ("a quarter of the steps", {"max_step_nb": QUARTER})),
    "Insertion": (("black substrate", {"data_replace_method": "black"}),
                  ("a quarter of the steps", {"max_step_nb": QUARTER})),
    "IIC/AD": (("blur substrate", {"data_replace_method": "blur"}),),
    "ADD": (("blur substrate", {"data_replace_method": "blur"}),),
    "IDSDS": (("blur baseline", {"sd_baseline": "blur"}),
              ("random baseline", {"sd_baseline": "random"})),
    "ROAD": (("mean-colour imputer", {"imputer": "mean"}),
             ("three fractions", {"ratios": (0.1, 0.5, 0.9)})),
}
# The real network's default: BAM's methods but IG-SG (625 gradients per image), and random.
REAL_METHODS = ("bam:GC", "bam:VG", "bam:SG", "bam:IG", "bam:GxI", "bam:GB", "bam:GGC", "random",
                *MODEL_FREE)
# the image shape at which a BAM-only card estimates its methods' passes per image (progress
# only; BAM's original images are 224 px)
BAM_SHAPE = (224, 224, 3)
BAM_NEEDS_ITS_DATA = ("BAM: not run on a pretrained network and photos: BAM needs its own data "
                      "set (objects pasted into scenes, and models trained on it to know which "
                      "pixels matter); see docs/bam.md")
BENCHMARKS = ("BAM", "ROAD", *faithfulness_card.PROTOCOLS)
# --benchmarks may name a family of the peers' measures for all of them
BENCHMARK_CHOICES = (*BENCHMARKS, *faithfulness_card.FAMILIES)
DEFAULT_BENCHMARKS = ("BAM", "ROAD", *faithfulness_card.DEFAULT)


@dataclasses.dataclass(frozen=True)
class Config(cluster.ClusterOptions, Checked):
    """The card's options (one flag each), checked when built; with a Dask cluster named, its
    (benchmark, method) cells are computed as tasks there (`cells_on_cluster`)."""

    methods: Optional[tuple] = option(
        None, "Methods: saliency_gen names, registered methods, 'package.module:function', and "
        "the controls " + ", ".join(CONTROLS) + " (default: the eight BAM methods and the "
        "controls; with --pretrained: " + ",".join(REAL_METHODS) + ").",
        rule=(some("method"), UNIQUE))
    pretrained: Optional[str] = option(
        None, "Run on a real pretrained network and the 20 real ImageNet photos instead "
        "(docs/real_model.md); BAM's columns stay empty.", choices=tuple(pretrained.PRETRAINED))
    benchmarks: tuple = option(DEFAULT_BENCHMARKS, "Benchmarks to run: " + ", ".join(BENCHMARKS)
                               + ", or a family of the peers' measures ("
                               + ", ".join(faithfulness_card.FAMILIES) + ") for all of its "
                               "measures (ROAR/KAR retraining: --retraining).",
                               rule=some_of(BENCHMARK_CHOICES, "benchmark"))
    model_path: Optional[str] = option(None, "Classifier for the faithfulness protocols "
                                       "(default: the synthetic world's clean small_cnn).")
    input_pattern: Optional[str] = option(None, "Its image TFRecords (default: the synthetic "
                                          "world's validation records).")
    nr_images: int = option(64, "Images for the faithfulness protocols.", rule=at_least(1))
    data_dir: Optional[str] = option(None, "BAM data root (default: the synthetic world).")
    bam_model_dir: Optional[str] = option(None, "BAM models obj/, scene/, scene_only/.")
    num_imgs: int = option(50, "Images sampled per BAM metric.", rule=at_least(1))
    max_step_nb: int = flag_of(evaluate.Options, "max_step_nb", 64)
    batch_size: int = option(32, "Work items per model call.", rule=at_least(1))
    seed: int = option(0, "Seed of the image samples, the random draws and the bootstrap.")
    precision: str = option(
        "float32", "Compute precision of the classifier the image-level benchmarks explain and "
        "score (its maps, scores, the randomisation check and the meta-evaluation): mixed "
        "precision computes in bfloat16 / float16 with the float32 weights; BAM's own models "
        'stay float32 (docs/models.md, "Precision").', PRECISIONS)
    output_dir: Optional[str] = option(None, "Where the cells and the card go (default: "
                                       "report_card, or report_card_<--pretrained>).",
                                       origin=False)
    cache_dir: Optional[str] = option(None, "Cache of the synthetic world.", origin=False)
    train_models: bool = option(False, "Train the synthetic world's models on this machine "
                                "instead of loading the weights shipped with the package.")
    overwrite: bool = option(False, "Recompute cells made with other settings.", origin=False)
    rmcs: bool = option(False, "Add BAM's RMCS (trains the ten relative scene models once on "
                        "the synthetic world).")
    retraining: bool = option(False, "Add ROAR / KAR retraining at --retraining_ratio (costly: "
                              "maps of every record and 2 trainings per seed and method).")
    retraining_ratio: float = option(0.5, "Fraction replaced (ROAR) or kept (KAR).",
                                     rule=WHOLE_PERCENTS)
    retraining_seeds: tuple = option(("0", "1", "2"), "Training seeds: the units of its "
                                     "intervals.")
    sanity: bool = option(True, "Add the cascading model-randomisation check (needs a zoo "
                          "model export).")
    gallery_images: int = option(4, "Images in the map gallery (0: none).", rule=at_least(0))
    variants: bool = option(False, "Run the faithfulness protocols again under the settings "
                            "their literature varies (substrate, step count, baseline) and show "
                            "how far each metric's ranking moves (costs one run per variant).")
    blur_controls: bool = option(False, "Add blur(<method>) rows for each method but the "
                                 "controls: its maps smoothed by a Gaussian of sigma = image "
                                 "side / 32, on every image (image-level benchmarks only; about "
                                 "doubles their cost). Without them, the meta-evaluation judges "
                                 "'rewards blur' on its first --meta_images images.")
    meta_evaluation: bool = option(True, "Judge each image-level metric by its resilience to "
                                   "input and weight noise, its reactivity to a randomised "
                                   "model's maps (MetaQuantus) and whether it rewards blurred "
                                   "maps: those benchmarks again on the first --meta_images "
                                   "images, four times, without the controls.")
    meta_images: int = option(16, "Images of the meta-evaluation's perturbed runs.",
                              rule=at_least(1))
    cells_only: bool = option(False, "Compute the cells of --benchmarks x --methods and stop "
                              "(what one Dask task of the card does).", origin=False)


@dataclasses.dataclass(frozen=True)
class ResolvedConfig(Config):
    """A card's config with its defaults filled in (`resolved`): what the rest of the card
    reads, so that a flag left to its default is never read as unset."""

    methods: tuple = flag_of(Config, "methods", ())
    output_dir: str = flag_of(Config, "output_dir", "report_card")


def resolved(config: Config) -> ResolvedConfig:
    """`config` with its defaults filled in: the methods, the output folder, and with
    --pretrained the network's export and the photos' records."""
    if config.pretrained and (config.model_path or config.data_dir):
        raise UserError("--pretrained brings its own model and photos; leave out --model_path, "
                        "--input_pattern, --data_dir and --bam_model_dir")
    methods = config.methods
    if methods is None:
        methods = REAL_METHODS if config.pretrained else BAM_METHODS + CONTROLS
    if config.blur_controls:
        methods = (*methods, *(card_engine.blurred(m) for m in methods
                               if m not in CONTROLS and card_engine.unblurred(m) is None))
    values = {field.name: getattr(config, field.name) for field in dataclasses.fields(Config)}
    chosen = [name for benchmark in config.benchmarks  # a family: each of its measures
              for name in faithfulness_card.FAMILIES.get(benchmark, (benchmark,))]
    values.update(benchmarks=tuple(dict.fromkeys(chosen)))
    values.update(methods=tuple(methods), output_dir=config.output_dir or (
        f"report_card_{config.pretrained}" if config.pretrained else "report_card"))
    if config.pretrained:
        values.update(model_path=pretrained.export_path(config.pretrained),
                      input_pattern=photos.photo_records("imagenet"))
    return ResolvedConfig(**values)


def resolved_methods(config: ResolvedConfig) -> dict:
    """{method: its `saliency_gen.attribution.names.Resolved`} of every method the card explains
    (not the oracle; a blur control uses its method's), resolved once for the whole run and passed
    to every benchmark: an unknown name stops here, before any work, with one line."""
    found = {}
    for method in config.methods:
        plain = card_engine.unblurred(method) or method
        if plain != method and plain == card_engine.ORACLE:
            raise UserError(f"--methods: {method}: the oracle is the objects' masks, not a "
                            "method's maps; blur(m) takes a method m")
        if plain != method and card_engine.unblurred(plain):
            raise UserError(f"--methods: {method}: a blur control is blurred once; name {plain}")
        if plain != card_engine.ORACLE and plain not in found:
            found[plain] = names.resolved(plain)
    return found


def method_code(config: ResolvedConfig, methods: dict) -> dict:
    """{method: digests of its user code} for every card method (a blur control: its method's),
    part of each cell's origin: a cell of an edited method is recomputed."""
    return {method: methods[card_engine.unblurred(method) or method].code_origin
            for method in config.methods if (card_engine.unblurred(method) or method) in methods}


def check_flags(config: ResolvedConfig) -> None:
    """What the options' own rules cannot say (they are checked when the config is built):
    the flags that go together."""
    if config.retraining and not config.retraining_seeds:
        raise UserError("--retraining_seeds names no seed")
    if config.pretrained and not config.sanity and set(config.benchmarks) <= {"BAM"}:
        raise UserError(f"nothing to run on --pretrained={config.pretrained}: {BAM_NEEDS_ITS_DATA}"
                        "; name other --benchmarks (ROAD, Deletion, ...) or keep --sanity")
    require_both_or_neither(("model_path", config.model_path),
                            ("input_pattern", config.input_pattern))
    require_both_or_neither(("data_dir", config.data_dir),
                            ("bam_model_dir", config.bam_model_dir))


@dataclasses.dataclass
class CardImages:
    """The classifier and images the image-level benchmarks share."""

    model_path: str
    loaded: Any  # a `models.LoadedModel`
    images: np.ndarray
    labels: np.ndarray
    ids: np.ndarray
    masks: Optional[np.ndarray]  # object masks [N, H, W] for the oracle, or None
    data: dict
    pattern: str
    methods: dict  # the run's resolved methods (`resolved_methods`)
    maps_of: Any = None  # method -> its maps of `images`, computed once per card run
    map_set: str = "card images"  # what `maps_of` computes, for the progress bar's estimate
    # a Keras model of the same network whose weights `loaded` holds in this set's cells
    # (`LoadedModel.holding`), so that the traces kept with `loaded` serve it, and the model id
    # its export would record (`exporting.content_id`), which these cells' origin names
    weights_of: Any = None
    weights_id: Optional[str] = None

    def explains(self, own: tuple = ()) -> tuple:
        """`Benchmark.explains` of a benchmark taking its maps from `maps_of`, besides `own`."""
        return ((self.map_set, len(self.images)), *own)


def map_memo(loaded, images, labels, ids, methods: dict, seed: int, batch_size: int,
             preprocessing: Optional[str] = None):
    """`maps_of(method)`: the method's maps of `images` (explaining `labels`) by its resolved
    spec in `methods`, computed the first time a benchmark asks and shared by every image-level
    benchmark and the gallery; `blur(m)` is m's maps smoothed
    (saliency_gen.attribution.transforms.blur). `maps_of(method, count)`: the maps of the first
    `count` images, explaining only those while the method's maps of all are not computed (a
    card whose cells are all cached shows its gallery without explaining every image again).
    `preprocessing` names the input space of a Keras model (a loaded export knows its own)."""
    found: dict = {}  # (method, images explained) -> maps

    def maps_of(method, count=None):
        wanted = len(images) if count is None else min(count, len(images))
        explained = len(images) if (method, len(images)) in found else wanted
        if (method, explained) not in found:
            plain = card_engine.unblurred(method)
            found[method, explained] = transforms.blur(maps_of(plain, explained)) if plain else \
                saliency_gen.attribute(loaded, images[:explained], methods[method],
                                       labels[:explained], batch_size=batch_size, seed=seed,
                                       ids=ids[:explained], preprocessing=preprocessing)
        return found[method, explained][:wanted]

    return maps_of


def load_inputs(config: ResolvedConfig, methods: dict) -> CardImages:
    """The given or the synthetic world's classifier and its first --nr_images images."""
    if config.model_path is None or config.input_pattern is None:  # (check_flags: both or none)
        model_path = cache.clean_model(seed=0, folder=config.cache_dir, log=lambda *_: None,
                                       shipped=not config.train_models)
        pattern = os.path.join(cache.records_dir(0, config.cache_dir, lambda *_: None),
                               "validation-*")
    else:
        model_path, pattern = config.model_path, config.input_pattern
    precision_folder = os.path.join(config.cache_dir, "precision") if config.cache_dir else None
    loaded = models.load(exporting.export_in_precision(model_path, config.precision,
                                                       precision_folder))
    localising = any(name in faithfulness_card.MASKED
                     for name in config.benchmarks)
    with_masks = localising or card_engine.ORACLE in config.methods and (
        "ROAD" in config.benchmarks or config.gallery_images > 0)
    try:
        images, labels, ids, *masks = pipelines.load_images(
            pattern, loaded, config.nr_images, config.seed, with_masks=with_masks)
    except UserError as error:
        if not with_masks or "object mask" not in str(error):
            raise
        print(f"note: {pattern} has no object masks, so ROAD runs no oracle and the "
              "localisation measures' cells are blank")
        images, labels, ids, *masks = pipelines.load_images(pattern, loaded, config.nr_images,
                                                            config.seed)
    data = {"data": provenance.listing_digest(records.list_files(pattern)),
            "nr_images": config.nr_images,
            # (float32 leaves the key out: cells made before --precision stay valid)
            **({} if config.precision == "float32" else {"precision": config.precision})}
    return CardImages(model_path, loaded, images, labels, ids, masks[0] if masks else None, data,
                  pattern, methods, map_memo(loaded, images, labels, ids, methods, config.seed,
                                             config.batch_size))


def _given(inputs: Optional[CardImages]) -> CardImages:
    """`inputs`, which `run` loads whenever an image-level benchmark or retraining is chosen."""
    if inputs is None:
        raise ValueError("the card's image-level inputs were not loaded")
    return inputs


def protocol_options(config: ResolvedConfig) -> "evaluate.Options":
    """The faithfulness protocols' settings on the card: its step bound, batch and seed, the
    rest at `faithfulness.evaluate`'s defaults."""
    return evaluate.Options(max_step_nb=config.max_step_nb, batch_size=config.batch_size,
                            seed=config.seed)


def _image_level_only(supports: Callable[[str], bool]) -> Callable[[str], bool]:
    """`supports`, but not for the blur controls (maps of the card's images)."""
    return lambda method: supports(method) and card_engine.unblurred(method) is None


def build_benchmarks(config: ResolvedConfig, inputs: Optional[CardImages], methods: dict) -> list:
    """The chosen benchmarks, on the given or the synthetic world's models and data, explaining
    with the run's resolved `methods`."""
    found = []
    if "BAM" in config.benchmarks and config.pretrained:
        print(f"note: {BAM_NEEDS_ITS_DATA}")
    elif "BAM" in config.benchmarks:
        data_dir, model_dir = config.data_dir, config.bam_model_dir
        if data_dir is None or model_dir is None:  # (check_flags: both or neither)
            data_dir, model_dir = synthetic_setup.prepare(config.cache_dir, log=lambda *_: None,
                                                          shipped=not config.train_models)
        found.append(bam_card.benchmark(data_dir, model_dir, num_imgs=config.num_imgs,
                                        seed=config.seed, batch_size=config.batch_size,
                                        methods=methods))
    if config.rmcs:
        data_dir, model_dir = config.data_dir, config.bam_model_dir
        if data_dir is None or model_dir is None:  # (check_flags: both or neither)
            data_dir, model_dir = synthetic_setup.prepare_relative(
                config.cache_dir, log=lambda *_: None, shipped=not config.train_models)
        found.append(bam_card.rmcs_benchmark(data_dir, model_dir, num_imgs=config.num_imgs,
                                             seed=config.seed, batch_size=config.batch_size,
                                             methods=methods))
    if "ROAD" in config.benchmarks:
        inputs = _given(inputs)
        found.append(dataclasses.replace(roar_card.benchmark(
            inputs.loaded, inputs.images, inputs.labels, inputs.ids, inputs.masks,
            data=inputs.data, seed=config.seed, batch_size=config.batch_size,
            maps_of=inputs.maps_of), explains=inputs.explains()))
    protocols = [b for b in config.benchmarks if b in faithfulness_card.PROTOCOLS]
    if protocols:
        shared = _given(inputs)
        for benchmark in faithfulness_card.benchmarks(
                shared.loaded, shared.images, shared.labels, shared.ids, data=shared.data,
                names=protocols, options=protocol_options(config), maps_of=shared.maps_of,
                methods=shared.methods, masks=shared.masks):
            # (`supports`: a localisation measure scores the oracle, without masks nothing)
            found.append(dataclasses.replace(benchmark,
                                             explains=shared.explains(benchmark.explains)))
    order = {name: i for i, name in enumerate(("BAM", "RMCS", *config.benchmarks))}
    found = sorted(found, key=lambda b: order[b.name])
    if config.retraining:
        synthetic = config.model_path is None
        work_dir = (os.path.join(cache.cache_dir(0, config.cache_dir), "card_retraining")
                    if synthetic else os.path.join(config.output_dir, "retraining"))
        inputs = _given(inputs)
        found.append(roar_card.retraining_benchmark(
            inputs.model_path, os.path.dirname(inputs.pattern), work_dir,
            num_classes=inputs.loaded.num_classes, ratio=config.retraining_ratio,
            seeds=tuple(int(s) for s in config.retraining_seeds)))
    # the blur controls are maps of the card's images: the image-level benchmarks only
    image_level = {"ROAD", *faithfulness_card.PROTOCOLS}
    return [benchmark if benchmark.name in image_level else dataclasses.replace(
        benchmark, supports=_image_level_only(benchmark.supports)) for benchmark in found]


def variant_benchmarks(config: ResolvedConfig, inputs: CardImages) -> list:
    """[(variant benchmark, benchmark's card name, variant label)]: each chosen faithfulness
    protocol and ROAD again under each of its `VARIANTS`, cached as cells like the others."""
    base = protocol_options(config)
    found = []
    for name in config.benchmarks:
        for label, changes in VARIANTS.get(name, ()):
            if name == "ROAD":
                benchmark = roar_card.benchmark(
                    inputs.loaded, inputs.images, inputs.labels, inputs.ids, data=inputs.data,
                    seed=config.seed, batch_size=config.batch_size, maps_of=inputs.maps_of,
                    **changes)
            else:
                changed: dict[str, Any] = {
                    key: max(2, base.max_step_nb // 4) if value == QUARTER else value
                    for key, value in changes.items()}
                options = dataclasses.replace(base, **changed)
                [benchmark] = faithfulness_card.benchmarks(
                    inputs.loaded, inputs.images, inputs.labels, inputs.ids, data=inputs.data,
                    names=(name,), options=options, maps_of=inputs.maps_of,
                    methods=inputs.methods)
            found.append((dataclasses.replace(
                benchmark, name=f"{name} [{label}]",
                supports=lambda method: method != card_engine.ORACLE,
                explains=inputs.explains(benchmark.explains)), name, label))
    return found


def sensitivity_section(summary, variants: list, variant_card) -> pages.Section:
    """Kendall's tau between each metric's method ranking under a variant and by default."""
    rows = []
    for benchmark, name, label in variants:
        for metric in benchmark.metrics:
            tau = card_engine.ranking_agreement(
                card_engine.oriented_means(summary, card_engine.column_name(name, metric.name)),
                card_engine.oriented_means(variant_card, card_engine.column_name(
                    benchmark.name, metric.name)))
            rows.append((card_engine.column_name(name, metric.name), label,
                         "n/a" if np.isnan(tau) else f"{tau:+.2f}"))
    return pages.Section(
        "Sensitivity to the metrics' free choices",
        "Kendall's tau between each metric's ranking of the methods with its default settings "
        "and with one setting changed as its literature does (+1: the same ranking, 0: "
        "unrelated, -1: reversed). A metric whose ranking moves with a free choice measures "
        "that choice as much as the maps.",
        ("metric", "variant", "Kendall tau with the default"), tuple(rows))


def perturbed_inputs(config: ResolvedConfig, inputs: CardImages,
                     randomised_maps_of: Callable[[str], np.ndarray]) -> dict:
    """{perturbation: CardImages} of the meta-evaluation (`PERTURBATIONS`) on the first
    --meta_images images: input noise (seeded, sd `MINOR_NOISE` of the value range; the noisy
    images get their own maps), weight noise (the model with noisy weights makes the maps and
    scores them) and the fully randomised model's maps of the unchanged images (scored by the
    trained model; `randomised_maps_of`, of at least these images). The two model
    perturbations are left out, with a note, for a model that cannot be rebuilt from its
    export."""
    count = min(config.meta_images, len(inputs.images))
    inputs = dataclasses.replace(
        inputs, images=inputs.images[:count], labels=inputs.labels[:count],
        ids=inputs.ids[:count], masks=None if inputs.masks is None else inputs.masks[:count])
    images = np.asarray(inputs.images, np.float32)
    sd = MINOR_NOISE * float(images.max() - images.min())
    noisy = images + np.random.default_rng([config.seed, 0x4E01]).normal(
        0.0, sd, images.shape).astype(np.float32)
    found = {}
    if not config.blur_controls:  # (with them, the verdict is on every image)
        plain_maps = inputs.maps_of  # the card's own maps (of all its images), computed once
        found[BLURRED] = dataclasses.replace(
            inputs, data={**inputs.data, "perturbation": "maps blurred"},
            maps_of=functools.cache(  # once per method, shared by the benchmarks
                lambda method: transforms.blur(plain_maps(method)[:count])))
    found["input noise"] = dataclasses.replace(
        inputs, map_set="input noise", images=noisy,
        data={**inputs.data, "perturbation": f"input noise, sd {sd:.4g}"},
        maps_of=map_memo(inputs.loaded, noisy, inputs.labels, inputs.ids, inputs.methods,
                         config.seed,
                         config.batch_size))
    try:
        weight_noise = zoo.in_precision(lambda: models.rebuild(inputs.model_path),
                                        config.precision)
    except UserError as error:
        print(f"note: no resilience to weight noise, no reactivity to a randomised model: "
              f"{error}")
        return found
    randomisation.perturb_weights(weight_noise, WEIGHT_NOISE, config.seed)
    # the card's own loaded model computes with the noisy weights in these cells, so that its
    # traces serve them (a second loaded model meant every method and scorer traced again);
    # an export of them only where it cannot hold them (an export without its variables' list)
    scoring, within = exporting.stand_in(inputs.loaded, weight_noise)
    held = weight_noise if scoring is inputs.loaded else None
    # (a set's model_path is read by the retraining benchmark alone, which this one leaves out)
    noisy_path = inputs.model_path
    if held is None:
        noisy_path = exporting_folder()
        models.export(weight_noise, noisy_path, preprocessing=inputs.loaded.preprocessing)
        scoring = models.load(noisy_path)
    trained = np.argmax(inputs.loaded(images), 1)
    changed = int(np.sum(within(lambda: np.argmax(scoring(images), 1))() != trained))
    print(f"meta-evaluation: the weight noise changes {changed} of {count} predictions")
    found["weight noise"] = dataclasses.replace(
        inputs, map_set="weight noise", loaded=scoring, model_path=noisy_path, weights_of=held,
        weights_id=None if held is None else exporting.content_id(weight_noise),
        data={**inputs.data, "perturbation": f"multiplicative weight noise, sd {WEIGHT_NOISE}"},
        maps_of=within(map_memo(
            scoring, inputs.images, inputs.labels, inputs.ids, inputs.methods, config.seed,
            config.batch_size)))
    found["randomised-model maps"] = dataclasses.replace(
        inputs, map_set="randomised-model maps",
        data={**inputs.data, "perturbation": "maps of the fully randomised model"},
        maps_of=lambda method: randomised_maps_of(method)[:count])
    return found


def held_by(benchmark: card_engine.Benchmark,
            perturbed: CardImages) -> card_engine.Benchmark:
    """`benchmark` of `perturbed`'s images, its cells computed while the card's loaded model
    holds the weights of `perturbed.weights_of`, whose model id (`weights_id`) their origin
    names (as it did when an export of them was scored as a model of its own)."""
    if perturbed.weights_of is None:
        return benchmark
    settings = dict(benchmark.settings)
    if "model_id" in settings:
        settings["model_id"] = perturbed.weights_id
    return dataclasses.replace(benchmark, settings=settings, score=exporting.while_holding(
        perturbed.loaded, perturbed.weights_of, benchmark.score))


def rebuilt_classifier(config: ResolvedConfig, inputs: CardImages) -> Callable[[], Any]:
    """The card's one rebuilt copy of its classifier (Keras, in the card's precision), made on
    first use. The randomisation check cascades it and `fully_randomised_maps` randomises it,
    both in place with the trained weights restored after each method, so every method is
    traced on one randomised model (two copies meant two traces of each)."""
    return functools.cache(lambda: zoo.in_precision(lambda: models.rebuild(inputs.model_path),
                                                    config.precision))


def fully_randomised_maps(config: ResolvedConfig, inputs: CardImages, count: int,
                          rebuilt: Callable[[], Any]) -> Callable[[str], np.ndarray]:
    """`maps_of(method)`: the maps of the first `count` images by the model with every weighted
    layer re-initialised (`randomisation.cascade` to its last step: `randomise_top`'s weights,
    the card's seed), computed once per method by the card's loaded model holding the weights of
    the `rebuilt` copy (whose trained weights are back afterwards), so that the methods' traces
    on the loaded model serve them (or by the copy, where the export cannot hold them). They are
    the meta-evaluation's disruptive maps and the sanity check's last stage (the same weights,
    images, targets and keys: the same bytes), so a card with both computes them once."""
    memo: dict = {}

    @functools.cache
    def explainer():  # (made once)
        explaining, within = exporting.stand_in(inputs.loaded, rebuilt())
        return within(map_memo(
            explaining, inputs.images[:count],
            inputs.labels[:count], inputs.ids[:count], inputs.methods, config.seed,
            config.batch_size, inputs.loaded.preprocessing))

    def maps_of(method: str) -> np.ndarray:
        if method not in memo:
            model = rebuilt()
            last = len(randomisation.weighted_layers(model)) - 1
            steps = randomisation.cascade(model, "top_down", config.seed, [last])
            next(steps)  # every weighted layer re-initialised
            try:
                memo[method] = explainer()(method)
            finally:
                steps.close()  # the trained weights back
        return memo[method]

    return maps_of


def exporting_folder() -> str:
    """A fresh path in a temporary folder removed when the process ends."""
    folder = tempfile.mkdtemp(prefix="report-card-")
    atexit.register(shutil.rmtree, folder, True)
    return os.path.join(folder, "model")


def judged_by_meta_evaluation(method: str) -> bool:
    """The methods the meta-evaluation perturbs: not the controls, not the blur controls."""
    return method not in CONTROLS and card_engine.unblurred(method) is None


def perturbed_benchmark(benchmark: card_engine.Benchmark, label: str,
                        perturbed: CardImages) -> card_engine.Benchmark:
    """`benchmark` of the perturbation `label`'s inputs as the meta-evaluation runs it: named
    "<benchmark> [<label>]", held by `perturbed`'s weights (`held_by`), for the methods the
    meta-evaluation judges that the benchmark supports (no localisation without masks)."""
    return dataclasses.replace(
        held_by(benchmark, perturbed), name=f"{benchmark.name} [{label}]",
        supports=lambda method: judged_by_meta_evaluation(method) and benchmark.supports(method))


def meta_benchmarks(config: ResolvedConfig, inputs: CardImages,
                    randomised_maps_of: Callable[[str], np.ndarray]) -> dict:
    """{perturbation: {benchmark name: benchmark}}: the image-level benchmarks again on each
    perturbation's inputs, named "<benchmark> [<perturbation>]" and cached as cells
    (`randomised_maps_of`: `fully_randomised_maps`)."""
    image_level = dataclasses.replace(
        config, benchmarks=tuple(b for b in config.benchmarks if b != "BAM"), rmcs=False,
        retraining=False)
    return {label: {benchmark.name: perturbed_benchmark(benchmark, label, perturbed)
                    for benchmark in build_benchmarks(image_level, perturbed, perturbed.methods)}
            for label, perturbed in perturbed_inputs(config, inputs,
                                                     randomised_maps_of).items()}


def meta_evaluate(summary, benchmarks: list, meta: dict, cells: dict) -> None:
    """Adds each image-level metric's resilience, reactivity and MC (models.report.meta_evaluation)
    to `summary.trust`, over the methods the perturbations judge; the disruptive perturbations
    are the randomised model's maps and, when the card has the random control, random maps
    (its cells: no extra run). Without --blur_controls, each metric's "rewards blur" verdict
    compares the blurred-maps run with the same images' own values."""
    methods = [m for m in summary.methods if judged_by_meta_evaluation(m)]
    for benchmark in benchmarks:
        perturbed = {label: meta.get(label, {}).get(benchmark.name) for label in PERTURBATIONS}
        for metric in benchmark.metrics:
            column = card_engine.column_name(benchmark.name, metric.name)
            default = card_engine.unit_table(cells, benchmark.name, metric.name, methods)
            if column not in summary.trust or default is None:
                continue
            blurred = card_engine.unit_table(cells, f"{benchmark.name} [{BLURRED}]", metric.name,
                                        methods)
            if summary.trust[column].get("rewards_blur") is None and blurred is not None:
                summary.trust[column]["rewards_blur"] = card_engine.rewards_blur_on_units(
                    methods, default[:len(blurred)], blurred, metric.higher_is_better)
            tables = {label: None if b is None else card_engine.unit_table(
                cells, b.name, metric.name, methods)
                      for label, b in perturbed.items()}
            found = {label: table for label, table in tables.items() if table is not None}
            if len(found) < len(tables):
                continue
            count = len(found["input noise"])  # the perturbed runs' images: the first ones
            kinds = {kind: {label: table for label, table in found.items()
                            if PERTURBATIONS[label] == kind} for kind in ("minor", "disruptive")}
            control = card_engine.unit_table(cells, benchmark.name, metric.name, ["random"])
            if control is not None:  # the random control's values in place of each method's
                kinds["disruptive"]["random maps"] = np.repeat(control[:count], len(methods),
                                                               axis=1)
            summary.trust[column]["meta"] = meta_evaluation.meta_consistency(
                default[:count], kinds["minor"], kinds["disruptive"], metric.higher_is_better)


def sanity_benchmark(config: ResolvedConfig, inputs: CardImages,
                     randomised_maps_of: Optional[Callable[[str], np.ndarray]] = None,
                     rebuilt: Optional[Callable[[], Any]] = None):
    """The randomisation check on the first `SANITY_IMAGES` images, or None (with a note) for a
    model that cannot be rebuilt from its export; it cascades the `rebuilt` copy
    (`rebuilt_classifier`, made here when not given) and its last stage takes
    `randomised_maps_of` (`fully_randomised_maps`) when given."""
    rebuilt = rebuilt or rebuilt_classifier(config, inputs)
    try:
        rebuilt()
    except UserError as error:
        print(f"note: no randomisation check: {error}")
        return None
    count = min(SANITY_IMAGES, len(inputs.images))
    checked = randomisation.benchmark(
        inputs.model_path, inputs.images[:count], inputs.labels[:count], inputs.ids[:count],
        data=inputs.data, seed=config.seed, batch_size=config.batch_size,
        maps_of=inputs.maps_of, methods=inputs.methods, precision=config.precision,
        randomised_maps_of=randomised_maps_of, rebuilt=rebuilt, holder=inputs.loaded)
    return dataclasses.replace(checked, supports=lambda method: (
        method != card_engine.ORACLE and card_engine.unblurred(method) is None))


def gallery(config: ResolvedConfig, inputs: CardImages) -> pages.Section:
    """The first --gallery_images images and every method's maps (the oracle: the mask)."""
    count = min(config.gallery_images, len(inputs.images))
    images, labels = inputs.images[:count], inputs.labels[:count]
    maps = {}
    for method in config.methods:
        if method == card_engine.ORACLE:
            if inputs.masks is not None:
                maps[method] = inputs.masks[:count, ..., None]
            continue
        maps[method] = inputs.maps_of(method, count)
    pixels = np.asarray(preprocessing.input_space(inputs.loaded.preprocessing).to_pixels(images))
    return pages.Section(
        "Gallery", f"The first {count} images and each method's map (|map| summed over "
        "channels, scaled to its 99th percentile), explaining the true label.",
        png=pages.gallery_png(pixels, maps, row_titles(config, labels)))


def row_titles(config: ResolvedConfig, labels) -> list:
    """The gallery's row titles: the class names of the photos or of the synthetic world's
    objects, else the label numbers."""
    if config.pretrained:
        class_names = photos.class_names("imagenet")
        return [class_names[label] for label in labels]
    if config.model_path is None:
        return [dataset.OBJECT_CLASSES[label] for label in labels]
    return [f"label {label}" for label in labels]


def about_rows(config: ResolvedConfig, inputs: Optional[CardImages], seconds: float,
               environment: dict) -> list:
    """[(label, value)]: what the card evaluated, and what ran it (`environment`:
    `provenance.software()`), shown above its table."""
    if config.pretrained:
        model, data = (f"{config.pretrained} with its ImageNet weights",
                       "foolbox's ImageNet photos (saliency_gen.data.sources.photos)")
    elif config.model_path is None:
        model, data = ("small_cnn, the synthetic world's clean model",
                       "the synthetic world's validation records")
    else:
        model, data = config.model_path, str(config.input_pattern)
    rows = []
    if inputs is not None:
        predicted = np.argmax(saliency_gen.predict(inputs.loaded, inputs.images,
                                                   config.batch_size), axis=1)
        accuracy = float(np.mean(predicted == np.asarray(inputs.labels)))
        rows += [("Model", f"{model} (id {inputs.loaded.model_id})"),
                 ("Accuracy", f"top-1 {accuracy:.3f} on the {len(inputs.images)} images below"),
                 ("Data", f"{data}: {len(inputs.images)} images (the first --nr_images of a "
                          f"sample drawn with seed {config.seed})")]
    if "BAM" in config.benchmarks and not config.pretrained:
        rows.append(("BAM", f"{config.num_imgs} images per metric, models in "
                            f"{config.bam_model_dir or 'the synthetic world cache'}"))
    run_benchmarks = [name for name in config.benchmarks
                      if not (name == "BAM" and config.pretrained)]
    rows += [("Methods", ", ".join(config.methods)),
             ("Settings", f"benchmarks {', '.join(run_benchmarks)}; deletion / insertion "
                          f"steps at most {config.max_step_nb}; batch {config.batch_size}"
                          + ("; blur controls" if config.blur_controls else "")
                          + (f"; meta-evaluation on {config.meta_images} images (input noise sd "
                             f"{MINOR_NOISE} of the range, weight noise sd {WEIGHT_NOISE}, "
                             "fully randomised model"
                             + ("" if config.blur_controls else ", blurred maps") + ")"
                             if config.meta_evaluation else "")),
             ("Seeds", f"{config.seed} (image sample, random draws, bootstrap)"),
             ("Software", f"attribution-benchmarks {environment['package']} (commit "
                          f"{environment['commit']}), TensorFlow {environment['tensorflow']}, "
                          f"Keras {environment['keras']}, Python {environment['python']}"),
             ("Machine", environment["cpu"]),
             ("Date", time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())),
             ("Run time", f"{seconds:.0f} s (reused cells cost nothing)")]
    return rows


def run(config: Config) -> dict:
    """Runs (or resumes) the card of `config`, prints its table and writes its pages (with a
    Dask cluster: its cells first, one task each, `cells_on_cluster`)."""
    given, config = config, resolved(config)
    methods = resolved_methods(config)
    check_flags(config)
    if config.cells_only:  # one task's cells: each is written atomically, no folder lock
        return _run(config, methods)
    if config.on_cluster:
        cells_on_cluster(given, config)
    with exclusive(config.output_dir, "--output_dir"):
        return _run(config, methods)


def cells_on_cluster(given: Config, config: ResolvedConfig) -> None:
    """Computes every (benchmark, method) cell of the card as one task of the Dask cluster:
    this script with the task's benchmark and method and --cells_only, run by a worker
    (`models.foundation.cluster`); a cell already computed with the same origin is reused by
    its task at once. The sanity check, the meta-evaluation, the variants and the pages
    follow here."""
    plan = [(benchmark, method) for benchmark in config.benchmarks
            for method in config.methods]
    script = os.path.abspath(__file__)
    commands = [[cluster.PYTHON, script, *flag_arguments(
        given, benchmarks=(benchmark,), methods=(method,), cells_only=True,
        output_dir=os.path.abspath(config.output_dir), blur_controls=False, sanity=False,
        meta_evaluation=False, variants=False, gallery_images=0, dask_scheduler_file=None,
        dask_address=None)] for benchmark, method in plan]
    cluster.run_commands(commands, [f"{benchmark} x {method}" for benchmark, method in plan],
                         what="card cells", scheduler_file=config.dask_scheduler_file,
                         address=config.dask_address, cwd=os.getcwd())


def card_bar(config: ResolvedConfig, every: list, inputs: Optional[CardImages],
             methods: dict) -> progress.CostBar:
    """The card's progress bar over the cells of `every` benchmark: their prior costs, the
    passes each cell is expected to need and each method's evaluations per image."""
    shape = inputs.images.shape[1:] if inputs is not None else BAM_SHAPE
    plain = {method: card_engine.unblurred(method) or method for method in config.methods}
    evaluations = {method: (methods[method].evaluations(shape) if method in methods else 0)
                   for method in set(plain.values())}
    return progress.CostBar(
        card_engine.expected_passes(every, config.methods, evaluations.__getitem__),
        {b.name: b.cost for b in every}, "report card",
        evaluations={b.name: [evaluations[plain[m]] for m in config.methods] for b in every},
        # one benchmark's runs on other inputs ("<benchmark> [<perturbation or variant>]")
        groups={b.name: b.name.split(" [")[0] for b in every})


def counting_passes(finished: Callable) -> Callable[[str, float, bool], None]:
    """`progress(benchmark, seconds, computed)` for `card_engine.run_cells` that gives
    `finished` the model passes each cell needed too (`models.foundation.workload`), and
    whether it was read back rather than computed."""
    last = [workload.snapshot()]

    def follow(name: str, seconds: float, computed: bool) -> None:
        now = workload.snapshot()
        finished(name, seconds, now["gradient"] - last[0]["gradient"], reused=not computed)
        last[0] = now

    return follow


def _run(config: ResolvedConfig, methods: dict) -> dict:
    started = time.time()
    image_level = [b for b in config.benchmarks if b != "BAM"]
    inputs = load_inputs(config, methods) if (image_level or config.sanity
                                              or config.gallery_images
                                              or config.retraining) else None
    benchmarks = build_benchmarks(config, inputs, methods)
    meta_on = bool(config.meta_evaluation and inputs)
    # the fully randomised model's maps: the sanity check's last stage and the meta-evaluation's
    # disruptive maps, computed once when the card has both
    rebuilt = rebuilt_classifier(config, _given(inputs)) if inputs is not None else None
    randomised_maps_of = fully_randomised_maps(
        config, _given(inputs), max(config.meta_images, SANITY_IMAGES if config.sanity else 0),
        rebuilt) if meta_on and rebuilt is not None else None
    checks = [sanity_benchmark(config, _given(inputs), randomised_maps_of, rebuilt)] \
        if config.sanity else []
    checks = [check for check in checks if check is not None]
    variants = (variant_benchmarks(config, inputs) if config.variants and inputs is not None
                else [])
    variant_list = [benchmark for benchmark, _, _ in variants]
    meta = meta_benchmarks(config, _given(inputs), randomised_maps_of) \
        if randomised_maps_of is not None else {}
    meta_list = [benchmark for found in meta.values() for benchmark in found.values()]
    every = [*benchmarks, *checks, *variant_list, *meta_list]
    code = method_code(config, methods)
    with card_bar(config, every, inputs, methods) as bar:
        cells_of = functools.partial(card_engine.run_cells, methods=config.methods,
                                     output_dir=config.output_dir,
                                     progress=counting_passes(bar.finished),
                                     overwrite=config.overwrite, method_code=code)
        if config.cells_only:
            cells_of(benchmarks)
            return {"cells": len(benchmarks) * len(config.methods), "config": config}
        cells, check_cells, variant_cells, meta_cells = (
            cells_of(group) for group in (benchmarks, checks, variant_list, meta_list))
    summary = card_engine.summarise(benchmarks, config.methods, cells, config.seed)
    meta_evaluate(summary, benchmarks, meta, {**cells, **meta_cells})
    sections, sanity = [], None
    if checks:
        sanity = card_engine.summarise(checks, config.methods, check_cells, config.seed,
                                       judge=False)
        sections.append(pages.section_of(
            sanity, "Sanity check: cascading model randomisation",
            "Spearman correlation between each method's maps on the trained model and on the "
            "model whose top k weighted layers were re-initialised (Adebayo et al. 2018), on "
            f"{checks[0].settings['n_images']} images. A map that explains the model should "
            "lose its resemblance (towards 0); near 1 means the map ignores the weights."))
    if variants:
        sections.append(sensitivity_section(summary, variants, card_engine.summarise(
            variant_list, config.methods, variant_cells, config.seed, judge=False)))
    if config.gallery_images:
        sections.append(gallery(config, _given(inputs)))
    print(pages.card_table(summary))
    header, rows = pages.agreement_rows(summary)
    print("\nKendall's tau between the benchmarks' method rankings\n"
          + results.text_table(header, rows))
    if summary.trust:
        print("\nHow far to trust each metric (alpha, split-half: 95% intervals)\n"
              + results.text_table(*pages.trust_rows(summary)))
    for section in sections:
        if section.header:
            print(f"\n{section.title}\n" + results.text_table(section.header,
                                                                   section.rows))
    intro = ("Each cell: mean ±(the larger side of the 95% bootstrap interval; the exact "
             "interval shows on hover and is in card.csv) #rank. A method's rank is 1 + the "
             "number of methods that beat it on the same images (paired bootstrap of the "
             "difference excluding 0), so methods nothing separates share a rank. Bold: the "
             "best mean of the column. ↑: higher is better, ↓: lower is better.")
    environment = provenance.software()
    paths = pages.write_card(summary, config.output_dir, sections,
                             title="Saliency report card", intro=intro,
                             extra={"seconds": time.time() - started,
                                    "origin": provenance.origin(origin_flags(config)),
                                    "software": environment},
                             about=about_rows(config, inputs, time.time() - started,
                                              environment))
    print(f"\nwrote {paths['html']}, {paths['md']}, {paths['csv']} and {paths['json']} "
          f"in {time.time() - started:.0f} s")
    return {"card": summary, "sanity": sanity, "sections": sections, "paths": paths,
            "config": config}


if __name__ == "__main__":
    run_binary(Config, run)
