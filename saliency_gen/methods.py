"""Attribution methods as per-item plans for the batched engine (saliency_methods.md §2).

Every base method is described by a `Plan`: `steps` work items per (image, noise sample) and a
traced `contribution(x, targets, step, aux)` giving each item's additive share of the map, so that
the engine can flatten images x samples x steps into fixed-size chunks and sum shares per
(image, sample):

* gradient-type methods (gradient, grad_x_input, guided_backprop): one item, the map itself;
* integrated_gradients: one item per path point, `w_i (x - x') * grad f(x' + a_i (x - x'))`;
* CAM methods (grad_cam, grad_cam_pp, xgrad_cam, layer_cam, guided_grad_cam): one item;
* occlusion: item 0 adds `f(x) * windows covering the pixel`, item 1 + w subtracts
  `f(x with window w occluded)` inside window w, which sums to PAIR's
  `sum_w [f(x) - f(x_w)] * window_w`;
* rise: one item per mask, `softmax(f(M x + (1 - M) b))_c * M / (n_masks * p1)`;
* sobel and random: one model-free item.

All maps are taken for the target class's pre-softmax logit (RISE: softmax probability).
"""
from dataclasses import dataclass
from typing import Callable

import numpy as np
import tensorflow as tf

from models.errors import UserError
from models.preprocessing import input_space

BASE_METHODS = ("gradient", "grad_x_input", "integrated_gradients", "guided_backprop",
                "grad_cam", "grad_cam_pp", "xgrad_cam", "layer_cam", "guided_grad_cam",
                "sg_grad_cam_pp", "rise", "occlusion", "sobel", "random")
UNWRAPPABLE = ("random", "sg_grad_cam_pp")  # no noise wrapper: a control, already smoothed
WRAPPERS = ("smoothgrad", "smoothgrad_sq", "vargrad")
CAM_METHODS = ("grad_cam", "grad_cam_pp", "xgrad_cam", "layer_cam")

# Parameters each base method accepts, with defaults (saliency_methods.md §2).
BASE_PARAMS = {
    "gradient": {},
    "grad_x_input": {},
    "integrated_gradients": {"steps": 25, "rule": "pair_linspace", "baseline": "zeros",
                             "baseline_range": (-1.0, 1.0)},
    "guided_backprop": {},
    "grad_cam": {"cam_normalise": "none", "cam_upsample": "bilinear"},
    "grad_cam_pp": {"cam_normalise": "none", "cam_upsample": "bilinear", "alpha": "paper"},
    "xgrad_cam": {"cam_normalise": "none", "cam_upsample": "bilinear"},
    "layer_cam": {"cam_normalise": "none", "cam_upsample": "bilinear"},
    "guided_grad_cam": {"cam_upsample": "bilinear"},
    "sg_grad_cam_pp": {"nsamples": 4, "stdev": 0.3, "variant": "mean", "cam_normalise": "none",
                       "cam_upsample": "bilinear"},
    "rise": {"n_masks": 6000, "cells": 8, "p1": 0.1, "baseline": "zeros",
             "baseline_range": (-1.0, 1.0)},
    "occlusion": {"size": 15, "stride": 1, "value": 0.0},
    "sobel": {},
    "random": {},
}
WRAPPER_PARAMS = {"nsamples": 25, "noise": "spread", "stdev_spread": 0.15, "stdev": 1.0}
IG_RULES = ("pair_linspace", "riemann_left", "riemann_right", "riemann_middle", "trapezoid",
            "captum_trapezoid", "gausslegendre")
CAM_NORMALISATIONS = ("none", "max", "minmax")
CAM_UPSAMPLINGS = ("bilinear", "tf1_bilinear", "nearest")


@dataclass(frozen=True)
class MethodSpec:
    """A fully resolved method: base, optional noise wrapper, parameters and post-processing."""

    base: str
    wrapper: str = None
    params: tuple = ()  # sorted (name, value) pairs
    transform: str = "raw"
    reduce: str = "none"
    times_input: bool = False  # multiply the final map by the clean input (BAM "SG x Input")

    @property
    def options(self):
        return dict(self.params)

    @property
    def name(self):
        return f"{self.wrapper}({self.base})" if self.wrapper else self.base

    @property
    def nsamples(self):
        """Noise samples per image: the wrapper's (or sg_grad_cam_pp's own), else 1."""
        return int(self.options.get("nsamples", 1))


def make_spec(base, wrapper=None, transform="raw", reduce="none", times_input=False, **params):
    """A `MethodSpec` with defaults filled in and every parameter checked."""
    if base not in BASE_METHODS:
        raise UserError(f"unknown method {base!r}; see saliency_gen.METHODS for every name")
    if wrapper is not None and wrapper not in WRAPPERS:
        raise UserError(f"unknown noise wrapper {wrapper!r}; choose one of {', '.join(WRAPPERS)}")
    if wrapper is not None and base in UNWRAPPABLE:
        raise UserError(f"{base} takes no noise wrapper")
    accepted = dict(BASE_PARAMS[base], **(WRAPPER_PARAMS if wrapper else {}))
    unknown = sorted(set(params) - set(accepted))
    if unknown:
        raise UserError(f"method {base if not wrapper else f'{wrapper}({base})'} has no "
                        f"parameter {', '.join(unknown)}; it accepts "
                        f"{', '.join(sorted(accepted)) or 'none'}")
    merged = dict(accepted, **params)
    _check_params(base, merged)
    if transform not in ("raw", "abs", "relu", "square"):
        raise UserError(f"unknown transform {transform!r}; choose raw, abs, relu or square")
    if reduce not in ("none", "sum"):
        raise UserError(f"unknown reduce {reduce!r}; choose none or sum")
    frozen = tuple(sorted((k, _freeze(v)) for k, v in merged.items()))
    return MethodSpec(base, wrapper, frozen, transform, reduce, times_input)


class FrozenArray:
    """A read-only array parameter (e.g. a baseline image), hashable by shape and bytes."""

    def __init__(self, array):
        self.array = np.array(array, np.float32)
        self.array.setflags(write=False)
        self._key = (self.array.shape, self.array.tobytes())

    def __hash__(self):
        return hash(self._key)

    def __eq__(self, other):
        return isinstance(other, FrozenArray) and self._key == other._key

    def __repr__(self):
        return f"FrozenArray(shape={self.array.shape})"


def _freeze(value):
    if isinstance(value, (np.ndarray, tf.Tensor)) or (
            isinstance(value, list) and value and isinstance(value[0], (list, np.ndarray))):
        return FrozenArray(value)
    if isinstance(value, list):
        return tuple(value)
    return value


def _check_params(base, p):
    if "rule" in p and p["rule"] not in IG_RULES:
        raise UserError(f"unknown IG rule {p['rule']!r}; choose one of {', '.join(IG_RULES)}")
    if "steps" in p and int(p["steps"]) < 1:
        raise UserError("steps must be at least 1")
    if "cam_normalise" in p and p["cam_normalise"] not in CAM_NORMALISATIONS:
        raise UserError(f"unknown cam_normalise {p['cam_normalise']!r}; choose one of "
                        f"{', '.join(CAM_NORMALISATIONS)}")
    if "cam_upsample" in p and p["cam_upsample"] not in CAM_UPSAMPLINGS:
        raise UserError(f"unknown cam_upsample {p['cam_upsample']!r}; choose one of "
                        f"{', '.join(CAM_UPSAMPLINGS)}")
    if "alpha" in p and p["alpha"] not in ("paper", "torchcam"):
        raise UserError(f"unknown grad_cam_pp alpha {p['alpha']!r}; choose paper or torchcam")
    if "variant" in p and p["variant"] not in ("mean", "torchcam"):
        raise UserError(f"unknown sg_grad_cam_pp variant {p['variant']!r}; choose mean or "
                        "torchcam")
    if "noise" in p and p["noise"] not in ("spread", "absolute"):
        raise UserError(f"unknown noise {p['noise']!r}; choose spread or absolute")
    if "nsamples" in p and int(p["nsamples"]) < 1:
        raise UserError("nsamples must be at least 1")
    if base == "occlusion" and (int(p["size"]) < 1 or int(p["stride"]) < 1):
        raise UserError("occlusion size and stride must be at least 1")


# ----------------------------------------------------------------------------------------------
# Quadrature rules and baselines.


def ig_alphas_and_weights(rule, steps):
    """(alphas, weights) of an IG quadrature rule (saliency_methods.md §2.1)."""
    m = int(steps)
    if rule == "pair_linspace":
        return np.linspace(0, 1, m), np.full(m, 1.0 / m)
    if rule == "riemann_left":
        return np.arange(m) / m, np.full(m, 1.0 / m)
    if rule == "riemann_right":
        return np.arange(1, m + 1) / m, np.full(m, 1.0 / m)
    if rule == "riemann_middle":
        return (np.arange(m) + 0.5) / m, np.full(m, 1.0 / m)
    if rule in ("trapezoid", "captum_trapezoid"):
        if m < 2:
            raise UserError(f"the {rule} rule needs at least 2 steps")
        weights = np.full(m, 1.0 / (m - 1) if rule == "trapezoid" else 1.0 / m)
        weights[[0, -1]] /= 2
        return np.linspace(0, 1, m), weights
    nodes, weights = np.polynomial.legendre.leggauss(m)
    return (nodes + 1) / 2, weights / 2


def baseline_image(baseline, shape, preprocessing, seed, low_high=(-1.0, 1.0)):
    """The baseline as float32 [H, W, C] or [N, H, W, C] in input space.

    "zeros" / "mean": 0 in input space; "black": a black pixel through `preprocessing`;
    "uniform": one U(low, high) image drawn from `seed`, shared by all images; or an array.
    """
    height, width, channels = shape
    if isinstance(baseline, str):
        if baseline in ("zeros", "mean"):
            return np.zeros(shape, np.float32)
        if baseline == "black":
            if preprocessing is None:
                raise UserError("the black baseline needs the model's preprocessing; pass "
                                "preprocessing='imagenet' or 'caffe_rgb' (or a loaded model)")
            black = input_space(preprocessing).black()
            if black.shape[0] != channels:
                raise UserError(f"preprocessing {preprocessing!r} has {black.shape[0]} channels; "
                                f"the images have {channels}")
            return np.broadcast_to(black, shape).astype(np.float32)
        if baseline == "uniform":
            low, high = low_high
            rng = np.random.default_rng([int(seed), 0x1B5E])
            return rng.uniform(low, high, shape).astype(np.float32)
        raise UserError(f"unknown baseline {baseline!r}; choose zeros, mean, black, uniform or "
                        "pass an array")
    array = baseline.array if isinstance(baseline, FrozenArray) else np.asarray(baseline,
                                                                                 np.float32)
    if array.shape[-3:] != tuple(shape):
        raise UserError(f"baseline has shape {array.shape}; expected [H, W, C] = {tuple(shape)} "
                        "or [N, H, W, C]")
    return array


# ----------------------------------------------------------------------------------------------
# CAM helpers.


def cam_from(base, features, gradients, alpha="paper"):
    """A [B, h, w] class activation map from features A and gradients G (both [B, h, w, k])."""
    if base == "grad_cam":
        weights = tf.reduce_mean(gradients, axis=[1, 2], keepdims=True)
        return tf.nn.relu(tf.reduce_sum(weights * features, axis=-1))
    if base == "xgrad_cam":
        weights = tf.reduce_sum(gradients * features, axis=[1, 2], keepdims=True) / (
            tf.reduce_sum(features, axis=[1, 2], keepdims=True) + 1e-8)
        return tf.nn.relu(tf.reduce_sum(weights * features, axis=-1))
    if base == "layer_cam":
        return tf.nn.relu(tf.reduce_sum(tf.nn.relu(gradients) * features, axis=-1))
    # grad_cam_pp
    squared = tf.square(gradients)
    if alpha == "torchcam":
        coefficients = squared
    else:
        cubed = squared * gradients
        denominator = 2 * squared + tf.reduce_sum(features, axis=[1, 2], keepdims=True) * cubed
        coefficients = tf.where(gradients != 0, squared / (denominator + 1e-8),
                                tf.zeros_like(squared))
    weights = tf.reduce_sum(coefficients * tf.nn.relu(gradients), axis=[1, 2], keepdims=True)
    return tf.nn.relu(tf.reduce_sum(weights * features, axis=-1))


def normalise_cam(cam, how):
    """Per-map normalisation: none, max (a zero map stays zero) or minmax (torchcam)."""
    if how == "none":
        return cam
    peak = tf.reduce_max(cam, axis=[1, 2], keepdims=True)
    if how == "max":
        return tf.math.divide_no_nan(cam, peak)
    low = tf.reduce_min(cam, axis=[1, 2], keepdims=True)
    return (cam - low) / (peak - low + 1e-8)


def upsample_cam(cam, height, width, how):
    """[B, h, w] -> [B, H, W]: bilinear (half-pixel), TF1 bilinear (legacy corners) or nearest."""
    maps = cam[..., tf.newaxis]
    if how == "tf1_bilinear":
        resized = tf.raw_ops.ResizeBilinear(images=maps, size=[height, width],
                                            align_corners=False, half_pixel_centers=False)
    elif how == "nearest":
        resized = tf.image.resize(maps, [height, width], method="nearest")
    else:
        resized = tf.image.resize(maps, [height, width], method="bilinear")
    return resized[..., 0]


# ----------------------------------------------------------------------------------------------
# Plans.


@dataclass
class Plan:
    """How the engine computes one base method: items per (image, sample) and their shares."""

    steps: int
    contribution: Callable  # (x [B,H,W,C], targets [B], step [B], aux [B,H,W,C]) -> [B,H,W,C]
    uses_model: bool = True
    aux: np.ndarray = None  # per-run [H, W, C] or per-image [N, H, W, C] (baselines)


def plan_steps(spec, shape):
    """Items per (image, sample) of `spec.base`, without building its plan."""
    options = spec.options
    if spec.base == "integrated_gradients":
        return int(options["steps"])
    if spec.base == "rise":
        return int(options["n_masks"])
    if spec.base == "occlusion":
        height, width, _ = shape
        size, stride = int(options["size"]), int(options["stride"])
        return 1 + len(range(0, height - size + 1, stride)) * len(range(0, width - size + 1,
                                                                          stride))
    return 1


def _input_gradient(function, x, targets):
    with tf.GradientTape() as tape:
        tape.watch(x)
        score = tf.reduce_sum(tf.gather(function(x), targets, batch_dims=1))
    return tape.gradient(score, x)


def _tile(maps, channels):
    return tf.repeat(maps[..., tf.newaxis], channels, axis=-1)


def build_plan(spec, adapter, shape, preprocessing, seed):
    """The `Plan` of `spec.base` for images of `shape` (H, W, C)."""
    height, width, channels = shape
    p = spec.options
    base = spec.base
    if adapter is not None:
        adapter.prepare(guided=base in ("guided_backprop", "guided_grad_cam"),
                        cam=base in CAM_METHODS or base == "guided_grad_cam")

    if base in ("gradient", "grad_x_input"):
        def gradient(x, targets, step, aux):
            g = _input_gradient(adapter.logits, x, targets)
            return g * x if base == "grad_x_input" else g
        return Plan(1, gradient)

    if base == "guided_backprop":
        return Plan(1, lambda x, targets, step, aux:
                    _input_gradient(adapter.guided_logits, x, targets))

    if base == "integrated_gradients":
        alphas, weights = ig_alphas_and_weights(p["rule"], p["steps"])
        alphas = tf.constant(alphas, tf.float32)
        weights = tf.constant(weights, tf.float32)

        def integrated(x, targets, step, aux):
            alpha = tf.gather(alphas, step)[:, None, None, None]
            weight = tf.gather(weights, step)[:, None, None, None]
            difference = x - aux
            g = _input_gradient(adapter.logits, aux + alpha * difference, targets)
            return weight * difference * g
        baseline = baseline_image(p["baseline"], shape, preprocessing, seed, p["baseline_range"])
        return Plan(int(alphas.shape[0]), integrated, aux=baseline)

    if base in CAM_METHODS or base == "guided_grad_cam":
        def cam_map(x, targets, normalise, upsample):
            features, _, gradients = adapter.cam(x, targets)
            cam = cam_from("grad_cam" if base == "guided_grad_cam" else base, features,
                           gradients, p.get("alpha", "paper"))
            return upsample_cam(normalise_cam(cam, normalise), height, width, upsample)

        if base == "guided_grad_cam":
            def guided_cam(x, targets, step, aux):
                guided = _input_gradient(adapter.guided_logits, x, targets)
                return guided * cam_map(x, targets, "max", p["cam_upsample"])[..., tf.newaxis]
            return Plan(1, guided_cam)
        return Plan(1, lambda x, targets, step, aux: _tile(
            cam_map(x, targets, p["cam_normalise"], p["cam_upsample"]), channels))

    if base == "occlusion":
        return _occlusion_plan(adapter, shape, p)
    if base == "rise":
        return _rise_plan(adapter, shape, p, preprocessing, seed)
    if base == "sobel":
        return Plan(1, lambda x, targets, step, aux: sobel(x), uses_model=False)
    raise UserError(f"method {base!r} has no per-item plan")  # random: drawn by the engine


def _occlusion_plan(adapter, shape, p):
    height, width, channels = shape
    size, stride = int(p["size"]), int(p["stride"])
    if size > min(height, width):
        raise UserError(f"occlusion size {size} exceeds the image ({height}x{width})")
    rows = np.arange(0, height - size + 1, stride)
    cols = np.arange(0, width - size + 1, stride)
    corners = np.array([(r, c) for r in rows for c in cols], np.int32)
    coverage = np.zeros((height, width), np.float32)
    for r, c in corners:  # once per run, numpy, not per image
        coverage[r:r + size, c:c + size] += 1
    # Item 0 is the clean image (an empty window past the border); items 1.. the windows.
    corners = tf.constant(np.vstack([[height, width], corners]), tf.int32)
    coverage = tf.constant(coverage)
    grid_rows = tf.range(height)[None, :, None]
    grid_cols = tf.range(width)[None, None, :]
    value = float(p["value"])

    def occlude(x, targets, step, aux):
        corner = tf.gather(corners, step)
        r, c = corner[:, 0][:, None, None], corner[:, 1][:, None, None]
        window = tf.cast((grid_rows >= r) & (grid_rows < r + size) & (grid_cols >= c)
                         & (grid_cols < c + size), tf.float32)
        occluded = x * (1 - window[..., None]) + value * window[..., None]
        score = tf.gather(adapter.logits(occluded), targets, batch_dims=1)[:, None, None]
        share = tf.where((step == 0)[:, None, None], coverage[None], -window)
        return _tile(score * share, channels)

    return Plan(1 + len(rows) * len(cols), occlude)


def _rise_plan(adapter, shape, p, preprocessing, seed):
    from saliency_gen import rise

    height, width, channels = shape
    grids, row_maps, col_maps = rise.mask_factors(int(p["n_masks"]), int(p["cells"]),
                                                  float(p["p1"]), height, width, seed)
    grids, row_maps, col_maps = (tf.constant(a, tf.float32) for a in (grids, row_maps, col_maps))
    scale = 1.0 / (int(p["n_masks"]) * float(p["p1"]))

    def masked(x, targets, step, aux):
        mask = tf.matmul(tf.matmul(tf.gather(row_maps, step), tf.gather(grids, step)),
                         tf.gather(col_maps, step), transpose_b=True)[..., tf.newaxis]
        probabilities = tf.nn.softmax(adapter.logits(mask * x + (1 - mask) * aux))
        score = tf.gather(probabilities, targets, batch_dims=1)[:, None, None, None]
        return tf.repeat(score * mask * scale, channels, axis=-1)

    baseline = baseline_image(p["baseline"], shape, preprocessing, seed, p["baseline_range"])
    return Plan(int(p["n_masks"]), masked, aux=baseline)


def sobel(x):
    """`scipy.ndimage.sobel(x, axis=0)` per image of [B, H, W, C]: central difference along H,
    [1, 2, 1] smoothing along W and along C, half-sample symmetric borders."""
    padded = tf.pad(x, [[0, 0], [1, 1], [1, 1], [1, 1]], mode="SYMMETRIC")
    derivative = padded[:, 2:, :, :] - padded[:, :-2, :, :]
    smooth_w = derivative[:, :, :-2, :] + 2 * derivative[:, :, 1:-1, :] + derivative[:, :, 2:, :]
    return smooth_w[..., :-2] + 2 * smooth_w[..., 1:-1] + smooth_w[..., 2:]
