"""ROAD without retraining: `python -m roar.road` (docs/roar.md, "ROAD without retraining").

    python -m roar.road --ckpt_path=runs/clean/model --saliency_method=gradient_image \\
        --data_dir=saliency/SH --ratios=0.1,0.3,0.5,0.7,0.9
    python -m roar.road          # the synthetic world's clean model and gradient maps

The clean (explained) model runs on imputed test images: MoRF(p) removes the top p of the
ranked pixels (= ROAR at ratio p), LeRF(p) keeps the top p and imputes the rest (= KAR at ratio
1 - p). Every result states its `fraction_removed`. Defaults reproduce ROAD: pixel ranking of
the signed channel sum, ROAD's shared jitter, noisy linear imputation with noise 0.01. Reports
accuracy against the labels and the mean softmax probability of the true class per fraction, as a
table, a JSON / CSV / Markdown file and a PNG plot, and the metrics MoRF and LeRF (the
probability averaged over the fractions, `roar.metric_definitions`, as the report card shows
them). The records are read once; every fraction of both orders comes from ROAD's measure
(`roar.road_outcomes.Road`), the one the report card calls.
"""
import dataclasses
import os
from typing import TYPE_CHECKING, Any, Callable, Iterator, Optional, Sequence, TypeVar

import numpy as np

import models
from models.foundation import progress, provenance
from models.foundation.cli import flag_of, option, origin_flags, run_binary
from models.foundation.errors import UserError, required
from models.foundation.files import exclusive, write_json
from models.foundation.lazy import lazy_module
from models.foundation.metric_spec import legend
from models.foundation.rules import (
    COUNT_OR_ALL,
    LABEL_OFFSETS,
    UNIQUE_NUMBERS,
    WHOLE_PERCENTS,
    Checked,
    at_least,
    some_of,
)
from roar import mask_settings, metric_definitions
from roar.mask_settings import ROAD, MaskConfig

# Loaded on first use: a bad flag is reported before TensorFlow starts (docs/architecture.md).
if TYPE_CHECKING:  # the type checker's view of the same modules
    from roar import masked_data, road_outcomes
else:
    masked_data = lazy_module("roar.masked_data")
    road_outcomes = lazy_module("roar.road_outcomes")
if TYPE_CHECKING:  # the type checker's view of the same modules
    from roar import summaries, synthetic_setup
    from saliency_gen.data import pipelines, records
else:
    summaries = lazy_module("roar.summaries")
    synthetic_setup = lazy_module("roar.synthetic_setup")
    pipelines = lazy_module("saliency_gen.data.pipelines")
    records = lazy_module("saliency_gen.data.records")

ORDERS = tuple(metric_definitions.ROAD_ORDERS)  # ("morf", "lerf")
fraction_removed = metric_definitions.fraction_removed


@dataclasses.dataclass(frozen=True)
class RoadRecords:
    """What a ROAD run reads: test files, map source and mask settings, and the fractions
    (`inputs(config)` makes it from the flags)."""

    files: list
    records: "masked_data.Records"  # saliency records, or image records with a control map
    mask: "masked_data.MaskConfig"
    ratios: list


def image_outcomes(model: Any, read: RoadRecords, *, orders: Sequence[str] = ORDERS,
                   batch_size: int = 128, span: Optional[tuple[int, int]] = None,
                   limit: Optional[int] = None) -> Iterator[tuple[list, dict]]:
    """Per batch of `batch_size` test records of `read`: (example keys, {(order, p): (hit [B]
    bool, true-class probability [B] float64)}) at every order and fraction, from ROAD's
    measure (`roar.road_outcomes.Road`; the imputation noise keyed by the example keys). `span`
    (start, count) restricts one file to a range, `limit` the records to the first ones."""
    measure = road_outcomes.Road(model, read.mask, road_outcomes.settings(orders, read.ratios),
                                 batch_size=batch_size)
    batches = masked_data.scored_batches(read.files, read.records, read.mask.seed,
                                         batch_size=batch_size, span=span, limit=limit)
    for keys, pixels, labels, scores in batches:
        found = measure.outcomes(road_outcomes.RoadImages(
            pixels, labels, masked_data.noise_keys(keys), scores))
        yield ([key.decode() for key in keys.numpy()],
               {(setting.order, setting.p): (hits, probabilities)
                for setting, (probabilities, hits) in found.items()})


def evaluate_curve(model: Any, read: RoadRecords, *, orders: Sequence[str] = ORDERS,
                   batch_size: int = 128, method_name: Optional[str] = None,
                   progress: Optional[Callable[[dict], None]] = None,
                   image_progress: Optional[Callable[[int], None]] = None,
                   limit: Optional[int] = None) -> list:
    """Rows {method, order, p, fraction_removed, accuracy, true_class_probability, n} for
    every order and each of `read`'s fractions, evaluated with `model` (a `models.load` object
    or Keras model) in one pass over the records. `progress(row)` is called for each row at
    the end, `image_progress(n)` after each batch with its n imputed images. `limit`: the first
    records only."""
    sums: dict = {}
    count = 0
    for keys, found in image_outcomes(model, read, orders=orders, batch_size=batch_size,
                                      limit=limit):
        for key, (hits, probabilities) in found.items():
            correct, probability = sums.get(key, (0, 0.0))
            sums[key] = (correct + int(np.sum(hits)), probability + float(np.sum(probabilities)))
        count += len(keys)
        if image_progress:
            image_progress(len(keys) * len(found))
    if count == 0:
        raise UserError("the test set is empty")
    rows = []
    for order in orders:
        for p in read.ratios:
            correct, probability = sums[order, float(p)]
            rows.append(row(method_name or read.records.map_key or read.records.control, order,
                            p, correct / count, probability / count, count))
            if progress:
                progress(rows[-1])
    return rows


def row(method: Optional[str], order: str, p: float, accuracy: float, probability: float,
        count: int) -> dict:
    """One result row of the curve."""
    return {"method": method, "order": order, "p": p,
            "fraction_removed": fraction_removed(order, p), "accuracy": accuracy,
            "true_class_probability": probability, "n": count}


@dataclasses.dataclass(frozen=True)
class Config(Checked):
    """roar.road's options (one flag each), checked when built."""

    ckpt_path: Optional[str] = option(
        None, "The clean model (models.export directory; default: the synthetic world's).")
    data_dir: Optional[str] = option(
        None,
        'Saliency records of the method, or image records with --saliency_method=random '
        "or oracle (default: the synthetic world's, made once and cached).")
    eval_pattern: str = option("validation-*", 'Test shards in --data_dir.', origin=False)
    saliency_method: Optional[str] = option(
        None, "The map: a record key (gradient_image), a ROAR code (SH), any saliency_gen method "
        "name or 'package.module:function' whose records --data_dir holds, or random / oracle "
        "(default on the synthetic world: gradient_image).")
    orders: tuple = option(tuple(ORDERS), 'morf and/or lerf.', rule=some_of(ORDERS, "order"))
    ratios: tuple = option(
        ("0.1", "0.2", "0.3", "0.4", "0.5", "0.7", "0.9"),
        'Fractions p (MoRF removes the top p, LeRF keeps it).',
        rule=(WHOLE_PERCENTS, UNIQUE_NUMBERS))
    # The mask settings, declared once (roar.mask_settings), with ROAD's choices as defaults.
    ranking: str = flag_of(MaskConfig, "ranking", ROAD["ranking"])
    squared_value: bool = flag_of(MaskConfig, "squared", ROAD["squared"])
    tie_break: str = flag_of(MaskConfig, "tie_break", ROAD["tie_break"])
    fill: str = flag_of(MaskConfig, "fill", ROAD["fill"])
    road_noise: float = flag_of(MaskConfig, "road_noise")
    seed: int = flag_of(MaskConfig, "seed")
    batch_size: int = option(128, 'Images per evaluation batch.', origin=False,
                             rule=at_least(1))
    label_offset: int = option(0, 'Added to image-record labels.',
                              rule=LABEL_OFFSETS)
    nr_images: int = option(-1, 'Test images: the first N records in file order (-1: all).',
                            rule=COUNT_OR_ALL)
    output: str = option("road", 'Output stem: <output>.json, .csv, .md, .png.', origin=False)



def run(config: Config) -> list:
    """MoRF / LeRF curves of `config`: printed row by row, written as <output>.json (with the
    run's origin), .csv, .md and .png; returns the rows. A second run writing the same output
    at once stops with one line."""
    check_flags(config)
    with exclusive(config.output + ".json", "ROAD output"):
        return _curves(on_synthetic_world(config))


RoadConfig = TypeVar("RoadConfig", bound="Config")


def on_synthetic_world(f: RoadConfig) -> RoadConfig:
    """`f` itself when --data_dir is given; otherwise ROAD on the built-in synthetic world, like
    roar.train: its clean model, and the method's saliency records (or, for random / oracle,
    its image records), made once and cached (`roar.synthetic_setup`)."""
    if f.data_dir:
        return f
    method = f.saliency_method or "gradient_image"
    control = method in ("random", "oracle")
    setup = synthetic_setup.prepare(seed=0, method=None if control else method)
    return dataclasses.replace(
        f, saliency_method=method, data_dir=setup["records"] if control else setup["saliency"],
        ckpt_path=f.ckpt_path or synthetic_setup.clean_model(seed=0))


def check_flags(f: Config) -> None:
    """What the options' own rules cannot say (they are checked when the config is built):
    the flags --data_dir needs, and an output stem that is not a folder."""
    if f.data_dir:
        for name in ("ckpt_path", "saliency_method"):
            if not getattr(f, name):
                raise UserError(f"--{name} is required with --data_dir")
    if f.output.endswith(os.sep) or os.path.isdir(f.output):
        raise UserError(f"--output={f.output} is a folder; give a file stem such as "
                        f"{os.path.join(f.output, 'road')} (it writes <stem>.json, .csv, .md, "
                        ".png)")


def inputs(f: Config, size: int) -> RoadRecords:
    """The test files, map source and mask settings of `f` (after `on_synthetic_world`), for a
    model of input side `size`."""
    data_dir, method = required(f, "data_dir", "saliency_method")
    files = masked_data.list_shards(os.path.join(data_dir, f.eval_pattern), "--eval_pattern")
    control = method if method in ("random", "oracle") else None
    mask = mask_settings.mask_config(f)
    read = masked_data.Records(
        "images" if control else "saliency", control,
        map_key=None if control else masked_data.record_key_of(method), size=size,
        label_offset=f.label_offset)
    return RoadRecords(files, read, mask, [float(r) for r in f.ratios])


def first_records(f: Config, counts: list) -> list:
    """[(file, records)] cut to the first --nr_images records in file order (all with -1); more
    than there are is one line."""
    available = sum(count for _, count in counts)
    if f.nr_images > available:
        raise UserError(f"--nr_images={f.nr_images} exceeds the {available} test records of "
                        f"{f.data_dir}; use at most {available}, or -1 for all")
    left, kept = (available if f.nr_images < 0 else f.nr_images), []
    for path, count in counts:
        if left > 0:
            kept.append((path, min(count, left)))
            left -= kept[-1][1]
    return kept


def describe(row: dict) -> str:
    """One printed line of a row."""
    return (f"{row['order']:>4} p={row['p']:.2f} removed {row['fraction_removed']:.2f}: "
            f"accuracy {row['accuracy']:.4f}, true-class probability "
            f"{row['true_class_probability']:.4f}")


def _curves(f: Config) -> list:
    model = models.load(f.ckpt_path)
    read = inputs(f, model.input_shape[0])
    counts = first_records(f, [(path, pipelines.count_records([path])) for path in read.files])
    images = sum(count for _, count in counts)
    total = images * len(read.ratios) * len(f.orders)
    print(f"ROAD: {images} test images x {len(read.ratios)} fractions x {len(f.orders)} "
          f"order(s) = {total} imputed images scored by model {model.model_id}, maps of "
          f"{f.saliency_method} from {f.data_dir}", flush=True)
    with progress.bar(total, "ROAD", "img") as bar:
        rows = evaluate_curve(
            model, read, orders=f.orders, batch_size=f.batch_size, method_name=f.saliency_method,
            image_progress=bar.update, progress=lambda row: bar.write(describe(row)),
            limit=None if f.nr_images < 0 else f.nr_images)
    write_results(f, rows, model, read.files)
    return rows


def write_results(f: Config, rows: list, model: Any, files: list) -> None:
    """Prints the MoRF / LeRF metrics of `rows` (`roar.metric_definitions`) and writes
    <output>.json (rows, metrics, flags, origin), .csv, .md and .png of a ROAD run."""
    metrics = metric_definitions.road_summary(rows)
    shown = {metric_definitions.ROAD_ORDERS[row["order"]] for row in rows}
    print(legend(spec for spec in metric_definitions.ROAD if spec.name in shown))
    fractions = len({row["p"] for row in rows})
    for method, values in metrics.items():
        print(f"{method}: " + ", ".join(f"{name} {value:.4f}" for name, value in values.items())
              + f" (averaged over {fractions} fractions)")
    by_fraction = [dict(row, mean=row["accuracy"], std=0.0) for row in rows]
    summaries.write_outputs(f.output, rows, by_fraction,
                            ["method", "order", "p", "fraction_removed", "mean ± sd", "n"],
                            "fraction_removed", ["method", "order"], "accuracy",
                            "ROAD: accuracy of the clean model on imputed images")
    flags = origin_flags(f)  # docs/architecture.md, "Outputs and provenance"
    # a user method's code, as the folder of its maps records it
    code = records.manifest_code(f.data_dir) if f.data_dir else {}
    origin = provenance.origin(dict(provenance.with_code(flags, code),
                                    **masked_data.masking.solver_setting(f.fill)),
                               model_id=model.model_id, data=provenance.listing_digest(files))
    write_json(f.output + ".json", {"rows": rows, "summary": metrics, "flags": flags,
                                    "origin": origin}, indent=2)
    print(f"wrote {f.output}.json, .csv, .md and .png")


if __name__ == "__main__":
    run_binary(Config, run)
