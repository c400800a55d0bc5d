"""ROAD without retraining: `python -m roar.road` (roar.md §6.2).

    python -m roar.road --ckpt_path=runs/clean/model --saliency_method=gradient_image \\
        --data_dir=saliency/SH --ratios=0.1,0.3,0.5,0.7,0.9

The clean (explained) model runs on imputed test images: MoRF(p) removes the top p of the
ranked pixels (= ROAR at ratio p), LeRF(p) keeps the top p and imputes the rest (= KAR at ratio
1 - p). Every result states its `fraction_removed`. Defaults reproduce ROAD: pixel ranking of
the signed channel sum, ROAD's shared jitter, noisy linear imputation with noise 0.01. Reports
accuracy against the labels and the mean softmax probability of the true class, as a table, a
JSON / CSV / Markdown file and a PNG plot.
"""
import dataclasses
import os

import numpy as np
import tensorflow as tf
from absl import flags

import models
from models.errors import UserError, run_main
from models.files import write_json
from roar import data, reporting

ORDERS = ("morf", "lerf")


def evaluate_curve(model, files, source, config, *, ratios, orders=ORDERS, map_key=None,
                   control=None, batch_size=128, size=None, geometry="none", label_offset=0,
                   method_name=None, progress=None):
    """Rows {method, order, p, fraction_removed, accuracy, true_class_probability, n} for
    every order and fraction, evaluated with `model` (a `models.load` object or Keras model)."""
    rows = []
    space = getattr(model, "preprocessing", "imagenet")
    for order in orders:
        if order not in ORDERS:
            raise UserError(f"--order must be one of {', '.join(ORDERS)}; got {order!r}")
        for p in ratios:
            if order == "morf":
                setting = dataclasses.replace(config, ratio=p, keep_information=False)
                removed = p
            else:
                setting = dataclasses.replace(config, ratio=round(1.0 - p, 2),
                                              keep_information=True)
                removed = round(1.0 - p, 2)
            dataset = data.masked_dataset(files, source, setting, training=False,
                                          batch_size=batch_size, map_key=map_key, size=size,
                                          geometry=geometry, label_offset=label_offset,
                                          control=control, space=space)
            correct, probability, count = 0, 0.0, 0
            for images, labels in dataset:
                probabilities = tf.nn.softmax(model(images), axis=-1).numpy()
                labels = labels.numpy()
                correct += int(np.sum(np.argmax(probabilities, 1) == labels))
                probability += float(np.sum(probabilities[np.arange(len(labels)), labels]))
                count += len(labels)
            if count == 0:
                raise UserError("the test set is empty")
            rows.append({"method": method_name or map_key or control, "order": order, "p": p,
                         "fraction_removed": removed, "accuracy": correct / count,
                         "true_class_probability": probability / count, "n": count})
            if progress:
                progress(rows[-1])
    return rows


def define_flags():
    flags.DEFINE_string("ckpt_path", None, "The clean model (models.export directory).")
    flags.DEFINE_string("data_dir", None, "Saliency records of the method, or image records "
                        "with --saliency_method=random or oracle.")
    flags.DEFINE_string("eval_pattern", "validation-*", "Test shards in --data_dir.")
    flags.DEFINE_string("saliency_method", None, "Record key of the map, or random / oracle.")
    flags.DEFINE_list("orders", list(ORDERS), "morf and/or lerf.")
    flags.DEFINE_list("ratios", ["0.1", "0.2", "0.3", "0.4", "0.5", "0.7", "0.9"],
                      "Fractions p (MoRF removes the top p, LeRF keeps it).")
    flags.DEFINE_enum("ranking", "pixel", ["element", "pixel"], "Ranking unit (ROAD: pixel).")
    flags.DEFINE_bool("squared_value", False, "Rank by e^2 (ROAD: the signed sum).")
    flags.DEFINE_enum("tie_break", "jitter", ["index", "jitter"], "Ties (ROAD: jitter).")
    flags.DEFINE_enum("fill", "noisy_linear", ["mean", "zero", "noisy_linear"], "Replacement.")
    flags.DEFINE_float("road_noise", 0.01, "Imputation noise (absolute, [0, 1] pixels).")
    flags.DEFINE_integer("seed", 0, "Seed of the jitter and the noise.")
    flags.DEFINE_integer("batch_size", 128, "Images per evaluation batch.")
    flags.DEFINE_integer("label_offset", 0, "Added to image-record labels.")
    flags.DEFINE_string("output", "road", "Output stem: <output>.json, .csv, .md, .png.")


def main(argv):
    del argv
    f = flags.FLAGS
    for name in ("ckpt_path", "data_dir", "saliency_method"):
        if not getattr(f, name):
            raise UserError(f"--{name} is required")
    model = models.load(f.ckpt_path)
    files = data.list_shards(os.path.join(f.data_dir, f.eval_pattern), "--eval_pattern")
    control = f.saliency_method if f.saliency_method in ("random", "oracle") else None
    config = data.MaskConfig(ranking=f.ranking, squared=f.squared_value, tie_break=f.tie_break,
                             fill=f.fill, road_noise=f.road_noise, seed=f.seed)
    ratios = [float(r) for r in f.ratios]
    rows = evaluate_curve(
        model, files, "images" if control else "saliency", config, ratios=ratios,
        orders=f.orders, map_key=None if control else f.saliency_method, control=control,
        batch_size=f.batch_size, size=model.input_shape[0], label_offset=f.label_offset,
        method_name=f.saliency_method,
        progress=lambda row: print(f"{row['order']:>4} p={row['p']:.2f} removed "
                                   f"{row['fraction_removed']:.2f}: accuracy "
                                   f"{row['accuracy']:.4f}, true-class probability "
                                   f"{row['true_class_probability']:.4f}", flush=True))
    summary = [dict(row, mean=row["accuracy"], std=0.0) for row in rows]
    reporting.write_outputs(f.output, rows, summary,
                            ["method", "order", "p", "fraction_removed", "mean ± sd", "n"],
                            "fraction_removed", ["method", "order"], "accuracy",
                            "ROAD: accuracy of the clean model on imputed images")
    write_json(f.output + ".json", {"rows": rows, "flags": {name: getattr(f, name) for name in (
        "ckpt_path", "data_dir", "saliency_method", "ranking", "squared_value", "tie_break",
        "fill", "road_noise", "seed")}}, indent=2)
    print(f"wrote {f.output}.json, .csv, .md and .png")


if __name__ == "__main__":
    define_flags()
    run_main(main)
