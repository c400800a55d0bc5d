"""BAM's pair metrics as a report-card benchmark (docs/report_card.md, "Benchmarks").

MCS, IDR and IIR per image of each metric's correct set (the images both models classify
correctly, which do not depend on the method), so methods compare image by image. The "oracle"
control attributes exactly the object for the object model and exactly the scene for the scene
models, so its object score g is 1 and 0: the best MCS a method can reach. IDR and IIR have no
such oracle (they ask what a model ignores, which only the model knows), so the oracle's cells
there are empty.
"""
import os

import numpy as np

import models
from bam import metric_definitions, region, val_set_scores
from models.card import Benchmark, Metric

ORACLE = "oracle"
METRICS = (Metric("MCS", True, about="object attribution of the object model minus the scene "
                                    "model's"),
           Metric("IDR", True, about="share of images whose object attribution drops when the "
                                    "object goes"),
           Metric("IIR", True, about="share of images whose attribution stays within 10% when "
                                    "a patch of no importance is added"))


def benchmark(data_dir: str, model_dir: str, *, metrics=("MCS", "IDR", "IIR"),
              num_imgs: int = 10, seed: int = 0, noise_seed: int = 0,
              batch_size: int = 64) -> Benchmark:
    """BAM on the world in `data_dir` with the models in `model_dir` (obj, scene, scene_only),
    `num_imgs` sampled images per metric as `bam.metrics` samples them (all of a metric's
    images where it has fewer)."""
    loaded, sets, predicted = {}, {}, {}

    def model(name):
        if name not in loaded:
            loaded[name] = models.load(os.path.join(model_dir, name))
        return loaded[name]

    def val_set(name):
        if name not in sets:
            sets[name] = val_set_scores.load_val_set(data_dir, name)
        return sets[name]

    def indices(metric):
        first = val_set(metric_definitions.PAIRS[metric][0][1])  # all, if fewer than asked
        return metric_definitions.sample_indices(len(first.paths),
                                                 min(num_imgs, len(first.paths)), seed)

    def predictions(model_name, data_name, chosen):
        key = (model_name, data_name, tuple(chosen))
        if key not in predicted:
            predicted[key] = val_set_scores.score_pair(model(model_name), val_set(data_name),
                                                       chosen, [], noise_seed, batch_size)[0]
        return predicted[key]

    def g_values(model_name, data_name, chosen, method):
        """(predictions, g) of `method` on the chosen images of one (model, data) pair; None
        for g where the oracle has no meaning."""
        data = val_set(data_name)
        if method != ORACLE:
            found, scores, _ = val_set_scores.score_pair(
                model(model_name), data, chosen, [method], noise_seed, batch_size)
            return found, scores[method]
        size = model(model_name).input_shape[0]
        frames = region.object_masks([data.masks[i] for i in chosen],
                                     [data.boxes[i] for i in chosen], data.image_size, size)
        attended = frames if model_name == "obj" else 1 - frames
        return (predictions(model_name, data_name, chosen),
                region.region_scores(attended[..., None].astype(np.float32), frames)[0])

    def score(method):
        values = {}
        for metric in metrics:
            chosen = indices(metric)
            (m1, d1), (m2, d2) = metric_definitions.PAIRS[metric]
            if method == ORACLE and metric != "MCS":
                p1, p2 = predictions(m1, d1, chosen), predictions(m2, d2, chosen)
                g1 = g2 = None
            else:
                p1, g1 = g_values(m1, d1, chosen, method)
                p2, g2 = g_values(m2, d2, chosen, method)
            correct = metric_definitions.correct_set(p1, val_set(d1).labels[chosen], p2,
                                                     val_set(d2).labels[chosen])
            values[metric] = (np.full(len(correct), np.nan) if g1 is None else
                              metric_definitions.per_image(metric, g1[correct], g2[correct]))
        return values

    model_ids = {name: models.read_info(os.path.join(model_dir, name))["model_id"]
                 for name in ("obj", "scene", "scene_only")
                 if os.path.isdir(os.path.join(model_dir, name))}
    return Benchmark(
        name="BAM", metrics=tuple(m for m in METRICS if m.name in metrics), score=score,
        settings={"num_imgs": num_imgs, "seed": seed, "noise_seed": noise_seed,
                  "metrics": list(metrics), "models": model_ids,
                  "data_dir": os.path.abspath(data_dir)},
        cost=6.0 * num_imgs / 10)
