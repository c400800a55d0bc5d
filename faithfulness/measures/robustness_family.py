"""Quantus's robustness family (docs/measures.md, "Robustness"): how much a map changes when the
input changes a little. Every measure draws `nr_samples` noisy copies of each image, explains
them again through `explaining.explainer` (the attribution engine, batched) in groups of many
images, and reduces a per-sample ratio over the samples (`noisy_ratios`).

- avg_sensitivity / max_sensitivity (Yeh et al. 2019): the mean / largest ||a - a'|| / ||a||
  over inputs x + U(-lower_bound, lower_bound) (avg_sensitivity.py, max_sensitivity.py).
- local_lipschitz_estimate (Alvarez-Melis & Jaakkola 2018): the largest ||a - a'|| /
  (||x - x'|| + 1e-10) over inputs x + N(perturb_mean, perturb_std)
  (local_lipschitz_estimate.py).
- relative_input_stability / relative_output_stability (Agarwal et al. 2022): the largest
  ||(a - a') / a|| / max(||(x - x') / x||, eps_min), or over ||h(x) - h(x')|| (the model's
  logits), over inputs x + U(lower_bound, upper_bound) (Quantus's defaults 0.02 and 0.2; zeros
  in a denominator read eps_min; relative_input_stability.py, relative_output_stability.py).
- relative_representation_stability (Agarwal et al. 2022): the same, over the relative change
  of the model's internal representations, ||(L - L') / L|| with L every chosen layer's output
  flattened and concatenated (`layer_names` or `layer_indices` of the Keras model's layers;
  all of them by default, as Quantus hooks every module;
  relative_representation_stability.py). A Keras layer may hold what PyTorch splits in two (a
  convolution with its activation), so a PyTorch twin's representations, and its values,
  differ from Quantus's by the layers the frameworks list.

- consistency (Dasgupta et al. 2022): for each image, the share of the call's other images
  whose map has the same discrete label (`discretise`) that the model predicts as the same
  class (consistency.py; none: 0). The label is the positions and signs of the map's `n`
  highest values ("top_n_sign", the default); Quantus's `top_n_sign` takes the signs of the
  first n values in memory order (quantus/functions/discretise_func.py, `top_n_sign`:
  `np.sign(a)[:n]`), which after its default `abs` gives every map one label: that reading is
  "first_n_sign". Quantus compares within each of its batches; here within the call.

- continuity (Montavon et al. 2018): the largest ||a - a'||_1 / (||x - x'||_2 + 1e-9) over
  `nr_steps` horizontal translations of the image (from almost a whole width left to almost a
  whole width right, the image's smallest value filling in; continuity.py); with
  `return_nan_when_prediction_changes`, NaN where a translation changes the predicted class
  from `y_batch`. As in Quantus, the map compared is `explain_func`'s map of the image (the
  given `a_batch` only fixes the maps' shape). A translation by 0, which Quantus's steps
  include whenever they reach the middle (28 steps of a 224-pixel image do), is left out: it
  compares an image with itself, and Quantus's ratio there is the explainer's rounding noise
  over 1e-9.

With `return_nan_when_prediction_changes` a sample whose predicted class changes makes the
image's value NaN (Quantus: `changed_prediction_indices` marks nothing unless it is set, and
the reduction is then np.mean / np.max, which keep the NaN). Quantus draws its noise with
`np.random`; here each (image, sample) draw is keyed by `seed`, the sample and the image's id,
so a run is reproducible and the values agree with Quantus's in distribution.
"""
import dataclasses
import functools
import warnings
from typing import Any, Callable, Optional, Sequence

import keras
import numpy as np
import tensorflow as tf

from faithfulness import substrates
from faithfulness.measures import perturbation
from faithfulness.measures.arguments import image_ids, prepared
from faithfulness.measures.explaining import explainer, keras_of
from models.architectures import zoo
from models.foundation import ordering, workload
from models.foundation.errors import UserError, check_one_of
from models.foundation.metric_spec import MetricSpec
from models.foundation.tracing import kept

SPECS = (
    MetricSpec("avg_sensitivity", False, about="mean relative change of the map under small "
                                               "input noise"),
    MetricSpec("max_sensitivity", False, about="largest relative change of the map under "
                                               "small input noise"),
    MetricSpec("local_lipschitz_estimate", False, about="largest change of the map per change "
                                                        "of the input"),
    MetricSpec("relative_input_stability", False, about="largest relative change of the map "
                                                        "per relative change of the input"),
    MetricSpec("relative_output_stability", False, about="largest relative change of the map "
                                                         "per change of the logits"),
    MetricSpec("relative_representation_stability", False,
               about="largest relative change of the map per relative change of the "
                     "internal representations"),
    MetricSpec("consistency", True, about="share of the images with the same discretised map "
                                          "that the model predicts as the same class"),
    MetricSpec("continuity", False, about="largest change of the map per change of the input "
                                          "under horizontal translations"),
)
DISCRETISATIONS = ("top_n_sign", "first_n_sign")

GROUP_BYTES = 1 << 28  # perturbed images held at once


@dataclasses.dataclass(frozen=True)
class Noise:
    """Additive noise per element: uniform in [low, high], or normal (`mean`, `std`)."""

    low: float = 0.0
    high: float = 0.0
    mean: Optional[float] = None
    std: float = 0.0

    def draws(self, keys: np.ndarray, shape: tuple) -> np.ndarray:
        """float32 [len(keys), *shape]: one draw per row of int64 `keys` [n, 2]."""
        keys = tf.constant(keys, tf.int64)
        # in place, in float32, operation by operation as written: low + (u + 1) * 0.5 * width
        # and mean + std * z (the same bytes as the expressions, without their temporaries)
        if self.mean is None:
            drawn = substrates.uniform_noise(keys, list(shape)).numpy()  # U(-1, 1), a copy
            for operation, operand in ((np.add, 1.0), (np.multiply, 0.5),
                                       (np.multiply, self.high - self.low),
                                       (np.add, self.low)):
                operation(drawn, np.float32(operand), out=drawn)
            return drawn
        drawn = substrates.normal_noise(keys, shape).numpy()
        np.multiply(drawn, np.float32(self.std), out=drawn)
        np.add(drawn, np.float32(self.mean), out=drawn)
        return drawn


def uniform(lower_bound: float, upper_bound: Optional[float]) -> Noise:
    """Quantus's `batch_uniform_noise`: U(-lower_bound, lower_bound), or U(lower, upper)."""
    if upper_bound is None:
        return Noise(-lower_bound, lower_bound)
    if upper_bound <= lower_bound:
        raise UserError(f"upper_bound ({upper_bound}) must exceed lower_bound ({lower_bound})")
    return Noise(lower_bound, upper_bound)


def noisy_copies(x: np.ndarray, ids: np.ndarray, samples: range, *, seed: int,
                 noise: Noise) -> np.ndarray:
    """float32 [len(samples) x N, H, W, C], sample-major: x plus `noise`, keyed by (seed,
    sample, image id)."""
    keys = substrates.noise_keys(seed, np.tile(np.asarray(ids, np.int64), len(samples))).numpy()
    keys[:, 0] += np.repeat(np.asarray(samples, np.int64), len(x))  # the sample is the salt
    noisy = noise.draws(keys, x.shape[1:])
    per_sample = noisy.reshape(len(samples), *x.shape)  # a view: x added to every sample
    per_sample += x
    return noisy


# objective(x, x', a, a', logits, logits') -> [S, N]: one value per (sample, image). Each
# argument is [S, N, D] (the last axis an image's flattened values), the clean ones [1, N, D],
# broadcast over the samples rather than copied; x' is float32 (exact in float64 arithmetic),
# the others float64. a' is the objective's own (the explainer's fresh array): it may be
# overwritten, which saves a temporary the size of every noisy map.
Objective = Callable[..., np.ndarray]


def noisy_ratios(model: Any, x_batch: Any, y_batch: Any, a_batch: Any, s_batch: Any, *,
                 objective: Objective, noise: Noise, nr_samples: int, explain_func: Any,
                 explain_func_kwargs: Optional[dict], abs: bool, normalise: bool,  # noqa: A002
                 seed: int, ids: Any, batch_size: int,
                 logits: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """(float64 [N, S] `objective` per noisy sample, bool [N, S] predicted class changed).
    Without `logits` (the objective reads no logits and no caller reads the changes) the
    model's forward passes are left out: the objective gets None for both logits and no
    class reads as changed."""
    if nr_samples < 1:
        raise UserError(f"nr_samples must be at least 1; got {nr_samples}")
    found = prepared(x_batch, a_batch, s_batch, abs=abs, normalise=normalise)
    classes = perturbation.checked_classes(model, found.x, y_batch)
    ids = image_ids(ids, len(found.x))
    explain = explainer(model, explain_func, explain_func_kwargs, abs=abs, normalise=normalise,
                        map_shape=found.map_shape, batch_size=batch_size, seed=seed)
    outputs = perturbation.model_scorer(model, batch_size) if logits else None
    clean_logits = (None if outputs is None else  # [1, N, K], as clean_x and found.a[None]
                    outputs.predict(tf.constant(found.x)).astype(np.float64)[None])
    clean_x = found.x.reshape(1, len(found.x), -1).astype(np.float64)  # [1, N, D]
    per_group = max(1, GROUP_BYTES // max(1, found.x.nbytes))
    values, changed = [], []
    for start in range(0, nr_samples, per_group):  # groups of many images
        samples = range(start, min(nr_samples, start + per_group))
        count = len(samples)
        noisy = noisy_copies(found.x, ids, samples, seed=seed, noise=noise)
        maps = explain(noisy, np.tile(classes, count),
                       np.tile(ids, count) * nr_samples + np.repeat(np.asarray(samples), len(ids)),
                       blocks=count)  # each sample's maps normalised on their own
        per_sample = (count, len(found.x), -1)  # [S, N, D] views of the sample-major rows
        moved_logits = (None if outputs is None else
                        outputs.predict(tf.constant(noisy)).astype(np.float64).reshape(per_sample))
        with np.errstate(divide="ignore", invalid="ignore"):
            found_values = objective(clean_x, noisy.reshape(per_sample), found.a[None],
                                     maps.reshape(per_sample), clean_logits, moved_logits)
        values.append(found_values.T)
        if clean_logits is None or moved_logits is None:
            changed.append(np.zeros((len(found.x), count), bool))
        else:
            changed.append((np.argmax(moved_logits, axis=2) != np.argmax(clean_logits, axis=2)).T)
    return np.concatenate(values, axis=1), np.concatenate(changed, axis=1)


def _reduced(reduce: Callable, values: np.ndarray, changed: np.ndarray,
             nan_when_changed: bool) -> np.ndarray:
    """`reduce` over the samples; with `nan_when_changed`, a changed prediction gives NaN."""
    if nan_when_changed:
        return reduce(np.where(changed, np.nan, values), axis=1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # an image with no finite value
        return np.nanmean(values, axis=1) if reduce is np.mean else np.nanmax(values, axis=1)


def norms_of(owned: np.ndarray) -> np.ndarray:
    """[...]: the Euclidean norm over the last axis of a float array the caller no longer
    needs (squared in place): np.linalg.norm's own sum of squares, the same bytes, without its
    two temporaries of the array's size."""
    np.multiply(owned, owned, out=owned)
    return np.sqrt(np.add.reduce(owned, axis=-1))


def _sensitivity(x, moved, a, maps, logits, moved_logits):
    return norms_of(np.subtract(a, maps, out=maps)) / np.linalg.norm(a, axis=-1)


def _lipschitz(x, moved, a, maps, logits, moved_logits):
    return norms_of(np.subtract(a, maps, out=maps)) / (norms_of(x - moved) + 1e-10)


def _relative_change(first: np.ndarray, second: np.ndarray, eps_min: float,
                     owned: bool = False) -> np.ndarray:
    """[...]: ||(first - second) / first|| over the last axis, a zero of `first` read as
    eps_min; `owned`: `second` (float64, the shape of the result) may be overwritten."""
    change = np.subtract(first, second, out=second if owned else None)
    np.divide(change, first + (first == 0) * eps_min, out=change)
    return norms_of(change)


def _stability(change: np.ndarray, a: np.ndarray, maps: np.ndarray,
               eps_min: float) -> np.ndarray:
    """[n]: the relative map change per `change` (a zero change read as eps_min): the
    relative stabilities' ratio (`maps`, the objective's own, is overwritten)."""
    return _relative_change(a, maps, eps_min, owned=True) / (change + (change == 0) * eps_min)


def input_stability(x: np.ndarray, moved: np.ndarray, a: np.ndarray, maps: np.ndarray,
                    logits: Any = None, moved_logits: Any = None, *,
                    eps_min: float = 1e-6) -> np.ndarray:
    """[n] ||(a - a') / a|| / max(||(x - x') / x||, eps_min) per row (rows: flattened arrays;
    a zero in a denominator reads eps_min), Quantus's `relative_input_stability_objective`;
    `maps` (float64) is overwritten."""
    return _stability(_relative_change(x, moved, eps_min), a, maps, eps_min)


def output_stability(x: Any, moved: Any, a: np.ndarray, maps: np.ndarray, logits: np.ndarray,
                     moved_logits: np.ndarray, *, eps_min: float = 1e-6) -> np.ndarray:
    """[n] ||(a - a') / a|| / max(||h - h'||, eps_min) per row, Quantus's
    `relative_output_stability_objective`; `maps` (float64) is overwritten."""
    return _stability(np.linalg.norm(logits - moved_logits, axis=-1), a, maps, eps_min)


def _measured(reduce: Callable, objective: Objective, noise: Noise, given: dict,
              reads_logits: bool = False) -> np.ndarray:
    """A robustness measure's values: `noisy_ratios` of `objective` under `noise` with the
    call's arguments (`given`: the public function's locals), reduced over the samples; the
    noisy images' logits are computed only when `objective` `reads_logits` or a changed
    prediction gives NaN."""
    nan_when_changed = given["return_nan_when_prediction_changes"]
    values, changed = noisy_ratios(
        given["model"], given["x_batch"], given["y_batch"], given["a_batch"],
        given["s_batch"], objective=objective, noise=noise, nr_samples=given["nr_samples"],
        explain_func=given["explain_func"], explain_func_kwargs=given["explain_func_kwargs"],
        abs=given["abs"], normalise=given["normalise"], seed=given["seed"], ids=given["ids"],
        batch_size=given["batch_size"], logits=reads_logits or nan_when_changed)
    return _reduced(reduce, values, changed, nan_when_changed)


def avg_sensitivity(model: Any, x_batch: Any, y_batch: Any, a_batch: Any, s_batch: Any = None,
                    *, explain_func: Any = None, explain_func_kwargs: Optional[dict] = None,
                    nr_samples: int = 200, lower_bound: float = 0.2,
                    upper_bound: Optional[float] = None, abs: bool = False,  # noqa: A002
                    normalise: bool = False, return_nan_when_prediction_changes: bool = False,
                    seed: int = 0, ids: Any = None, batch_size: int = 64) -> np.ndarray:
    """[N] the mean ||a - a'|| / ||a|| over the noisy samples."""
    return _measured(np.mean, _sensitivity, uniform(lower_bound, upper_bound), locals())


def max_sensitivity(model: Any, x_batch: Any, y_batch: Any, a_batch: Any, s_batch: Any = None,
                    *, explain_func: Any = None, explain_func_kwargs: Optional[dict] = None,
                    nr_samples: int = 200, lower_bound: float = 0.2,
                    upper_bound: Optional[float] = None, abs: bool = False,  # noqa: A002
                    normalise: bool = False, return_nan_when_prediction_changes: bool = False,
                    seed: int = 0, ids: Any = None, batch_size: int = 64) -> np.ndarray:
    """[N] the largest ||a - a'|| / ||a|| over the noisy samples."""
    return _measured(np.max, _sensitivity, uniform(lower_bound, upper_bound), locals())


def local_lipschitz_estimate(model: Any, x_batch: Any, y_batch: Any, a_batch: Any,
                             s_batch: Any = None, *, explain_func: Any = None,
                             explain_func_kwargs: Optional[dict] = None, nr_samples: int = 200,
                             perturb_mean: float = 0.0, perturb_std: float = 0.1,
                             abs: bool = False, normalise: bool = True,  # noqa: A002
                             return_nan_when_prediction_changes: bool = False, seed: int = 0,
                             ids: Any = None, batch_size: int = 64) -> np.ndarray:
    """[N] the largest ||a - a'|| / ||x - x'|| over the noisy samples."""
    return _measured(np.max, _lipschitz, Noise(mean=perturb_mean, std=perturb_std), locals())


def relative_input_stability(model: Any, x_batch: Any, y_batch: Any, a_batch: Any,
                             s_batch: Any = None, *, explain_func: Any = None,
                             explain_func_kwargs: Optional[dict] = None, nr_samples: int = 200,
                             lower_bound: float = 0.02, upper_bound: Optional[float] = 0.2,
                             eps_min: float = 1e-6, abs: bool = False,  # noqa: A002
                             normalise: bool = False,
                             return_nan_when_prediction_changes: bool = True, seed: int = 0,
                             ids: Any = None, batch_size: int = 64) -> np.ndarray:
    """[N] the largest relative map change per relative input change."""
    return _measured(np.max, functools.partial(input_stability, eps_min=eps_min),
                     uniform(lower_bound, upper_bound), locals())


def relative_output_stability(model: Any, x_batch: Any, y_batch: Any, a_batch: Any,
                              s_batch: Any = None, *, explain_func: Any = None,
                              explain_func_kwargs: Optional[dict] = None, nr_samples: int = 200,
                              lower_bound: float = 0.02, upper_bound: Optional[float] = 0.2,
                              eps_min: float = 1e-6, abs: bool = False,  # noqa: A002
                              normalise: bool = False,
                              return_nan_when_prediction_changes: bool = True, seed: int = 0,
                              ids: Any = None, batch_size: int = 64) -> np.ndarray:
    """[N] the largest relative map change per change of the logits."""
    return _measured(np.max, functools.partial(output_stability, eps_min=eps_min),
                     uniform(lower_bound, upper_bound), locals(), reads_logits=True)


def representation_reader(model: Any, layer_names: Optional[Sequence[str]] = None,
                          layer_indices: Optional[Sequence[int]] = None) -> Any:
    """A traced Keras model giving the chosen layers' outputs (a list) of the Keras model (or
    the zoo model an export holds): all of its layers by default, as Quantus hooks every
    module. Kept with the model, so its trace serves every call."""
    if layer_names is not None and layer_indices is not None:
        raise UserError("give layer_names or layer_indices, not both")
    source = keras_of(model, "relative_representation_stability reads the model's layers")
    layers = [layer for layer in source.layers if not isinstance(layer, keras.layers.InputLayer)]
    if layer_names is not None:
        missing = sorted(set(layer_names) - {layer.name for layer in layers})
        if missing:
            raise UserError(f"layer_names: the model has no layer {', '.join(missing)}")
        layers = [layer for layer in layers if layer.name in layer_names]
    elif layer_indices is not None:
        try:
            layers = [layers[int(index)] for index in layer_indices]
        except IndexError:
            raise UserError(f"layer_indices: the model has {len(layers)} layers; got "
                            f"{list(layer_indices)}") from None
    if not layers:
        raise UserError("no layer chosen for the internal representations")
    return kept(source, ("representation reader", *(layer.name for layer in layers)),
                lambda: tf.function(keras.Model(source.inputs, [
                    zoo.output_in_model(source, layer) for layer in layers]),
                    reduce_retracing=True))  # traced: 1.3x an eager read


LAYER_VALUES = 1 << 25  # one layer's output values over the rows read at once (128 MiB)


def representation_change(reader: Any, x: np.ndarray, moved: np.ndarray,
                          eps_min: float = 1e-6) -> np.ndarray:
    """float64 [S, N]: ||(L - L') / L|| of every sample-major row of `moved` ([S x N, H, W,
    C]: sample s of image n at row s N + n), L the outputs of `reader`'s layers for the image
    x[n] ([N, H, W, C]), L' for the row, over every layer's values. Each read is one traced
    call that compares every layer in float64 as soon as the forward pass has it
    (`_traced_change`), so a read holds about what a forward pass holds. Images are taken in
    blocks whose clean and noisy rows give the largest layer at most `LAYER_VALUES` values;
    where one image's rows give more, its rows are read in chunks, its clean image read again
    with each chunk."""
    images = len(x)
    samples = len(moved) // images
    at_once = max(2, LAYER_VALUES // _largest_layer_values(reader))  # rows read at once
    per_block = max(1, at_once // (samples + 1))  # images whose rows are read together
    change = kept(reader, ("representation change", eps_min),
                  lambda: _traced_change(reader, eps_min))
    squares = np.empty(len(moved))
    for first in range(0, images, per_block):  # a memory bound, not a batching
        block = np.arange(first, min(images, first + per_block))
        rows = (np.arange(samples)[None, :] * images + block[:, None]).ravel()  # image-major
        chunk = max(1, at_once - len(block))
        for start in range(0, len(rows), chunk):
            chosen = rows[start:start + chunk]
            workload.count("forward", len(block) + len(chosen))  # to the last layer read
            squares[chosen] = change(
                tf.constant(x[block], tf.float32), tf.constant(moved[chosen], tf.float32),
                tf.constant(chosen % images - first, tf.int32)).numpy()
    return np.sqrt(squares).reshape(samples, images)


def _largest_layer_values(reader: Any) -> int:
    """The values of one image's output of the largest layer `reader` reads."""
    return max(int(np.prod(output.shape[1:])) for output in reader.python_function.outputs)


def _traced_change(reader: Any, eps_min: float) -> Any:
    """The traced (clean [b, ...], noisy [r, ...], owner int32 [r]) -> float64 [r]: the sum over
    `reader`'s layers of ||(L - L') / L||^2, L the layer's output for clean[owner] and L' for
    the noisy row (a zero of L read as `eps_min`). Every image is read in one pass; each
    layer's comparison is its own XLA program (its float64 temporaries fused) in the pass's
    graph, so the runtime frees a layer's output once the next layers and its comparison have
    read it, where one program over every layer held all of them."""
    @tf.function(jit_compile=True, reduce_retracing=True)
    def compare(output: tf.Tensor, own: tf.Tensor, owner: tf.Tensor) -> tf.Tensor:
        flat = tf.reshape(output, [tf.shape(output)[0], -1])
        # cast once the rows are picked: a cast of the whole output first was a pass of its
        # own (docs/measures.md, "Speed"), with the same values
        first = tf.cast(tf.gather(flat[:own], owner), tf.float64)
        relative = (first - tf.cast(flat[own:], tf.float64)) / (
            first + tf.cast(tf.equal(first, 0.0), tf.float64) * eps_min)
        return tf.reduce_sum(tf.square(relative), axis=1)

    @tf.function(reduce_retracing=True)
    def change(clean: tf.Tensor, noisy: tf.Tensor, owner: tf.Tensor) -> tf.Tensor:
        found = reader.python_function(tf.concat([clean, noisy], axis=0), training=False)
        found = found if isinstance(found, (list, tuple)) else [found]
        own = tf.shape(clean)[0]
        total = tf.zeros([tf.shape(owner)[0]], tf.float64)
        for output in found:  # in the layers' order, as one program summed them
            total += compare(output, own, owner)
        return total
    return change


def representation_stability(inner: np.ndarray, moved_inner: np.ndarray, a: np.ndarray,
                             maps: np.ndarray, *, eps_min: float = 1e-6) -> np.ndarray:
    """[n] ||(a - a') / a|| / max(||(L - L') / L||, eps_min) per row, Quantus's
    `relative_representation_stability_objective` (L, L': the rows' representations);
    `maps` (float64) is overwritten."""
    return _stability(_relative_change(inner, moved_inner, eps_min), a, maps, eps_min)


def relative_representation_stability(
        model: Any, x_batch: Any, y_batch: Any, a_batch: Any, s_batch: Any = None, *,
        explain_func: Any = None, explain_func_kwargs: Optional[dict] = None,
        nr_samples: int = 200, lower_bound: float = 0.02, upper_bound: Optional[float] = 0.2,
        eps_min: float = 1e-6, layer_names: Optional[Sequence[str]] = None,
        layer_indices: Optional[Sequence[int]] = None, abs: bool = False,  # noqa: A002
        normalise: bool = False, return_nan_when_prediction_changes: bool = True,
        seed: int = 0, ids: Any = None, batch_size: int = 64) -> np.ndarray:
    """[N] the largest relative map change per relative change of the internal
    representations."""
    reader = representation_reader(model, layer_names, layer_indices)
    image_shape = tuple(np.shape(x_batch)[1:])

    def objective(x, moved, a, maps, logits, moved_logits):  # x [1, N, D], moved [S, N, D]
        change = representation_change(reader, x.reshape(-1, *image_shape),
                                       moved.reshape(-1, *image_shape), eps_min)
        return _stability(change, a, maps, eps_min)
    return _measured(np.max, objective, uniform(lower_bound, upper_bound), locals())


def discrete_labels(a: np.ndarray, discretise: str, n: int) -> np.ndarray:
    """int [N]: equal for maps ([N, F]) with the same discretisation: the positions and signs
    of their `n` highest values ("top_n_sign"), or the signs of their first n values
    ("first_n_sign", Quantus 0.6's reading)."""
    check_one_of("discretise", discretise, DISCRETISATIONS)
    if discretise == "first_n_sign":
        keys = np.sign(a[:, :n])
    else:
        top = ordering.top_order(a, n, descending=True)
        keys = np.concatenate([top, np.sign(np.take_along_axis(a, top, axis=1))], axis=1)
    return np.unique(keys, axis=0, return_inverse=True)[1].reshape(-1)


def consistency(model: Any, x_batch: Any, y_batch: Any, a_batch: Any, s_batch: Any = None, *,
                discretise: str = "top_n_sign", n: int = 5, abs: bool = True,  # noqa: A002
                normalise: bool = True, batch_size: int = 64) -> np.ndarray:
    """[N] the share of the call's images with the same discretised map that share the
    image's predicted class."""
    if n < 1:
        raise UserError(f"n must be at least 1; got {n}")
    found = prepared(x_batch, a_batch, s_batch, abs=abs, normalise=normalise)
    labels = discrete_labels(found.a, discretise, n)
    predicted = np.argmax(perturbation.outputs(model, found.x, batch_size), axis=1)
    others = ~np.eye(len(labels), dtype=bool)
    same_map = (labels[None, :] == labels[:, None]) & others
    same_class = predicted[None, :] == predicted[:, None]
    return (same_map & same_class).sum(axis=1) / (same_map.sum(axis=1) + 1e-9)


def translations(x: np.ndarray, shifts: np.ndarray) -> np.ndarray:
    """float32 [len(shifts) x N, H, W, C], shift-major: each image moved by each shift along
    its width (right for positive), the image's smallest value filling the columns it
    leaves (Quantus's `batched_translation` with the "black" baseline)."""
    width = x.shape[2]
    source = np.arange(width)[None, :] - shifts[:, None]  # [S, W]: the column each reads
    inside = (source >= 0) & (source < width)
    moved = np.take(x, np.clip(source, 0, width - 1), axis=2)  # [N, H, S, W, C]
    moved = np.moveaxis(moved, 2, 0)  # [S, N, H, W, C]
    black = x.reshape(len(x), -1).min(axis=1)[None, :, None, None, None]
    moved = np.where(inside[:, None, None, :, None], moved, black)
    return moved.reshape(-1, *x.shape[1:]).astype(np.float32)


def continuity(model: Any, x_batch: Any, y_batch: Any, a_batch: Any, s_batch: Any = None, *,
               explain_func: Any = None, explain_func_kwargs: Optional[dict] = None,
               nr_steps: int = 28, abs: bool = True, normalise: bool = True,  # noqa: A002
               return_nan_when_prediction_changes: bool = False, seed: int = 0,
               ids: Any = None, batch_size: int = 64) -> np.ndarray:
    """[N] the largest ||a - a'||_1 / ||x - x'||_2 over the translations."""
    found = prepared(x_batch, a_batch, s_batch, abs=abs, normalise=normalise)
    width = found.x.shape[2]
    if not 1 <= nr_steps <= 2 * width + 1:
        raise UserError(f"nr_steps must be between 1 and {2 * width + 1} (twice the width and "
                        f"one); got {nr_steps}")
    classes = perturbation.checked_classes(model, found.x, y_batch)
    ids = image_ids(ids, len(found.x))
    explain = explainer(model, explain_func, explain_func_kwargs, abs=abs, normalise=normalise,
                        map_shape=found.map_shape, batch_size=batch_size, seed=seed)
    step = (2 * width + 1) // nr_steps
    shifts = -width + step * np.arange(1, nr_steps + 1)
    shifts = shifts[shifts != 0]  # (a translation by 0 compares the image with itself)
    own = explain(found.x, classes, ids)  # Quantus's a: the image's own map
    flat = found.x.reshape(len(found.x), -1)
    per_group = max(1, GROUP_BYTES // max(1, found.x.nbytes))
    values, changed = [], []
    for start in range(0, len(shifts), per_group):  # groups of many images
        chosen = shifts[start:start + per_group]
        count = len(chosen)
        moved = translations(found.x, chosen)
        maps = explain(moved, np.tile(classes, count), np.tile(ids, count), blocks=count)
        gaps = np.abs(np.tile(own, (count, 1)) - maps).sum(axis=1)
        inputs = np.linalg.norm(np.tile(flat, (count, 1)) - moved.reshape(len(moved), -1),
                                axis=1)
        values.append((gaps / (inputs + 1e-9)).reshape(count, -1).T)
        predicted = np.argmax(perturbation.outputs(model, moved, batch_size), axis=1)
        changed.append((predicted != np.tile(classes, count)).reshape(count, -1).T)
    found_values = np.concatenate(values, axis=1)
    if return_nan_when_prediction_changes:
        found_values = np.where(np.concatenate(changed, axis=1), np.nan, found_values)
    return np.max(found_values, axis=1)
