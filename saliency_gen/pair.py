"""A bridge to PAIR `saliency.core` 0.2.1 for the methods this engine does not reimplement.

`as_call_model_function(model)` implements PAIR's `call_model_function(x_value_batch,
call_model_args=None, expected_keys=None) -> dict` contract with traced TensorFlow gradients, so
PAIR methods run on any model the engine explains (a Keras model or a `models.load` object).
`call_model_args` is the explained class (an int, or a dict with key "class").

`pair_attribute(model, images, method, targets)` runs XRAI, BlurIG or GuidedIG through it. PAIR
explains one image per call, so this bridge loops over images; the engine's own methods are the
batched ones. Known PAIR defects and what this bridge does about them:

* GuidedIG calls `np.quantile(..., interpolation="lower")`, which numpy >= 2.4 rejects with a
  TypeError: the bridge runs it with `method="lower"` (same numbers).
* BlurIG with `sqrt=True` and `batch_size > 1` applies the last step's weight to the whole batch
  (51% relative error against batch_size 1): the bridge refuses that combination.
* XRAI, BlurIG and GuidedIG draw no random numbers, so they are deterministic.
* PAIR's `VisualizeImageGrayscale` returns NaN on a constant map: never use it for ranking.
"""
import contextlib
import types

import numpy as np
import tensorflow as tf

from models.errors import UserError
from saliency_gen import adapters

PAIR_METHODS = ("xrai", "blur_ig", "guided_ig")


def _class_of(call_model_args):
    if isinstance(call_model_args, dict):
        return int(call_model_args["class"])
    return int(call_model_args)


def as_call_model_function(model, feature_layer=None):
    """A PAIR `call_model_function` for `model` (see the module docstring)."""
    from saliency import core

    adapter = adapters.adapt(model, feature_layer)
    height, width, channels = adapter.input_shape
    image_spec = tf.TensorSpec([None, height, width, channels], tf.float32)

    @tf.function(input_signature=[image_spec, tf.TensorSpec([], tf.int32)])
    def input_gradients(x, target):
        with tf.GradientTape() as tape:
            tape.watch(x)
            logits = adapter.logits(x)
            score = tf.reduce_sum(logits[:, target])
        return logits, tape.gradient(score, x)

    @tf.function(input_signature=[image_spec, tf.TensorSpec([], tf.int32)])
    def cam(x, target):
        targets = tf.fill([tf.shape(x)[0]], target)
        return adapter.cam(x, targets)

    def call_model_function(x_value_batch, call_model_args=None, expected_keys=None):
        target = tf.constant(_class_of(call_model_args), tf.int32)
        x = tf.constant(np.asarray(x_value_batch, np.float32))
        keys = set(expected_keys or [core.INPUT_OUTPUT_GRADIENTS])
        output = {}
        if keys & {core.INPUT_OUTPUT_GRADIENTS, core.OUTPUT_LAYER_VALUES}:
            logits, gradients = input_gradients(x, target)
            output[core.INPUT_OUTPUT_GRADIENTS] = gradients.numpy()
            output[core.OUTPUT_LAYER_VALUES] = logits.numpy()[:, _class_of(call_model_args)]
        if keys & {core.CONVOLUTION_LAYER_VALUES, core.CONVOLUTION_OUTPUT_GRADIENTS}:
            adapter.prepare(cam=True)  # build the features view eagerly, not while tracing
            features, _, gradients = cam(x, target)
            output[core.CONVOLUTION_LAYER_VALUES] = features.numpy()
            output[core.CONVOLUTION_OUTPUT_GRADIENTS] = gradients.numpy()
        return output

    return call_model_function


class _QuantileShim(types.ModuleType):
    """numpy, except that `quantile(interpolation=...)` becomes `quantile(method=...)`."""

    def __init__(self):
        super().__init__("numpy")

    def __getattr__(self, name):
        return getattr(np, name)

    @staticmethod
    def quantile(values, q, *args, interpolation=None, **kwargs):
        if interpolation is not None:
            kwargs["method"] = interpolation
        return np.quantile(values, q, *args, **kwargs)


@contextlib.contextmanager
def _guided_ig_numpy_fix():
    from saliency.core import guided_ig

    original = guided_ig.np
    guided_ig.np = _QuantileShim()
    try:
        yield
    finally:
        guided_ig.np = original


def pair_attribute(model, images, method, targets=None, **kwargs):
    """Maps [N, H, W, C] from a PAIR-only method ("xrai", "blur_ig", "guided_ig").

    `kwargs` go to PAIR's `GetMask` (e.g. `x_steps`, `max_sigma`, `batch_size`). XRAI returns
    one value per pixel, repeated over channels here.
    """
    from saliency import core

    from saliency_gen.engine import predict

    if method not in PAIR_METHODS:
        raise UserError(f"unknown PAIR method {method!r}; choose one of {', '.join(PAIR_METHODS)}")
    if method == "blur_ig" and kwargs.get("sqrt") and kwargs.get("batch_size", 1) > 1:
        raise UserError("PAIR BlurIG with sqrt=True is wrong for batch_size > 1 (it weights the "
                        "whole batch by the last step); use batch_size=1")
    images = np.asarray(images, np.float32)
    if targets is None:
        targets = np.argmax(predict(model, images), axis=1)
    call = as_call_model_function(model)
    explainer = {"xrai": core.XRAI, "blur_ig": core.BlurIG, "guided_ig": core.GuidedIG}[method]()
    fix = _guided_ig_numpy_fix() if method == "guided_ig" else contextlib.nullcontext()
    maps = []
    with fix:
        for image, target in zip(images, targets):  # PAIR's API is one image per call
            mask = np.asarray(explainer.GetMask(image, call, {"class": int(target)}, **kwargs),
                              np.float32)
            maps.append(np.repeat(mask[..., None], images.shape[-1], -1) if mask.ndim == 2
                        else mask)
    return np.stack(maps)
