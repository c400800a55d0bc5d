"""The one batched computation of the perturbation measures (docs/measures.md, "Faithfulness"):
the model's output for the explained class on every (image, step) perturbation, every item of
every image scored in fixed-size chunks inside one traced function (the chunked executor,
`models.foundation.executor`).

A perturbation is a band of ranks: step k of image i replaces the elements whose rank lies in
[low_k, high_k) by the image's baseline (or, with `keep`, keeps them and replaces all others).
Ranks are Quantus's feature order: the map broadcast to the image's channels, flattened
channel first, sorted by decreasing value (`element_ranks`; the lower index first on ties,
where Quantus's sort leaves ties unspecified).
"""
import math
from typing import Any, Callable

import numpy as np
import tensorflow as tf

from faithfulness import scorer as scoring
from faithfulness.measures.arguments import Prepared
from models.formats.adapter import adapt
from models.foundation import executor, ordering, workload
from models.foundation.errors import ShapeError, UserError
from models.foundation.tracing import kept


def element_ranks(found: Prepared, descending: bool = True) -> np.ndarray:
    """int32 [N, H, W, C]: each image element's place in the order of the map's features
    (`broadcast_features`), highest first (or lowest first)."""
    height, width, channels = found.x.shape[1:]
    if found.map_shape[0] == 1:  # one map broadcast over the channels: rank it once
        ranks = ordering.places_repeated(found.a, channels, descending)
    else:
        ranks = ordering.places(broadcast_features(found), descending)
    return np.transpose(ranks.reshape(len(ranks), channels, height, width),
                        (0, 2, 3, 1)).astype(np.int32)


def region_sums(values: np.ndarray, regions: np.ndarray,
                count: int) -> tuple[np.ndarray, np.ndarray]:
    """(sums float64 [N, count], pixels int [N, count]): per image, the sum of `values` ([N,
    C x H x W], channel first) over each region's pixels, and its number of pixels; `regions`
    int [N, H W] (or [H W], the same for every image) numbers each pixel's region."""
    per_pixel = values.reshape(len(values), -1, np.shape(regions)[-1]).sum(axis=1)
    keyed = (np.arange(len(values))[:, None] * count
             + np.broadcast_to(regions, per_pixel.shape)).ravel()
    sums = np.bincount(keyed, weights=per_pixel.ravel(), minlength=len(values) * count)
    pixels = np.bincount(keyed, minlength=len(values) * count)
    return sums.reshape(len(values), count), pixels.reshape(len(values), count)


def region_ranks(found: Prepared, regions: np.ndarray, scores: np.ndarray,
                 descending: bool = True) -> np.ndarray:
    """int32 [N, H, W, C]: each element's region's place in the order of the regions'
    `scores` ([N, R]); `regions` int [N, H W] (or [H W]) numbers each pixel's region."""
    height, width, channels = found.x.shape[1:]
    pixels = np.broadcast_to(regions, (len(scores), height * width))
    ranks = np.take_along_axis(ordering.places(scores, descending), pixels, axis=1)
    return np.repeat(ranks.reshape(len(scores), height, width, 1), channels,
                     axis=3).astype(np.int32)


def broadcast_features(found: Prepared) -> np.ndarray:
    """float64 [N, C x H x W]: the map broadcast over the image's channels, channel first."""
    height, width, channels = found.x.shape[1:]
    maps = found.a.reshape(len(found.a), -1, height, width)
    return np.broadcast_to(maps, (len(maps), channels, height, width)).reshape(len(maps), -1)


def step_starts(found: Prepared, features_in_step: int) -> np.ndarray:
    """int64 [K]: the first rank of each step of `features_in_step` values (which must divide
    the image's pixels, as Quantus asserts)."""
    height, width, channels = found.x.shape[1:]
    if features_in_step < 1 or (height * width) % features_in_step:
        raise UserError(f"features_in_step must divide the image's {height * width} pixels; "
                        f"got {features_in_step}")
    steps = math.ceil(height * width * channels / features_in_step)
    return np.arange(steps, dtype=np.int64) * features_in_step


def step_sums(found: Prepared, features_in_step: int, steps: int,
              descending: bool = True) -> np.ndarray:
    """float64 [N, steps]: the map's values in rank order (`broadcast_features`, highest
    first or lowest first) summed over each step of `features_in_step` (the last step short
    where they run out)."""
    ranked = np.sort(broadcast_features(found), axis=1)
    ranked = ranked[:, ::-1] if descending else ranked
    wanted = steps * features_in_step
    ranked = np.pad(ranked[:, :wanted], ((0, 0), (0, max(0, wanted - ranked.shape[1]))))
    return ranked.reshape(len(ranked), steps, features_in_step).sum(axis=2)


def class_outputs(adapter: Any, images: tf.Tensor, classes: tf.Tensor,
                  softmax: bool) -> tf.Tensor:
    """float32 [n]: the model's output (softmax probability, or logit) for each image's class
    (`classes` [n]), inside a traced function."""
    outputs = tf.cast(adapter.logits(images), tf.float32)
    if softmax:
        outputs = tf.nn.softmax(outputs)
    return tf.gather(outputs, classes, batch_dims=1)


@tf.function(jit_compile=True)
def _band_images(x, ranks, bands, baseline, items, keep):
    """The perturbed images of a chunk of (image, band) items: an element takes the item's
    `baseline` value where its rank lies in the item's band (or, with `keep`, outside it).
    Compiled with XLA so that the gathers, the comparisons and the select are one pass over the
    chunk (docs/measures.md, "Speed"); exact: each element is one value or the other."""
    steps = tf.shape(bands)[0]
    image, step = items // steps, items % steps
    band = tf.gather(bands, step)[:, None, None, None, :]
    own = tf.gather(ranks, image)
    inside = (own >= band[..., 0]) & (own < band[..., 1])
    return tf.where(inside != keep, tf.gather(baseline, items)[:, None, None, None],
                    tf.gather(x, image))


def band_scores(model: Any, x: np.ndarray, ranks: np.ndarray, bands: np.ndarray,
                baseline: np.ndarray, classes: np.ndarray, *, keep: bool = False,
                softmax: bool = True, batch_size: int = 64) -> np.ndarray:
    """float64 [N, K]: the output (softmax probability, or logit) for `classes` of every image
    of `x` ([N, H, W, C], the model's input space) perturbed at each of the K `bands` ([K, 2]
    int: low, high ranks of `ranks`, [N, H, W, C]); a perturbed element takes its image's
    `baseline` value ([N], or [N, K]: one per image and band), or with `keep` only the band
    keeps `x`."""
    adapter = adapt(model)
    height, width, channels = (int(size) for size in x.shape[1:])
    image = tf.TensorSpec([None, height, width, channels], tf.float32)
    signature = [image, tf.TensorSpec([None, height, width, channels], tf.int32),
                 tf.TensorSpec([None, 2], tf.int32), tf.TensorSpec([None], tf.float32),
                 tf.TensorSpec([None], tf.int32)]  # the baseline: one value per item

    def build():
        # autograph off: the executor builds its loop explicitly
        @tf.function(input_signature=signature, autograph=False)
        def run(x, ranks, bands, baseline, classes):
            steps = tf.shape(bands)[0]

            def compute(items):
                image = items // steps
                perturbed = tf.ensure_shape(_band_images(x, ranks, bands, baseline, items, keep),
                                            [items.shape[0], height, width, channels])
                return class_outputs(adapter, perturbed, tf.gather(classes, image), softmax)
            return executor.collect(tf.shape(x)[0] * steps, chunk, compute)
        return run

    chunk = executor.chunk_size(len(x) * len(bands), batch_size)
    key = ("measure bands", height, width, channels, keep, softmax, chunk)
    run = adapter.traced(key, build)
    workload.count("forward", len(x) * len(bands))
    per_item = np.broadcast_to(np.asarray(baseline, np.float32).reshape(len(x), -1),
                               (len(x), len(bands))).ravel()
    values = run(tf.constant(x, tf.float32), tf.constant(ranks, tf.int32),
                 tf.constant(np.asarray(bands), tf.int32),
                 tf.constant(per_item, tf.float32), tf.constant(classes, tf.int32))
    return values.numpy().reshape(len(x), len(bands)).astype(np.float64)


def clean_scores(model: Any, x: np.ndarray, classes: np.ndarray, *, softmax: bool = True,
                 batch_size: int = 64) -> np.ndarray:
    """float64 [N]: the output for `classes` of the unperturbed images (an empty band)."""
    ranks = np.zeros(x.shape, np.int32)
    return band_scores(model, x, ranks, np.array([[0, 0]]), np.zeros(len(x), np.float32),
                       classes, softmax=softmax, batch_size=batch_size)[:, 0]


def baseline_values(x: np.ndarray, perturb_baseline: Any) -> np.ndarray:
    """float32 [N]: Quantus's fixed baseline of each image, the value a replaced element
    takes: "black" the image's smallest value, "white" its largest, "mean" its mean, or a
    number (quantus/helpers/utils.py, `get_baseline_dict`: per sample over every element)."""
    if isinstance(perturb_baseline, str) and perturb_baseline not in ("black", "white",
                                                                      "mean"):
        try:  # a number given as a flag's text
            perturb_baseline = float(perturb_baseline)
        except ValueError:
            pass
    if isinstance(perturb_baseline, (int, float)) and not isinstance(perturb_baseline, bool):
        return np.full(len(x), perturb_baseline, np.float32)
    values: dict[str, Callable[..., np.ndarray]] = {"black": np.min, "white": np.max,
                                                    "mean": np.mean}
    if perturb_baseline not in values:
        raise UserError(f"perturb_baseline {perturb_baseline!r} is not supported; use "
                        "'black', 'white', 'mean' or a number")
    return values[perturb_baseline](x.reshape(len(x), -1), axis=1).astype(np.float32)


def model_scorer(model: Any, batch_size: int = 64) -> scoring.Scorer:
    """A scorer of `model`'s outputs (logits), kept with the model per batch size, so its
    traced prediction serves every call."""
    return kept(model, ("measures' scorer", int(batch_size)),
                lambda: scoring.Scorer(adapt(model), None, batch_size))


def outputs(model: Any, x: np.ndarray, batch_size: int = 64) -> np.ndarray:
    """float32 [N, classes]: the model's outputs (logits) of the unperturbed images."""
    check_images_fit(model, x)
    return model_scorer(model, batch_size).predict(tf.constant(x, tf.float32))


def check_images_fit(model: Any, x: np.ndarray) -> None:
    """One line naming x_batch when its images (H, W, C) are not the size the model takes
    (where the model fixes it: a Keras model with no open size, or an export)."""
    expected = adapt(model).input_shape
    found = tuple(int(size) for size in x.shape[1:])
    if expected is None or tuple(expected) == found:
        return
    hint = ""
    if found[0] == expected[2] and found[1:] == tuple(expected[:2]):
        hint = ("; they look channels first (N, C, H, W), as Quantus takes them: pass "
                "np.transpose(x_batch, (0, 2, 3, 1))")
    raise ShapeError(f"x_batch holds images of shape {found}, but the model takes "
                     f"{tuple(expected)} (H, W, C){hint}")


def class_count(model: Any, x: np.ndarray) -> int:
    """How many classes the model scores (one eager pass of one image, kept with the model per
    image shape: the pass costs as much as a cheap network's whole measure), once the images
    are known to fit the model (`check_images_fit`)."""
    check_images_fit(model, x)
    return kept(model, ("measures' class count", x.shape[1:]), lambda: int(
        adapt(model).logits(tf.constant(x[:1], tf.float32)).shape[-1]))


def checked_classes(model: Any, x: np.ndarray, y_batch: Any) -> np.ndarray:
    """int32 [N]: `y_batch`, one class per image, each among the model's outputs."""
    classes = np.asarray(y_batch)
    if classes.shape != (len(x),) or not np.issubdtype(classes.dtype, np.integer):
        hint = ""
        if classes.shape == (len(x), 1):
            hint = " (a column of classes, as Keras datasets give them: pass y_batch[:, 0])"
        elif classes.ndim == 2 and len(classes) == len(x) and classes.shape[1] > 1:
            hint = " (one row per image, one-hot: pass np.argmax(y_batch, axis=1))"
        raise ShapeError(f"y_batch has shape {classes.shape} ({classes.dtype}); expected one "
                         f"integer class per image, [{len(x)}]{hint}")
    outputs = class_count(model, x)
    if classes.min() < 0 or classes.max() >= outputs:
        raise UserError(f"y_batch holds a class outside the model's {outputs} classes "
                        f"(0..{outputs - 1})")
    return classes.astype(np.int32)


def scores_of_bands(model: Any, found: Prepared, y_batch: Any, ranks: np.ndarray,
                    bands: np.ndarray, perturb_baseline: Any, *, keep: bool = False,
                    softmax: bool = True, batch_size: int = 64) -> np.ndarray:
    """`band_scores` of a call's images with Quantus's `perturb_baseline` and the checked
    classes of `y_batch`: what every band measure scores."""
    return band_scores(model, found.x, ranks, bands, baseline_values(found.x, perturb_baseline),
                       checked_classes(model, found.x, y_batch), keep=keep, softmax=softmax,
                       batch_size=batch_size)


def auc_per_sample(curves: np.ndarray) -> np.ndarray:
    """float64 [N]: Quantus's area under each curve, the trapezoid rule with unit steps
    (`utils.calculate_auc`, np.trapz(dx=1))."""
    return curves.sum(axis=1) - (curves[:, 0] + curves[:, -1]) / 2
