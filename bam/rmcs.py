"""Relative model contrast (RMCS) over the models scene1..scene10 (docs/bam.md, "RMCS").

scene<k> was trained with a dog in k scene classes (bedroom first), so the dog tells it less
about the scene as k grows. On the dog_bedroom images:

* RMCS_m(k) = mean over the images that scene<k> and scene10 both call bedroom of
  g_m(scene<k>, j) - g_m(scene10, j), for k = 1..9 (g: the object-region score of method m);
* the ground truth: scene<k>'s accuracy drop on the val images of its dog classes when the dog is
  removed (the same names from scene_only);
* a method is judged by the Pearson correlation of its RMCS curve with the accuracy-drop curve;
  TCAV is judged the same way through s(scene<k>) - s(scene10).
"""
import os
from typing import Callable, Optional, Sequence

import numpy as np

import models
import saliency_gen
from bam import metric_definitions, tcav, tcav_experiment, val_set_scores
from models.foundation import results
from models.foundation.errors import UserError
from saliency_gen.data.world import dataset

KS = tuple(range(1, 10))
REFERENCE_MODEL = "scene10"
TARGET_SET = "dog_bedroom"
BEDROOM = 1


def relative_curves(g: dict, predictions: dict, label: int = BEDROOM) -> tuple[dict, list]:
    """({method: [RMCS(k) for k = 1..9]}, [images used per k]) from per-model region scores
    `g[k][method]` and predictions `predictions[k]` (k = 1..10) on the same images."""
    reference = np.asarray(predictions[10]) == label
    curves: dict = {}
    used: list = []
    for k in KS:
        correct = np.flatnonzero((np.asarray(predictions[k]) == label) & reference)
        used.append(int(correct.size))
        for method in g[10]:
            difference = (np.asarray(g[k][method], np.float64)[correct] -
                          np.asarray(g[10][method], np.float64)[correct])
            value = float(difference.mean()) if correct.size else float("nan")
            curves.setdefault(method, []).append(value)
    return curves, used


def correlation(curve: Sequence[float], drops: Sequence[float]) -> float:
    """Pearson correlation of a curve with the accuracy drops (NaN if either is constant or a
    curve value is missing)."""
    x, y = np.asarray(curve, np.float64), np.asarray(drops, np.float64)
    if not (np.isfinite(x).all() and np.isfinite(y).all()) or x.std() == 0 or y.std() == 0:
        return float("nan")
    return float(np.corrcoef(x, y)[0, 1])


def accuracy_drops(data_dir: str, model_dir: str, batch_size: int = 64) -> list:
    """[k = 1..9]: scene<k>'s accuracy with the dog minus without, on its dog classes' val
    images (`scene<k>/val` names in D_k; with: scene/val, without: scene_only/val)."""
    drops = []
    for k in KS:
        root = os.path.join(data_dir, f"scene{k}")
        classes_file = os.path.join(root, "dog_classes.txt")
        if not os.path.isfile(classes_file):
            raise UserError(f"{classes_file} does not exist; build the relative sets first")
        with open(classes_file, encoding="utf-8") as handle:
            dog_classes = {line.strip() for line in handle if line.strip()}
        labelled = [(name, label) for name, label in
                    dataset.read_labels(os.path.join(root, "val.txt"))
                    if dataset.parse_image_name(name)[1] in dog_classes]
        labels = np.array([label for _, label in labelled])
        model = models.load(os.path.join(model_dir, f"scene{k}"))
        accuracy = []
        for source in ("scene", "scene_only"):
            images = dataset.model_inputs([os.path.join(data_dir, source, "val", name)
                                           for name, _ in labelled],
                                          model.input_shape[0], model.preprocessing)
            predicted = np.argmax(saliency_gen.predict(model, images, batch_size), axis=1)
            accuracy.append(float((predicted == labels).mean()))
        drops.append(accuracy[0] - accuracy[1])
    return drops


def compute(data_dir: str, model_dir: str, methods: Sequence[str], num_imgs: int = 100,
            seed: int = 0, noise_seed: int = 0, batch_size: int = 64,
            progress: Optional[Callable[[], None]] = None,
            image_progress: Optional[Callable[[int], None]] = None) -> dict:
    """{"curves": {method: [9]}, "images": [9], "images_sampled", "accuracy_drop": [9],
    "correlation": {method: r}} on `num_imgs` sampled dog_bedroom images."""
    target = val_set_scores.load_val_set(data_dir, TARGET_SET)
    indices = metric_definitions.sample_indices(len(target.paths), num_imgs, seed)
    g, predictions = {}, {}
    chosen = val_set_scores.resolved_methods(methods)  # each name once
    for k in range(1, 11):  # the ten relative models on the same images
        model = models.load(os.path.join(model_dir, f"scene{k}"))
        predictions[k], g[k], _ = val_set_scores.score_pair(model, target, indices, chosen,
                                                            noise_seed, batch_size, image_progress)
        if progress:
            progress()
    curves, used = relative_curves(g, predictions)
    drops = accuracy_drops(data_dir, model_dir, batch_size)
    return {"curves": curves, "images": used, "images_sampled": len(indices),
            "accuracy_drop": drops,
            "correlation": {method: correlation(curve, drops) for method, curve in curves.items()}}


def add_tcav(result: dict, data_dir: str, model_dir: str, bottleneck: Optional[str] = None,
             num_random_exp: int = 2, seed: int = 0) -> dict:
    """Adds the TCAV row: s(scene<k>) - s(scene10) for the dog concept on dog_bedroom at
    `bottleneck` (default: each model's last block), and its correlation."""
    chosen = bottleneck or tcav.LAST_BLOCK
    scores_by_model = {}
    for k in range(1, 11):
        tcav_result = tcav_experiment.model_tcav(data_dir, model_dir, f"scene{k}", [chosen],
                                                 num_random_exp, seed=seed)
        scores_by_model[k] = tcav_result[chosen]["score"]
    curve = [scores_by_model[k] - scores_by_model[10] for k in KS]
    result["curves"]["TCAV"] = curve
    result["correlation"]["TCAV"] = correlation(curve, result["accuracy_drop"])
    result["tcav_scores"] = [scores_by_model[k] for k in range(1, 11)]
    return result


def plot(result: dict, path: str) -> str:
    """A PNG of every RMCS curve over k with the accuracy drop on a second axis."""
    figure, axis = results.pyplot().subplots(figsize=(7, 4.5))
    for method, curve in result["curves"].items():
        axis.plot(KS, curve, marker="o", label=f"{method} (r = "
                  f"{result['correlation'][method]:.2f})")
    axis.set_xlabel("k (scene classes with a dog in training)")
    axis.set_ylabel("RMCS: g(scene k) - g(scene10)")
    drop_axis = axis.twinx()
    drop_axis.plot(KS, result["accuracy_drop"], "k--", linewidth=2, label="accuracy drop")
    drop_axis.set_ylabel("accuracy drop without the dog")
    lines = axis.get_legend_handles_labels()
    extra = drop_axis.get_legend_handles_labels()
    axis.legend(lines[0] + extra[0], lines[1] + extra[1], fontsize=7, loc="upper right")
    axis.set_title("Relative model contrast on dog_bedroom")
    figure.tight_layout()
    return results.write_bytes(path, results.figure_png(figure, dpi=120))
