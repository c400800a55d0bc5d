"""BAM's metrics: `python -m bam.metrics --metrics=MCS,IDR,IIR`.

    python -m bam.metrics --metrics=MCS,IDR,IIR --num_imgs=10 --seed=0
    python -m bam.metrics --data_dir=data --model_dir=models --num_imgs=10000

Samples `--num_imgs` images per metric (`random.Random(seed)`, as the original), explains both
models' predictions with the eight BAM methods (`saliency_gen`, SmoothGrad noise from
`--noise_seed` keyed by file stem), scores each image's object region (bam.md §6) and computes
MCS, IDR and IIR over the images both models classify correctly (§7). Prints the original's lines,
a table with the number of images used, and writes `--output` (JSON
`{"MCS": {"GC": value, ...}, ...}`) and a CSV beside it. `--metrics=RMCS` adds the relative model
contrast of scene1..scene9 against scene10 on dog_bedroom (`bam.rmcs`): the curve over k per
method and for TCAV, its Pearson correlation with the accuracy drop when the dog is removed, a
table and a PNG (`<output>_rmcs.png`); on the synthetic world it first builds the relative sets
and trains the ten scene models (once, cached). With no --data_dir/--model_dir it uses
the built-in synthetic world, building it and training its models once into a cache directory it
names.
"""
import csv
import os
import time

from absl import flags
from tqdm import tqdm

import models
from bam import evaluate, rmcs, scores, synthetic_setup
from models.errors import UserError, require_both_or_neither, run_main
from models.files import atomic_output, write_json

FLAGS = flags.FLAGS


def compute(data_dir, model_dir, metric_names, methods, num_imgs=10, seed=0, noise_seed=0,
            batch_size=64, progress=None, maps_dir=None, input_size=None, attr_dir=None):
    """{metric: {method: (value, correct count, sampled count, constant maps)}}.

    From scratch with the models in `model_dir`; with `maps_dir`, from saved maps
    (`evaluate.score_saved_maps`; `input_size` defaults to the images' size); with `attr_dir`,
    from the original precomputed g vectors on all images (`num_imgs` and `seed` unused).
    """
    unknown = [m for m in metric_names if m not in scores.PAIRS]
    if unknown:
        raise UserError(f"unknown metric {unknown[0]!r}; choose from {', '.join(scores.METRICS)}")
    bad = [m for m in methods if m not in scores.METHODS]
    if bad and maps_dir is None:
        raise UserError(f"unknown BAM method {bad[0]!r}; choose from {', '.join(scores.METHODS)}")
    loaded, sets, cache = {}, {}, {}

    def model(name):
        if name not in loaded:
            loaded[name] = models.load(os.path.join(model_dir, name))
        return loaded[name]

    def val_set(name):
        if name not in sets:
            sets[name] = evaluate.load_val_set(data_dir, name)
        return sets[name]

    results = {}
    for metric in metric_names:
        (m1, d1), (m2, d2) = scores.PAIRS[metric]
        first, second = val_set(d1), val_set(d2)
        if len(first.paths) != len(second.paths):
            raise UserError(f"{metric}: {d1} has {len(first.paths)} val images but {d2} has "
                            f"{len(second.paths)}; they must pair one to one")
        indices = (list(range(len(first.paths))) if attr_dir is not None
                   else scores.sample_indices(len(first.paths), num_imgs, seed))
        outputs = []
        for model_name, data_set in ((m1, first), (m2, second)):
            key = (model_name, data_set.name, tuple(indices))
            if key in cache:  # (scene, scene) serves MCS and IDR
                pass
            elif attr_dir is not None:
                cache[key] = evaluate.score_precomputed(
                    attr_dir, f"{model_name}-{data_set.name}", data_set, indices, methods)
            elif maps_dir is not None:
                cache[key] = evaluate.score_saved_maps(
                    maps_dir, f"{model_name}-{data_set.name}", data_set, indices, methods,
                    input_size or data_set.image_size)
            else:
                cache[key] = evaluate.score_pair(model(model_name), data_set, indices, methods,
                                                 noise_seed, batch_size)
            outputs.append(cache[key])
            if progress:
                progress()
        (p1, g1, c1), (p2, g2, c2) = outputs
        correct = scores.correct_set(p1, first.labels[indices], p2, second.labels[indices])
        results[metric] = {
            method: (scores.metric_value(metric, g1[method][correct], g2[method][correct]),
                     len(correct), len(indices), c1[method] + c2[method])
            for method in methods}
    return results


def define_flags():
    """The binary's flags (defined only when it runs)."""
    flags.DEFINE_list("metrics", ["MCS", "IDR", "IIR"], "Metrics to compute.")
    flags.DEFINE_integer("num_imgs", 10, "Images sampled per metric.")
    flags.DEFINE_integer("seed", 0, "Seed of the image sample (Python random, as the original).")
    flags.DEFINE_bool("scratch", True, "True: compute attributions; False: read the original "
                      "precomputed g vectors from --attr_dir (all images).")
    flags.DEFINE_string("attr_dir", "attr_reprod", "With --scratch=0: the precomputed layout "
                        "<attr_dir>/<model>-<data>/<stem>_<pred>.")
    flags.DEFINE_integer("num_threads", 50, "Accepted for compatibility; not used.")
    flags.DEFINE_list("methods", list(scores.METHODS), "BAM methods, in reporting order.")
    flags.DEFINE_string("data_dir", None, "BAM data root (default: the synthetic world).")
    flags.DEFINE_string("model_dir", None, "Folder of exported models obj/, scene/, scene_only/.")
    flags.DEFINE_string("output", "bam_metrics.json", "JSON output (a CSV is written beside).")
    flags.DEFINE_integer("noise_seed", 0, "Seed of SmoothGrad noise.")
    flags.DEFINE_integer("batch_size", 64, "Rows per gradient evaluation.")
    flags.DEFINE_string("cache_dir", None, "Cache of the synthetic setup (default: ~/.cache/...).")
    flags.DEFINE_integer("epochs", 3, "Training epochs of the synthetic models.")
    flags.DEFINE_string("maps_dir", None, "Score saved maps instead of computing them: "
                        "<maps_dir>/<model>-<data>/<method>.npy and predictions.npy.")
    flags.DEFINE_bool("rmcs_tcav", True, "With RMCS: add the relative TCAV row (dog concept, "
                      "each scene model's last block).")
    flags.DEFINE_integer("input_size", None, "With --maps_dir: the resolution maps are scored "
                         "at (other sizes are resized); default: the images' size.")


def _write_outputs(path, results, relative=None):
    values = {metric: {method: row[0] for method, row in rows.items()}
              for metric, rows in results.items()}
    if relative is not None:
        values["RMCS"] = relative
    write_json(path, values, indent=2)
    csv_path = os.path.splitext(path)[0] + ".csv"
    with atomic_output(csv_path) as temporary:
        with open(temporary, "w", newline="", encoding="utf-8") as handle:
            writer = csv.writer(handle)
            writer.writerow(["metric", "method", "value", "images_used", "images_sampled",
                             "constant_maps"])
            for metric, rows in results.items():
                for method, (value, used, sampled, constant) in rows.items():
                    writer.writerow([metric, method, f"{value:.6f}", used, sampled, constant])
            for method, curve in (relative or {}).get("curves", {}).items():
                for k, value in zip(rmcs.KS, curve):
                    writer.writerow([f"RMCS_scene{k}", method, f"{value:.6f}",
                                     relative["images"][k - 1], relative["images_sampled"], ""])
    return csv_path


def _print_relative(relative):
    """The original's RMCS lines, then a table: one row per method over k, with r."""
    print("Results for RMCS:")
    for k in rmcs.KS:
        print(f"MCS between scene{k} and scene10")
        for method, curve in relative["curves"].items():
            print(f"{scores.ORIGINAL_NAMES.get(method, method)},{curve[k - 1]}")
    print(f"\n{'RMCS':<8}" + "".join(f"{f'k={k}':>8}" for k in rmcs.KS) + f"{'r(drop)':>9}")
    for method, curve in relative["curves"].items():
        print(f"{method:<8}" + "".join(f"{v:>8.3f}" for v in curve)
              + f"{relative['correlation'][method]:>9.3f}")
    print(f"{'acc.drop':<8}" + "".join(f"{v:>8.3f}" for v in relative["accuracy_drop"]))
    print(f"{'images':<8}" + "".join(f"{n:>8}" for n in relative["images"]))


def main(argv):
    del argv
    started = time.time()
    data_dir, model_dir = FLAGS.data_dir, FLAGS.model_dir
    methods = FLAGS.methods
    attr_dir = None if FLAGS.scratch else FLAGS.attr_dir
    if attr_dir is not None and data_dir is None:
        raise UserError("--scratch=0 needs --data_dir (the images' labels and names)")
    if FLAGS.maps_dir or attr_dir is not None:
        if data_dir is None:
            raise UserError("--maps_dir needs --data_dir (the images' boxes, masks and labels)")
        if FLAGS.maps_dir and not FLAGS["methods"].present:  # all saved, BAM's first
            (m1, d1), _ = scores.PAIRS[FLAGS.metrics[0]]
            saved = evaluate.available_maps(FLAGS.maps_dir, f"{m1}-{d1}")
            methods = [m for m in scores.METHODS if m in saved] + [
                m for m in saved if m not in scores.METHODS]
    else:
        require_both_or_neither(("data_dir", data_dir), ("model_dir", model_dir))
        if data_dir is None:
            setup = (synthetic_setup.prepare_relative if "RMCS" in FLAGS.metrics
                     else synthetic_setup.prepare)
            data_dir, model_dir = setup(FLAGS.cache_dir, epochs=FLAGS.epochs)
    pair_metrics = [m for m in FLAGS.metrics if m != "RMCS"]
    relative = None
    if "RMCS" in FLAGS.metrics and (FLAGS.maps_dir or attr_dir is not None):
        raise UserError("RMCS is computed from scratch only; drop --maps_dir / --scratch=0")
    with tqdm(total=2 * len(pair_metrics) + 10 * ("RMCS" in FLAGS.metrics),
              desc="BAM metrics", unit="pair", disable=None) as bar:
        results = compute(data_dir, model_dir, pair_metrics, methods, FLAGS.num_imgs,
                          FLAGS.seed, FLAGS.noise_seed, FLAGS.batch_size,
                          progress=lambda: bar.update(1), maps_dir=FLAGS.maps_dir,
                          input_size=FLAGS.input_size, attr_dir=attr_dir)
        if "RMCS" in FLAGS.metrics:
            relative = rmcs.compute(data_dir, model_dir, methods, FLAGS.num_imgs, FLAGS.seed,
                                    FLAGS.noise_seed, FLAGS.batch_size,
                                    progress=lambda: bar.update(1))
            if FLAGS.rmcs_tcav:
                rmcs.add_tcav(relative, data_dir, model_dir, seed=FLAGS.seed)
    if relative is not None:
        _print_relative(relative)
        png = rmcs.plot(relative, os.path.splitext(FLAGS.output)[0] + "_rmcs.png")
        print(f"wrote {png}")
    for metric, rows in results.items():
        print(f"Results for {metric}:")
        for method, (value, *_rest) in rows.items():
            print(f"{scores.ORIGINAL_NAMES.get(method, method)},{value}")
    if results:
        print(f"\n{'metric':<6}" + "".join(f"{m:>9}" for m in methods) + f"{'images':>9}")
    for metric, rows in results.items():
        used = next(iter(rows.values()))
        print(f"{metric:<6}" + "".join(f"{rows[m][0]:>9.4f}" for m in methods)
              + f"{f'{used[1]}/{used[2]}':>9}")
    constant = {(metric, m): row[3] for metric, rows in results.items()
                for m, row in rows.items() if row[3]}
    for (metric, method), count in constant.items():
        print(f"note: {count} {method} map(s) in {metric} were constant (normalised to 0)")
    csv_path = _write_outputs(FLAGS.output, results, relative)
    print(f"\nwrote {FLAGS.output} and {csv_path} in {time.time() - started:.0f} s")


if __name__ == "__main__":
    define_flags()
    run_main(main)
