"""Guided-backprop and logits views of a Keras model, sharing its weights.

`guided_model(model)` clones the model's graph with every ReLU replaced by a guided ReLU: forward
unchanged, backward `dy * [dy > 0] * [the ReLU's own derivative is non-zero]`. It is built with
`tf.custom_gradient` (which `tf.GradientTape` honours and `model.export` keeps, unlike
`gradient_override_map`). All other layers are the original layer objects, so no weight is copied.
ReLUs are found as `ReLU` layers (with their `max_value` and `threshold`), `Activation("relu")`
layers and layers whose `activation` is ReLU (e.g. `Conv2D(activation="relu")`). A ReLU the clone
cannot reach (a leaky ReLU, a ReLU inside a subclassed layer) is an error naming the layer.

`logits_model(model)` returns the model itself, or, when its last layer applies a softmax, a view
that stops before the softmax, since every gradient method differentiates logits.
"""
from typing import Any, Optional

import keras
import tensorflow as tf

from models.foundation.errors import UserError


def _guided(forward, passes):
    """A guided version of `forward`: gradient flows where dy > 0 and `passes(x)`."""

    @tf.custom_gradient
    def guided(x):
        def gradient(dy):
            return dy * tf.cast(dy > 0, dy.dtype) * tf.cast(passes(x), dy.dtype)

        return forward(x), gradient

    return guided


@keras.saving.register_keras_serializable(package="models")
class GuidedReLU(keras.layers.Layer):
    """ReLU (with optional `max_value` and `threshold`) whose gradient is guided."""

    def __init__(self, max_value: Optional[float] = None, threshold: float = 0.0,
                 **kwargs: Any):
        super().__init__(**kwargs)
        self.max_value = None if max_value is None else float(max_value)
        self.threshold = float(threshold)

    def call(self, inputs: tf.Tensor) -> tf.Tensor:
        def forward(x):
            y = tf.where(x > self.threshold, x, tf.zeros_like(x))
            return y if self.max_value is None else tf.minimum(y, self.max_value)

        def passes(x):
            inside = x > self.threshold
            return inside if self.max_value is None else inside & (x < self.max_value)

        return _guided(forward, passes)(inputs)

    def get_config(self) -> dict:
        return {**super().get_config(), "max_value": self.max_value, "threshold": self.threshold}


class _WithActivation(keras.layers.Layer):
    """Runs a shared layer without its activation, then `activation` (guided ReLU or identity)."""

    def __init__(self, inner, activation, **kwargs: Any):
        super().__init__(name=f"{inner.name}_{activation.name}", **kwargs)
        self.inner = inner
        self.activation_layer = activation

    def call(self, inputs: tf.Tensor) -> tf.Tensor:
        saved = self.inner.activation
        self.inner.activation = keras.activations.linear  # only while this call is traced
        try:
            outputs = self.inner(inputs)
        finally:
            self.inner.activation = saved
        return self.activation_layer(outputs)


def _is_relu(function):
    return function in (keras.activations.relu, tf.nn.relu) or \
        getattr(function, "__name__", "") == "relu"


def _guided_replacement(layer):
    if isinstance(layer, keras.layers.ReLU):
        if float(layer.negative_slope) != 0.0:
            raise UserError(f"layer {layer.name!r} is a leaky ReLU; guided backprop is defined "
                            "for ReLUs only")
        return GuidedReLU(layer.max_value, layer.threshold, name=f"{layer.name}_guided")
    if isinstance(layer, keras.layers.LeakyReLU) or (
            isinstance(layer, keras.layers.Activation)
            and getattr(layer.activation, "__name__", "") in ("leaky_relu", "relu6", "elu")):
        raise UserError(f"layer {layer.name!r} is not a plain ReLU; guided backprop cannot "
                        "gate it")
    activation = getattr(layer, "activation", None)
    if activation is not None and _is_relu(activation):
        if isinstance(layer, keras.layers.Activation):
            return GuidedReLU(name=f"{layer.name}_guided")
        return _WithActivation(layer, GuidedReLU(name="guided"))
    if isinstance(layer, keras.Model):
        raise UserError(f"layer {layer.name!r} is a nested model; flatten it (build with "
                        "input_tensor=) so guided backprop can reach its ReLUs")
    return layer  # shared: same weights


def guided_model(model: Any) -> Any:
    """A guided-backprop view of `model` (see the module docstring)."""
    try:
        return keras.models.clone_model(model, clone_function=_guided_replacement)
    except UserError:
        raise
    except (ValueError, TypeError) as error:
        raise UserError(f"cannot build a guided-backprop clone of model {model.name!r} "
                        f"(subclassed models are not supported): {error}") from None


def logits_model(model: Any) -> Any:
    """`model` itself, or a weight-sharing view without its final softmax."""
    last = model.layers[-1]
    if isinstance(last, keras.layers.Softmax) or (
            isinstance(last, keras.layers.Activation)
            and getattr(last.activation, "__name__", "") == "softmax"):
        return keras.Model(model.inputs[0], last.input, name=f"{model.name}_logits")
    activation = getattr(last, "activation", None)
    if activation is not None and getattr(activation, "__name__", "") == "softmax":
        identity = keras.layers.Identity(name="logits")

        def replace(layer):
            return _WithActivation(layer, identity) if layer is last else layer

        return keras.models.clone_model(model, clone_function=replace)
    return model
