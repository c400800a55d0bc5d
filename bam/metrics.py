"""BAM's metrics: `python -m bam.metrics --metrics=MCS,IDR,IIR`.

    python -m bam.metrics --metrics=MCS,IDR,IIR --num_imgs=10 --seed=0
    python -m bam.metrics --data_dir=data --model_dir=models --num_imgs=10000

Samples `--num_imgs` images per metric (`random.Random(seed)`, as the original), explains both
models' predictions with the eight BAM methods (`saliency_gen`, SmoothGrad noise from `--noise_seed`
keyed by file stem), scores each image's object region (docs/bam.md, "Region score") and computes
MCS, IDR and IIR over the images both models classify correctly ("Metrics"). Prints the original's
lines, a table with the number of images used, and writes `--output` (JSON `{"MCS": {"GC": value,
...}, ...}`) and a CSV beside it. `--metrics=RMCS` adds the relative model contrast of
scene1..scene9 against scene10 on dog_bedroom (`bam.rmcs`): the curve over k per method and for
TCAV, its Pearson correlation with the accuracy drop when the dog is removed, a table and a PNG
(`<output>_rmcs.png`); on the synthetic world it first builds the relative sets and trains the ten
scene models (once, cached). With no --data_dir/--model_dir it uses the built-in synthetic world,
building it and training its models once into a cache directory it names.
"""
import dataclasses
import os
import time
from typing import TYPE_CHECKING, Callable, Optional, Sequence

import models
from bam import metric_definitions
from models.foundation import progress as progress_bar
from models.foundation import provenance
from models.foundation import results as result_files
from models.foundation.cli import option, origin_flags, run_binary
from models.foundation.errors import UserError, require_both_or_neither, required
from models.foundation.files import exclusive, write_json
from models.foundation.lazy import lazy_module
from models.foundation.rules import UNIQUE, Checked, at_least, some, some_of

# Loaded on first use: a bad flag is reported before TensorFlow starts (docs/architecture.md).
if TYPE_CHECKING:  # the type checker's view of the same modules
    from bam import rmcs, synthetic_setup, val_set_scores
    from bam import score_cache as score_cache_files
else:
    rmcs = lazy_module("bam.rmcs")
    synthetic_setup = lazy_module("bam.synthetic_setup")
    val_set_scores = lazy_module("bam.val_set_scores")
    score_cache_files = lazy_module("bam.score_cache")


def compute(config: "Config", *, progress: Optional[Callable[[], None]] = None,
            image_progress: Optional[Callable[[int], None]] = None,
            score_cache: Optional[str] = None) -> dict:
    """{metric: {method: (value, correct count, sampled count, constant maps)}} of the pair
    metrics of `config` (RMCS is `bam.rmcs.compute`'s) on the world in `config.data_dir`.

    From scratch with the models in `config.model_dir`; with `maps_dir`, from saved maps
    (`val_set_scores.score_saved_maps`; `input_size` defaults to the images' size); with
    `scratch` off, from the original precomputed g vectors in `attr_dir` on all images
    (`num_imgs` and `seed` unused). `methods` (default: BAM's) are BAM's abbreviations or any
    saliency_gen method name. `progress()` is called after each (model, data) pair,
    `image_progress(n)` after every n explained images. With `score_cache` (a folder), BAM's
    methods' scores are kept there and reused (`bam.score_cache`).
    """
    (data_dir,) = required(config, "data_dir")
    model_dir, maps_dir, input_size = config.model_dir, config.maps_dir, config.input_size
    metric_names = [metric for metric in config.metrics if metric != "RMCS"]
    methods = list(config.methods or metric_definitions.METHODS)
    num_imgs, seed, noise_seed = config.num_imgs, config.seed, config.noise_seed
    batch_size = config.batch_size
    attr_dir = None if config.scratch else config.attr_dir
    if maps_dir is None and attr_dir is None:  # each name resolved once, before any work
        chosen = val_set_scores.resolved_methods(methods)
    sources = val_set_scores.Sources(data_dir, model_dir)
    model, val_set = sources.model, sources.val_set

    def indices_of(metric):
        count = len(val_set(metric_definitions.PAIRS[metric][0][1]).paths)
        return (list(range(count)) if attr_dir is not None
                else metric_definitions.sample_indices(count, num_imgs, seed))

    def scores_of(model_name, data_name, indices, names):
        """The batched computation of one (model, data) pair: saved g vectors, saved maps, the
        score cache or the maps themselves."""
        data_set = val_set(data_name)
        if attr_dir is not None:
            return val_set_scores.score_precomputed(
                attr_dir, f"{model_name}-{data_set.name}", data_set, indices, names)
        if maps_dir is not None:
            return val_set_scores.score_saved_maps(
                maps_dir, f"{model_name}-{data_set.name}", data_set, indices, names,
                input_size or data_set.image_size)
        if score_cache is not None:
            return score_cache_files.score_pair(
                score_cache, model(model_name), data_set, indices, names, noise_seed,
                lambda m, s, i, missing: val_set_scores.score_pair(
                    m, s, i, {name: chosen[name] for name in missing}, noise_seed,
                    batch_size, image_progress))
        return val_set_scores.score_pair(model(model_name), data_set, indices,
                                         {name: chosen[name] for name in names}, noise_seed,
                                         batch_size, image_progress)

    pair_metrics = metric_definitions.PairMetrics(
        metric_names, scores_of, lambda name: val_set(name).labels, indices_of)
    results = {}
    for metric in metric_names:
        (_, d1), (_, d2) = metric_definitions.PAIRS[metric]
        first, second = val_set(d1), val_set(d2)
        if len(first.paths) != len(second.paths):
            raise UserError(f"{metric}: {d1} has {len(first.paths)} val images but {d2} has "
                            f"{len(second.paths)}; they must pair one to one")
        found = pair_metrics.values(metric, methods)
        if progress:
            for _ in range(2):  # its two (model, data) pairs
                progress()
        results[metric] = {method: (metric_definitions.average(metric, values), used, sampled,
                                    constant)
                           for method, (values, used, sampled, constant) in found.items()}
    return results


@dataclasses.dataclass(frozen=True)
class Config(Checked):
    """bam.metrics' options (one flag each), checked when built."""

    metrics: tuple = option(("MCS", "IDR", "IIR"), "Metrics to compute: MCS, IDR, IIR, RMCS.",
                            rule=some_of((*metric_definitions.METRICS, "RMCS"), "metric"))
    num_imgs: int = option(10, "Images sampled per metric.", rule=at_least(1))
    seed: int = option(0, "Seed of the image sample (Python random, as the original).")
    scratch: bool = option(True, "True: compute attributions; False: read the original "
                           "precomputed g vectors from --attr_dir (all images).")
    attr_dir: str = option("attr_reprod", "With --scratch=0: the precomputed layout "
                           "<attr_dir>/<model>-<data>/<stem>_<pred>.")
    num_threads: int = option(50, "Accepted for compatibility; not used.", origin=False)
    methods: Optional[tuple] = option(
        None, "Methods, in reporting order: BAM's abbreviations (GC, VG, SG, IG, IG-SG, GxI, GB, "
        "GGC; the default), any saliency_gen method name, or 'package.module:function'. With "
        "--maps_dir: the saved maps' names (default: all of them).", rule=(some("method"), UNIQUE))
    data_dir: Optional[str] = option(None, "BAM data root (default: the synthetic world).",
                                     origin="data_dir")
    model_dir: Optional[str] = option(None, "Folder of exported models obj/, scene/, "
                                      "scene_only/.", origin="models")
    output: str = option("bam_metrics.json", "JSON output (a CSV is written beside).", origin=False)
    noise_seed: int = option(0, "Seed of SmoothGrad noise.")
    batch_size: int = option(64, "Rows per gradient evaluation.", origin=False,
                             rule=at_least(1))
    cache_dir: Optional[str] = option(None, "Cache of the synthetic world (default: "
                                      "~/.cache/attribution-benchmarks/synthetic_seed0).",
                                      origin="models")
    epochs: int = option(3, "Training epochs of the synthetic models.", origin="models",
                         rule=at_least(1))
    train_models: bool = option(False, "Train the synthetic world's models on this machine "
                                "instead of loading the weights shipped with the package.",
                                origin="models")
    maps_dir: Optional[str] = option(None, "Score saved maps instead of computing them: "
                                     "<maps_dir>/<model>-<data>/<method>.npy and "
                                     "predictions.npy.")
    rmcs_tcav: bool = option(True, "With RMCS: add the relative TCAV row (dog concept, each "
                             "scene model's last block).")
    input_size: Optional[int] = option(None, "With --maps_dir: the resolution maps are scored "
                                       "at (other sizes are resized); default: the images' size.",
                                       rule=at_least(1))


def _write_outputs(path, results, relative=None, origin=None):
    values = {metric: {method: row[0] for method, row in rows.items()}
              for metric, rows in results.items()}
    if relative is not None:
        values["RMCS"] = relative
    if origin is not None:
        values["origin"] = origin
    write_json(path, values, indent=2)
    rows = [{"metric": metric, "method": method, "value": f"{value:.6f}", "images_used": used,
             "images_sampled": sampled, "constant_maps": constant}
            for metric, by_method in results.items()
            for method, (value, used, sampled, constant) in by_method.items()]
    rows += [{"metric": f"RMCS_scene{k}", "method": method, "value": f"{value:.6f}",
              "images_used": relative["images"][k - 1],
              "images_sampled": relative["images_sampled"], "constant_maps": ""}
             for method, curve in (relative or {}).get("curves", {}).items()
             for k, value in zip(rmcs.KS, curve)]
    csv_path = os.path.splitext(path)[0] + ".csv"
    result_files.write_csv(csv_path, rows, ["metric", "method", "value", "images_used",
                                            "images_sampled", "constant_maps"])
    return csv_path


def _print_relative(relative):
    """The original's RMCS lines, then a table: one row per method over k, with r."""
    print("Results for RMCS:")
    for k in rmcs.KS:
        print(f"MCS between scene{k} and scene10")
        for method, curve in relative["curves"].items():
            print(f"{metric_definitions.ORIGINAL_NAMES.get(method, method)},{curve[k - 1]}")
    print(f"\n{'RMCS':<8}" + "".join(f"{f'k={k}':>8}" for k in rmcs.KS) + f"{'r(drop)':>9}")
    for method, curve in relative["curves"].items():
        print(f"{method:<8}" + "".join(f"{v:>8.3f}" for v in curve)
              + f"{relative['correlation'][method]:>9.3f}")
    print(f"{'acc.drop':<8}" + "".join(f"{v:>8.3f}" for v in relative["accuracy_drop"]))
    print(f"{'images':<8}" + "".join(f"{n:>8}" for n in relative["images"]))


def _table(results, methods):
    """The readable table: one row per metric, one column per method, and the images used."""
    rows = []
    for metric, by_method in results.items():
        used = next(iter(by_method.values()))
        rows.append([metric, *(f"{by_method[m][0]:.4f}" for m in methods),
                     f"{used[1]}/{used[2]}"])
    return "\n" + result_files.text_table(["metric", *methods, "images"], rows, align="right")


def origin_of(config: Config, methods: Sequence[str], data_dir: str,
              model_dir: Optional[str]) -> dict:
    """What made a metrics file: the flags that change its numbers, the models' ids and the
    data folder (docs/bam.md, "Outputs"; docs/architecture.md, "Outputs and provenance")."""
    settings = origin_flags(config)
    model_ids = {}
    if model_dir is not None and config.maps_dir is None and config.scratch:
        for name in sorted(os.listdir(model_dir)):
            if os.path.isfile(os.path.join(model_dir, name, "saved_model.pb")):
                model_ids[name] = models.read_info(os.path.join(model_dir, name))["model_id"]
    code = {} if config.maps_dir or not config.scratch else {
        name: method.code_origin
        for name, method in val_set_scores.resolved_methods(methods).items() if method.code}
    return provenance.origin(provenance.with_code(dict(settings, methods=list(methods)), code),
                             models=model_ids,
                             data_dir=os.path.abspath(data_dir) if data_dir else None)


def run(config: Config) -> dict:
    """Computes the metrics of `config`, prints them and writes the JSON and CSV outputs;
    returns {metric: {method: (value, used, sampled, constant maps)}} (and "RMCS"). A second
    run writing the same --output at once stops with one line."""
    with exclusive(config.output, "--output"):
        return _run(config)


def _run(config: Config) -> dict:
    started = time.time()
    data_dir, model_dir = config.data_dir, config.model_dir
    metric_names = list(config.metrics)
    methods = list(config.methods or metric_definitions.METHODS)
    attr_dir = None if config.scratch else config.attr_dir
    score_cache = None  # the synthetic world's cache of region scores
    if attr_dir is not None and data_dir is None:
        raise UserError("--scratch=0 needs --data_dir (the images' labels and names)")
    if config.maps_dir or attr_dir is not None:
        if data_dir is None:
            raise UserError("--maps_dir needs --data_dir (the images' boxes, masks and labels)")
        if config.maps_dir and not config.methods:  # all saved, BAM's first
            (m1, d1), _ = metric_definitions.PAIRS[metric_names[0]]
            saved = val_set_scores.available_maps(config.maps_dir, f"{m1}-{d1}")
            methods = [m for m in metric_definitions.METHODS if m in saved] + [
                m for m in saved if m not in metric_definitions.METHODS]
    else:
        require_both_or_neither(("data_dir", data_dir), ("model_dir", model_dir))
        if data_dir is None:
            setup = (synthetic_setup.prepare_relative if "RMCS" in metric_names
                     else synthetic_setup.prepare)
            data_dir, model_dir = setup(config.cache_dir, epochs=config.epochs,
                                        shipped=not config.train_models)
            score_cache = os.path.join(os.path.dirname(data_dir), "bam_scores")
    pair_metrics = [m for m in metric_names if m != "RMCS"]
    relative = None
    if "RMCS" in metric_names and (config.maps_dir or attr_dir is not None):
        raise UserError("RMCS is computed from scratch only; drop --maps_dir / --scratch=0")
    scored = config.maps_dir is None and attr_dir is None
    pairs = len({pair for m in pair_metrics if m in metric_definitions.PAIRS
                 for pair in metric_definitions.PAIRS[m]})
    total = config.num_imgs * len(methods) * (pairs + 10 * ("RMCS" in metric_names))
    with progress_bar.bar(total if scored else 2 * len(pair_metrics), "BAM metrics",
                      "map" if scored else "pair", smoothing=0.1) as bar:
        step = bar.update if scored else None
        results = compute(dataclasses.replace(config, data_dir=data_dir, model_dir=model_dir,
                                              methods=tuple(methods)),
                          progress=None if scored else (lambda: bar.update(1)),
                          image_progress=step, score_cache=score_cache)
        if "RMCS" in metric_names:  # (computed from scratch: the setup above gave both)
            assert data_dir is not None and model_dir is not None
            relative = rmcs.compute(data_dir, model_dir, methods, config.num_imgs, config.seed,
                                    config.noise_seed, config.batch_size, image_progress=step)
            if config.rmcs_tcav:
                rmcs.add_tcav(relative, data_dir, model_dir, seed=config.seed)
    if relative is not None:
        _print_relative(relative)
        png = rmcs.plot(relative, os.path.splitext(config.output)[0] + "_rmcs.png")
        print(f"wrote {png}")
    for metric, rows in results.items():
        print(f"Results for {metric}:")
        for method, (value, *_rest) in rows.items():
            print(f"{metric_definitions.ORIGINAL_NAMES.get(method, method)},{value}")
    if results:
        print(_table(results, methods))
    constant = {(metric, m): row[3] for metric, rows in results.items()
                for m, row in rows.items() if row[3]}
    for (metric, method), count in constant.items():
        print(f"note: {count} {method} map(s) in {metric} were constant (normalised to 0)")
    csv_path = _write_outputs(config.output, results, relative,
                              origin_of(config, methods, data_dir, model_dir))
    print(f"\nwrote {config.output} and {csv_path} in {time.time() - started:.0f} s")
    return dict(results, **({"RMCS": relative} if relative is not None else {}))


if __name__ == "__main__":
    run_binary(Config, run)
