"""Bridges to PAIR `saliency.core` 0.2.1 for the methods this engine does not reimplement:
XRAI, BlurIG and GuidedIG (docs/saliency.md, "PAIR-only methods").

`as_call_model_function(model)` implements PAIR's `call_model_function(x_value_batch,
call_model_args=None, expected_keys=None) -> dict` contract with traced TensorFlow gradients, so
PAIR methods run on any model the engine explains. `call_model_args` is the explained class (an
int, or a dict with key "class"). PAIR explains one image per call in numpy, so these units are
`HostPlan`s: the loop over images is PAIR's API, not the engine's. Known PAIR defects and what
the bridges do about them:

* GuidedIG calls `np.quantile(..., interpolation="lower")`, which numpy >= 2.4 rejects with a
  TypeError: the bridge runs it with `method="lower"` (same numbers).
* BlurIG with `sqrt=True` and `batch_size > 1` applies the last step's weight to the whole batch
  (51% relative error against batch_size 1): the bridge refuses that combination.
* XRAI, BlurIG and GuidedIG draw no random numbers, so they are deterministic.
* PAIR's `VisualizeImageGrayscale` returns NaN on a constant map: never use it for ranking.
"""
import contextlib
import types
from typing import Any, Callable, Optional, Sequence

import numpy as np
import tensorflow as tf
from saliency import core
from saliency.core import guided_ig

from models.formats.adapter import adapt
from models.foundation.errors import UserError
from saliency_gen.attribution.units import Context, HostPlan, Method, Param, register


def _class_of(call_model_args) -> int:
    if isinstance(call_model_args, dict):
        return int(call_model_args["class"])
    return int(call_model_args)


def as_call_model_function(model: Any, feature_layer: Optional[str] = None) -> Callable:
    """A PAIR `call_model_function` for `model` (see the module docstring)."""
    adapter = adapt(model, feature_layer)
    # a model that leaves the image size open: one trace serves any size
    image_spec = tf.TensorSpec([None, *(adapter.input_shape or (None, None, None))], tf.float32)

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
    original = guided_ig.np
    guided_ig.np = _QuantileShim()
    try:
        yield
    finally:
        guided_ig.np = original


def _pair_arguments(options):
    """The unit's parameters as PAIR's `GetMask` takes them: frozen arrays back to numpy and
    `pair_batch_size` as PAIR's `batch_size` (the engine's own `batch_size` is the chunk)."""
    return {("batch_size" if key == "pair_batch_size" else key): getattr(value, "array", value)
            for key, value in options.items()}


class _PairMethod(Method):
    """A PAIR method explained one image per call; its parameters go to PAIR's `GetMask`."""

    explainer: Any = None  # the PAIR explainer class

    def fix(self) -> Any:
        """A context around each PAIR call (default: none)."""
        return contextlib.nullcontext()

    def plan(self, options: dict, context: Context) -> Any:
        call = as_call_model_function(context.model)
        explainer = self.explainer()
        arguments = _pair_arguments(options)
        channels = context.shape[-1]

        def run(images, targets, ids):
            maps = []
            with self.fix():
                for image, target in zip(images, targets):  # PAIR's API: one image per call
                    mask = np.asarray(explainer.GetMask(image, call, {"class": int(target)},
                                                        **arguments), np.float32)
                    maps.append(np.repeat(mask[..., None], channels, -1) if mask.ndim == 2
                                else mask)
            return np.stack(maps)

        return HostPlan(run)


@register
class Xrai(_PairMethod):
    name = "xrai"
    summary = "XRAI region attribution (PAIR)"
    wrappable = False
    explainer = core.XRAI
    params = {"baselines": Param(None), "segments": Param(None), "base_attribution": Param(None),
              "pair_batch_size": Param(1, minimum=1), "extra_parameters": Param(None)}


@register
class BlurIG(_PairMethod):
    name = "blur_ig"
    summary = "blur integrated gradients (PAIR)"
    wrappable = False
    explainer = core.BlurIG
    params = {"max_sigma": Param(50), "steps": Param(100, minimum=1),
              "grad_step": Param(0.01), "sqrt": Param(False),
              "pair_batch_size": Param(1, minimum=1)}

    def steps(self, options: dict, shape: Sequence[int]) -> int:
        return int(options["steps"])

    def check(self, options: dict) -> None:
        super().check(options)
        if options.get("sqrt") and int(options.get("pair_batch_size", 1)) > 1:
            raise UserError("PAIR BlurIG with sqrt=True is wrong for pair_batch_size > 1 (it "
                            "weights the whole batch by the last step); use pair_batch_size=1")


@register
class GuidedIG(_PairMethod):
    name = "guided_ig"
    summary = "guided integrated gradients (PAIR)"
    wrappable = False
    explainer = core.GuidedIG
    params = {"x_baseline": Param(None), "x_steps": Param(200, minimum=1),
              "fraction": Param(0.25), "max_dist": Param(0.02)}

    def steps(self, options: dict, shape: Sequence[int]) -> int:
        return int(options["x_steps"])

    def fix(self) -> Any:
        return _guided_ig_numpy_fix()
