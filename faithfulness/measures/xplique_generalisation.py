"""Xplique's algorithmic-stability metrics (docs/measures.md, "Xplique"): MeGe and ReCo (Fel,
Vigouroux et al. 2020, xplique/metrics/representativity.py, `MeGe`), one value per call, as
Xplique's `evaluate` returns them.

The call's images are cut into `k_splits` equal folds; model i is trained without fold i (by
`learning_algorithm(x_train, y_train, x_test, y_test)`, or given: `model` a sequence of the k
models in fold order). Every model explains every image for its class. For each pair of models
(i, j) and each image of fold i or fold j (one of the two has not seen it), where at least one
of them predicts the image's class, the Spearman distance sqrt(1 - |rho|) of the two maps
(averaged over the channels, NaN read as 0) joins S= when the two predict alike and S!= when
not (NaN distances are left out).

- mege: 1 / (1 + mean(S=)); higher is better (a model's map tells about the others').
- reco: the largest TPR + TNR - 1 over thresholds gamma taken from the sorted distances (every
  (len // 20 + 1)-th, as Xplique), TPR the share of S= below gamma and TNR the share of S!=
  above it; higher is better (the maps tell agreeing models from disagreeing ones).
"""
import hashlib
from typing import Any, Callable, Optional, Sequence

import keras
import numpy as np

from faithfulness import stats
from faithfulness.measures import explaining, perturbation
from faithfulness.measures.arguments import prepared
from models.foundation.errors import UserError
from models.foundation.metric_spec import MetricSpec
from models.foundation.tracing import kept

SPECS = (
    MetricSpec("mege", True, unit="call",
               about="how alike the maps of models trained without one fold each are where "
                     "they agree (Xplique's MeGe)",
               note="one value per group of images (its folds' models): no interval, no "
                    "ranking by the bootstrap, no trust row."),
    MetricSpec("reco", True, unit="call",
               about="how well the maps' distances tell agreeing models from disagreeing ones "
                     "(Xplique's ReCo)",
               note="one value per group of images: no interval, no ranking by the bootstrap, "
                    "no trust row."),
)


def fold_of(count: int, k_splits: int) -> np.ndarray:
    """int [count]: each image's fold, `k_splits` equal runs in the call's order."""
    return np.arange(count) // (count // k_splits)


def fold_models(model: Any, x: np.ndarray, classes: np.ndarray, k_splits: int,
                learning_algorithm: Optional[Callable]) -> list:
    """The k models, model i trained without fold i: `model` itself where it is a sequence of
    them, else those `learning_algorithm` trains (one-hot labels, as Xplique)."""
    if k_splits < 2 or len(x) % k_splits:
        raise UserError(f"k_splits must be at least 2 and divide the {len(x)} images; got "
                        f"{k_splits}")
    if isinstance(model, (list, tuple)):
        if len(model) != k_splits:
            raise UserError(f"model holds {len(model)} models; k_splits is {k_splits}")
        return list(model)
    if learning_algorithm is None:
        raise UserError("mege and reco need k models, model i trained without fold i: pass "
                        "model=[...] (in fold order) or a learning_algorithm")
    outputs = perturbation.class_count(model, x) if model is not None else int(classes.max()) + 1
    one_hot = np.eye(outputs, dtype=np.float32)[classes]
    folds = fold_of(len(x), k_splits)
    return [learning_algorithm(x[folds != fold], one_hot[folds != fold], x[folds == fold],
                               one_hot[folds == fold]) for fold in range(k_splits)]


def retrained(model: Any, epochs: int = 20, seed: int = 0, batch_size: int = 32) -> Callable:
    """A `learning_algorithm` for the binaries and the card: `model`'s architecture (a Keras
    model, or the zoo model an export holds) re-initialised with a seed per fold and trained
    on the other folds (Adam, 1e-3, cross-entropy on the logits, `epochs` epochs), so each
    fold's model has seen all images but its fold's."""
    source = explaining.keras_of(model, "mege and reco retrain the model's architecture")
    calls = [0]

    def learning_algorithm(x_train, y_train, x_test, y_test):
        keras.utils.set_random_seed(seed * 1_000 + calls[0])
        calls[0] += 1
        fresh = keras.models.clone_model(source)
        fresh.compile(optimizer=keras.optimizers.Adam(1e-3),
                      loss=keras.losses.CategoricalCrossentropy(from_logits=True))
        # its variables made before the training step is traced, not inside it: made inside,
        # TensorFlow keeps about 100 MB more of a real network's trace after the model is gone
        fresh.optimizer.build(fresh.trainable_variables)
        fresh.fit(x_train, y_train, epochs=epochs, batch_size=batch_size, shuffle=True,
                  verbose=0)
        return fresh
    return learning_algorithm


def retrained_folds(model: Any, x: np.ndarray, classes: np.ndarray, k_splits: int,
                    epochs: int, seed: int) -> list:
    """`fold_models` trained by `retrained`, kept with `model` for the next call on the same
    images, classes and settings: the folds' models do not depend on the maps, so mege and reco
    of one group, and every method's, share one training (the same models a fresh training
    gives: it is seeded). Only the last call's models are kept: a binary's next group of
    images replaces them."""
    key = (hashlib.sha256(x.tobytes()).hexdigest(), x.shape,
           hashlib.sha256(classes.tobytes()).hexdigest(), k_splits, epochs, seed)
    last: dict[tuple, list] = kept(model, "mege and reco's fold models", dict)  # one entry
    if key not in last:
        last.clear()
        last[key] = fold_models(model, x, classes, k_splits, retrained(model, epochs, seed))
    return last[key]


def distances(models: Sequence[Any], x: np.ndarray, classes: np.ndarray, explain: Callable,
              batch_size: int = 64) -> tuple[np.ndarray, np.ndarray]:
    """(S=, S!=): the Spearman distances of the pairs of maps, as the module's note says."""
    k_splits = len(models)
    folds = fold_of(len(x), k_splits)
    predicted = np.stack([np.argmax(perturbation.outputs(model, x, batch_size), axis=1)
                          for model in models])  # [k, N]
    maps = [np.nan_to_num(explain(model, x, classes)) for model in models]
    equal, unequal = [], []
    for i in range(k_splits):  # k (k - 1) / 2 pairs of models, every image at once
        for j in range(i + 1, k_splits):
            rows = (folds == i) | (folds == j)
            rho = stats.spearman(maps[i][rows], maps[j][rows])
            distance = np.sqrt(1.0 - np.abs(rho))
            right = (predicted[i, rows] == classes[rows]) | (predicted[j, rows] == classes[rows])
            same = predicted[i, rows] == predicted[j, rows]
            equal.append(distance[right & same])
            unequal.append(distance[right & ~same])
    found = np.concatenate(equal), np.concatenate(unequal)
    return found[0][~np.isnan(found[0])], found[1][~np.isnan(found[1])]


def _explainer(explain_func: Any, explain_func_kwargs: Optional[dict], batch_size: int,
               seed: int) -> Callable:
    """`explain(model, x, classes)` -> float64 [N, H W]: the method's maps of `model`
    (`explaining.raw_explainer`) averaged over their channels (Xplique's
    `_sanitize_explanation`)."""
    # checked (a missing function, an unknown name) before any fold's model is trained
    explaining.raw_explainer(None, explain_func, explain_func_kwargs)

    def explain(model, x, classes):
        maps = np.asarray(explaining.raw_explainer(
            model, explain_func, explain_func_kwargs, batch_size=batch_size, seed=seed)(
                x, classes, None), np.float64)
        if maps.ndim == 4:
            maps = maps.mean(axis=-1)
        return maps.reshape(len(x), -1)
    return explain


def mege_and_reco(model: Any, x_batch: Any, y_batch: Any, a_batch: Any = None,
                  s_batch: Any = None, *, explain_func: Any = None,
                  explain_func_kwargs: Optional[dict] = None, k_splits: int = 4,
                  learning_algorithm: Any = None, fold_epochs: int = 20,
                  batch_size: int = 64, seed: int = 0) -> tuple[float, float]:
    """(MeGe, ReCo) of the call's images (the module's note); `learning_algorithm` "retrain"
    retrains `model`'s architecture for `fold_epochs` epochs per fold, once per images and
    settings (`retrained_folds`)."""
    if isinstance(learning_algorithm, str) and learning_algorithm != "retrain":
        raise UserError(f"learning_algorithm must be a callable or 'retrain'; got "
                        f"{learning_algorithm!r}")
    x = np.asarray(x_batch, np.float32)
    if a_batch is not None or s_batch is not None:
        prepared(x, a_batch if a_batch is not None else np.zeros(x.shape[:3]), s_batch,
                 abs=False, normalise=False)  # only checked: every fold's model explains
    labels = np.asarray(y_batch, np.int64)
    if learning_algorithm == "retrain":
        models = retrained_folds(model, x, labels, k_splits, fold_epochs, seed)
    else:
        models = fold_models(model, x, labels, k_splits, learning_algorithm)
    for candidate in models:
        if not isinstance(candidate, keras.Model) and not hasattr(candidate, "path"):
            raise UserError("model: each fold's model must be a Keras model or a loaded export")
    classes = perturbation.checked_classes(models[0], x, y_batch)
    equal, unequal = distances(models, x, classes,
                               _explainer(explain_func, explain_func_kwargs, batch_size, seed),
                               batch_size)
    return _mege(equal), _reco(equal, unequal)


def _mege(equal: np.ndarray) -> float:
    return float(1.0 / (1.0 + np.mean(equal))) if len(equal) else float("nan")


def _reco(equal: np.ndarray, unequal: np.ndarray) -> float:
    """The largest TPR + TNR - 1 over Xplique's thresholds (0 at least, as Xplique starts)."""
    total = np.sort(np.concatenate([equal, unequal]))
    gammas = total[::len(total) // 20 + 1][:, None]
    tp, fn = (equal[None] < gammas).sum(axis=1), (equal[None] > gammas).sum(axis=1)
    tn, fp = (unequal[None] > gammas).sum(axis=1), (unequal[None] < gammas).sum(axis=1)
    found = tp / (tp + fn + 1e-10) + tn / (tn + fp + 1e-10) - 1.0
    return float(max(0.0, found.max())) if len(found) else 0.0


def mege(model: Any, x_batch: Any, y_batch: Any, a_batch: Any = None, s_batch: Any = None, *,
         explain_func: Any = None, explain_func_kwargs: Optional[dict] = None,
         k_splits: int = 4, learning_algorithm: Any = None, fold_epochs: int = 20,
         batch_size: int = 64, seed: int = 0) -> np.ndarray:
    """[1] Xplique's MeGe of the call: 1 / (1 + the mean distance of agreeing models' maps)."""
    return np.array([mege_and_reco(**locals())[0]])


def reco(model: Any, x_batch: Any, y_batch: Any, a_batch: Any = None, s_batch: Any = None, *,
         explain_func: Any = None, explain_func_kwargs: Optional[dict] = None,
         k_splits: int = 4, learning_algorithm: Any = None, fold_epochs: int = 20,
         batch_size: int = 64, seed: int = 0) -> np.ndarray:
    """[1] Xplique's ReCo of the call: the maps' best separation of agreeing from disagreeing
    models."""
    return np.array([mege_and_reco(**locals())[1]])
