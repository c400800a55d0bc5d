"""Quantus's axiomatic family (docs/measures.md, "Axiomatic"): properties an attribution
should have, checked with the model's outputs on the one batched computation
(`perturbation.band_scores`).

- completeness (Sundararajan et al. 2017): the map's sum equals the output's change from the
  baseline image to the image, f(x) - f(b) (quantus/metrics/axiomatic/completeness.py). Quantus
  compares the two exactly, which float32 rounding breaks for any real attribution; here they
  are equal within `rtol` (1e-5 of |f(x) - f(b)|; `rtol=0` is Quantus's exact test). Logits by
  default (`softmax=False`, as Quantus); `normalise=True` by default, as Quantus, which
  rescales the map and so breaks completeness unless the largest |a| is 1: pass
  `normalise=False` for the paper's test.
- non_sensitivity (Nguyen & Martinez 2020): the number of features where "the output does not
  move when the feature alone is replaced by the baseline" (|f(x) - f(x_i)| < `eps`) and "the
  map gives it no attribution" (a_i < `eps`) disagree; 0 is best (non_sensitivity.py). With
  `features_in_step` > 1 Quantus compares [N, steps] with [N, features] and fails; here each
  feature takes its step's output.
- input_invariance (Kindermans et al. 2019): 1.0 where the map is unchanged (within 1e-4) when
  the input is shifted by `input_shift` and the model by the opposite, so that its outputs are
  the same (input_invariance.py). Quantus shifts the first layer's bias by its response to a
  constant image, which is exact only away from a padded border; here the shifted model
  subtracts the shift before the model, exactly. Needs `explain_func`. Higher is better.
"""
from typing import Any, Optional

import keras
import numpy as np

from faithfulness.measures import perturbation
from faithfulness.measures.arguments import image_ids, prepared
from faithfulness.measures.explaining import explainer, kept_copy
from models.foundation.metric_spec import MetricSpec

SPECS = (
    MetricSpec("completeness", True, about="the map sums to the output's change from the "
                                           "baseline"),
    MetricSpec("non_sensitivity", False, about="features where 'no effect' and 'no "
                                               "attribution' disagree"),
    MetricSpec("input_invariance", True, about="the map is unchanged by a shift of the input "
                                               "the model absorbs"),
)


def completeness(model: Any, x_batch: Any, y_batch: Any, a_batch: Any, s_batch: Any = None,
                 *, abs: bool = False, normalise: bool = True,  # noqa: A002
                 perturb_baseline: Any = "black", softmax: bool = False, rtol: float = 1e-5,
                 batch_size: int = 64) -> np.ndarray:
    """[N] 1.0 where sum(a) equals f(x) - f(baseline) within `rtol`, else 0.0."""
    found = prepared(x_batch, a_batch, s_batch, abs=abs, normalise=normalise)
    everything = np.zeros(found.x.shape, np.int32)  # one band holds every element
    scores = perturbation.scores_of_bands(
        model, found, y_batch, everything, np.array([[0, 0], [0, 1]]), perturb_baseline,
        softmax=softmax, batch_size=batch_size)
    change = scores[:, 0] - scores[:, 1]
    return (np.abs(found.a.sum(axis=1) - change) <= rtol * np.abs(change)).astype(np.float64)


def non_sensitivity(model: Any, x_batch: Any, y_batch: Any, a_batch: Any, s_batch: Any = None,
                    *, eps: float = 1e-5, features_in_step: int = 1,
                    abs: bool = True, normalise: bool = True,  # noqa: A002
                    perturb_baseline: Any = "black", softmax: bool = True,
                    batch_size: int = 64) -> np.ndarray:
    """[N] how many features' "no effect" and "no attribution" disagree."""
    found = prepared(x_batch, a_batch, s_batch, abs=abs, normalise=normalise)
    height, width, channels = found.x.shape[1:]
    lows = perturbation.step_starts(found, features_in_step)
    # rank = the feature's own index (channel first), so step k replaces features k*step...
    index = np.arange(channels * height * width, dtype=np.int32).reshape(channels, height,
                                                                          width)
    ranks = np.broadcast_to(np.transpose(index, (1, 2, 0)), found.x.shape)
    bands = np.stack([lows, lows + features_in_step], axis=1)
    scores = perturbation.scores_of_bands(
        model, found, y_batch, ranks, np.concatenate([[[0, 0]], bands]), perturb_baseline,
        softmax=softmax, batch_size=batch_size)
    unmoved = np.abs(scores[:, 1:] - scores[:, :1]) < eps  # [N, steps]
    unmoved = np.repeat(unmoved, features_in_step, axis=1)[:, :index.size]
    return (unmoved ^ (perturbation.broadcast_features(found) < eps)).sum(axis=1).astype(np.int64)


def shifted_model(source: keras.Model, shift: float) -> keras.Model:
    """A copy of `source` (its weights, fresh layers) taking inputs shifted by `shift` (it
    subtracts the shift first), in one flat graph (no nested model), so that a method reading
    an inner layer (Grad-CAM's features) finds it."""
    subtract = keras.layers.Lambda(lambda images: images - shift, name="input_shift")
    if isinstance(source, keras.Sequential):
        copy = keras.models.clone_model(source)
        shifted = keras.Sequential([keras.Input(source.input_shape[1:]), subtract,
                                    *copy.layers])
    else:
        def call(layer, *args, **kwargs):  # the layers that read the input read it shifted
            args = tuple(subtract(arg) if isinstance(getattr(getattr(
                arg, "_keras_history", None), "operation", None), keras.layers.InputLayer)
                else arg for arg in args)
            return layer(*args, **kwargs)
        shifted = keras.models.clone_model(source, call_function=call)
    shifted.set_weights(source.get_weights())
    return shifted


def input_invariance(model: Any, x_batch: Any, y_batch: Any, a_batch: Any, s_batch: Any = None,
                     *, explain_func: Any = None, explain_func_kwargs: Optional[dict] = None,
                     input_shift: float = -1.0, abs: bool = False,  # noqa: A002
                     normalise: bool = False, seed: int = 0, ids: Any = None,
                     batch_size: int = 64) -> np.ndarray:
    """[N] 1.0 where the shifted model's map of the shifted image equals the map (1e-4)."""
    found = prepared(x_batch, a_batch, s_batch, abs=abs, normalise=normalise)
    classes = perturbation.checked_classes(model, found.x, y_batch)
    shift = float(input_shift)
    shifted = kept_copy(model, ("shifted", shift), "input_invariance shifts the model's input",
                        lambda source: shifted_model(source, shift))
    explain = explainer(shifted, explain_func, explain_func_kwargs, abs=abs,
                        normalise=normalise, map_shape=found.map_shape,
                        batch_size=batch_size, seed=seed)
    ids = image_ids(ids, len(found.x))
    moved = explain(found.x + np.float32(shift), classes, ids)
    return np.all(np.isclose(found.a, moved, atol=1e-4), axis=1).astype(np.float64)
