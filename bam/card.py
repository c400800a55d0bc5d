"""BAM's pair metrics as a report-card benchmark (docs/report_card.md, "Benchmarks").

MCS, IDR and IIR per image of each metric's correct set (the images both models classify
correctly, which do not depend on the method), so methods compare image by image. The "oracle"
control attributes exactly the object for the object model and exactly the scene for the scene
models, so its object score g is 1 and 0: the best MCS a method can reach. IDR and IIR have no
such oracle (they ask what a model ignores, which only the model knows), so the oracle's cells
there are empty.
"""
import os
from typing import Optional, Sequence

import numpy as np

import models
from bam import metric_definitions, region, rmcs, val_set_scores
from models.foundation.metric_spec import MetricSpec
from models.report.card_engine import ORACLE, Benchmark


def benchmark(data_dir: str, model_dir: str, *, metrics: Sequence[str] = ("MCS", "IDR", "IIR"),
              num_imgs: int = 10, seed: int = 0, noise_seed: int = 0,
              batch_size: int = 64, methods: Optional[dict] = None) -> Benchmark:
    """BAM on the world in `data_dir` with the models in `model_dir` (obj, scene, scene_only),
    `num_imgs` sampled images per metric as `bam.metrics` samples them (all of a metric's
    images where it has fewer), scored as `bam.metrics` scores them
    (`metric_definitions.PairMetrics`). `methods`: the run's resolved methods ({name:
    Resolved}); a method not in it is resolved when it is scored."""
    sources = val_set_scores.Sources(data_dir, model_dir)
    model, val_set = sources.model, sources.val_set

    def indices_of(metric):
        count = len(val_set(metric_definitions.PAIRS[metric][0][1]).paths)
        return metric_definitions.sample_indices(count, min(num_imgs, count), seed)

    def scores_of(model_name, data_name, chosen, names):
        """(predictions, {method: g}, constant maps) of one (model, data) pair; the oracle's
        g attends exactly the object (object model) or exactly the scene (scene models)."""
        data = val_set(data_name)
        if names != [ORACLE]:
            return val_set_scores.score_pair(model(model_name), data, chosen,
                                             {name: resolved[name] for name in names},
                                             noise_seed, batch_size)
        predictions = val_set_scores.score_pair(model(model_name), data, chosen, [],
                                                noise_seed, batch_size)[0]
        if (model_name, data_name) not in metric_definitions.PAIRS["MCS"]:  # left blank
            return predictions, {ORACLE: np.full(len(chosen), np.nan)}, {}
        size = model(model_name).input_shape[0]
        frames = region.object_masks([data.masks[i] for i in chosen],
                                     [data.boxes[i] for i in chosen], data.image_size, size)
        attended = frames if model_name == "obj" else 1 - frames
        g = region.region_scores(attended[..., None].astype(np.float32), frames)[0]
        return predictions, {ORACLE: g}, {}

    pair_metrics = metric_definitions.PairMetrics(
        metrics, scores_of, lambda name: val_set(name).labels, indices_of)

    resolved = dict(methods or {})  # a method not resolved by the run: once, when scored

    def score(method):
        if method != ORACLE and method not in resolved:
            resolved.update(val_set_scores.resolved_methods([method]))
        values = pair_metrics.score(method)
        if method == ORACLE:  # no oracle for what only the model knows: IDR and IIR blank
            values = {name: found if name == "MCS" else np.full(len(found), np.nan)
                      for name, found in values.items()}
        return values

    model_ids = {name: models.read_info(os.path.join(model_dir, name))["model_id"]
                 for name in ("obj", "scene", "scene_only")
                 if os.path.isdir(os.path.join(model_dir, name))}
    return Benchmark(
        name="BAM", metrics=pair_metrics.metrics, score=score,
        settings={"num_imgs": num_imgs, "seed": seed, "noise_seed": noise_seed,
                  "metrics": list(metrics), "models": model_ids,
                  "data_dir": os.path.abspath(data_dir)},
        # besides its maps, a cell of 50 images took 0.65 s, 0.7x a Deletion cell (prior 64):
        # a method's first trace on each of its models (2026-11-29; docs/report_card.md,
        # "Where the card's time goes")
        cost=9.0 * num_imgs / 10,
        explains=(("BAM", num_imgs * len({pair for metric in metrics
                                          for pair in metric_definitions.PAIRS[metric]})),))


def _resolved(method: str, methods: Optional[dict]) -> dict:
    """{method: its Resolved}: the run's, or resolved now."""
    if methods is not None and method in methods:
        return {method: methods[method]}
    return val_set_scores.resolved_methods([method])


def per_image_rmcs(g: dict, predictions: dict, drops: Sequence[float],
                   label: int = rmcs.BEDROOM) -> np.ndarray:
    """[n]: for each image, the Pearson correlation over k of its contrast g(scene<k>) -
    g(scene10) with the accuracy drops, over the k where both models call it bedroom (NaN
    with fewer than three such k, or a constant contrast)."""
    contrast = np.stack([np.asarray(g[k], np.float64) - np.asarray(g[10], np.float64)
                         for k in rmcs.KS])  # [9, n]
    valid = np.stack([(np.asarray(predictions[k]) == label) &
                      (np.asarray(predictions[10]) == label) for k in rmcs.KS])
    drop = np.broadcast_to(np.asarray(drops, np.float64), contrast.T.shape)
    contrast, valid = contrast.T, valid.T  # [n, 9]
    count = valid.sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        centred = [np.where(valid, x - (np.where(valid, x, 0).sum(axis=1) / count)[:, None], 0)
                   for x in (contrast, drop)]
        spread = np.sqrt((centred[0] ** 2).sum(axis=1) * (centred[1] ** 2).sum(axis=1))
        r = (centred[0] * centred[1]).sum(axis=1) / spread
    return np.where((count >= 3) & (spread > 0), np.clip(r, -1.0, 1.0), np.nan)


def rmcs_benchmark(data_dir: str, model_dir: str, *, num_imgs: int = 50, seed: int = 0,
                   noise_seed: int = 0, batch_size: int = 64,
                   methods: Optional[dict] = None) -> Benchmark:
    """RMCS as a card benchmark (by flag: it needs the ten relative scene models): per image
    of dog_bedroom, the correlation over k of its relative contrast with the accuracy drops
    (docs/report_card.md, "Benchmarks"); higher is better."""
    sources = val_set_scores.Sources(data_dir, model_dir)
    target = sources.val_set(rmcs.TARGET_SET)
    chosen = metric_definitions.sample_indices(len(target.paths),
                                               min(num_imgs, len(target.paths)), seed)
    drops = rmcs.accuracy_drops(data_dir, model_dir, batch_size)

    def score(method):
        if method == ORACLE:
            return {"RMCS r": np.full(len(chosen), np.nan)}
        g, predictions = {}, {}
        resolved = _resolved(method, methods)
        for k in range(1, 11):
            predictions[k], found, _ = val_set_scores.score_pair(
                sources.model(f"scene{k}"), target, chosen, resolved, noise_seed, batch_size)
            g[k] = found[method]
        return {"RMCS r": per_image_rmcs(g, predictions, drops)}

    return Benchmark(
        name="RMCS", metrics=(MetricSpec("RMCS r", True, about="per image: correlation over k of "
                                                         "the relative contrast with the "
                                                         "accuracy drop"),),
        score=score,
        settings={"num_imgs": num_imgs, "seed": seed, "noise_seed": noise_seed,
                  "models": {f"scene{k}": models.read_info(os.path.join(
                      model_dir, f"scene{k}"))["model_id"] for k in range(1, 11)},
                  "data_dir": os.path.abspath(data_dir)},
        cost=10.0 * num_imgs / 10)
