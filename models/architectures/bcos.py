"""B-cos ResNet-50 (Böhle et al. 2022, the B-cos v2 layout IDSDS uses; docs/model_zoo.md).

Input: [0, 1] pixels (`pixels01`); the model prepends [x, 1 - x] as 6 channels. Each B-cos
convolution computes, per output channel, the linear map of unit-norm weights scaled by
|cos(x, w)|^(B-1) (B = 2: |w_hat . x| / ||x_patch||), batch norms divide by the running
standard deviation only (no centring, no bias), there is no ReLU, and the classifier is a
1x1 B-cos convolution before the average pool, followed by the constant logit bias
log(1 / (classes - 1)).

In explanation mode (`explanation_mode(model)`, entered while a function is traced) the dynamic
scaling is treated as a constant, so the model is the linear map W(x) of its input and the
gradient times the 6-channel input is the contribution map: it sums to the logit minus the
logit bias (`models.architectures.native_explainers`, the Bcos explainer).
"""
import contextlib
import math
from typing import Any, Iterator

import keras
import numpy as np
import tensorflow as tf
from keras import layers

from models.architectures.layers import FEATURE_LAYER

PACKAGE = "models"
INVERSE_LAYER = "add_inverse"


@keras.saving.register_keras_serializable(package=PACKAGE)
class AddInverse(layers.Layer):
    """[N, H, W, C] -> [N, H, W, 2C]: the image and its inverse 1 - x."""

    def call(self, inputs: tf.Tensor) -> tf.Tensor:
        return tf.concat([inputs, 1.0 - inputs], axis=-1)

    def compute_output_shape(self, input_shape: tuple) -> tuple:
        return (*input_shape[:-1], 2 * input_shape[-1])


@keras.saving.register_keras_serializable(package=PACKAGE)
class BcosConv2D(layers.Layer):
    """A B-cos convolution (B = 2, no bias) with PyTorch's symmetric padding."""

    explaining = False  # set by `explanation_mode` while a function is traced

    def __init__(self, filters: int, kernel_size: int, strides: int = 1, padding: int = 0,
                 **kwargs: Any):
        super().__init__(**kwargs)
        self.filters, self.kernel_size = int(filters), int(kernel_size)
        self.strides, self.padding = int(strides), int(padding)

    def build(self, input_shape: tuple) -> None:
        self.kernel = self.add_weight(
            name="kernel", shape=(self.kernel_size, self.kernel_size, int(input_shape[-1]),
                                  self.filters), initializer="he_normal")

    def _padded(self, x):
        p = self.padding
        return tf.pad(x, [[0, 0], [p, p], [p, p], [0, 0]]) if p else x

    def call(self, inputs: tf.Tensor) -> tf.Tensor:
        norm = tf.sqrt(tf.reduce_sum(tf.square(self.kernel), axis=[0, 1, 2], keepdims=True))
        unit = self.kernel / tf.maximum(norm, 1e-12)
        padded, step = self._padded(inputs), self.strides
        if self.kernel_size == 1 and step > 1:  # subsample first: oneDNN's strided 1x1 kernel
            padded, step = padded[:, ::step, ::step, :], 1  # is unsafe (docs/architecture.md)
        out = tf.nn.conv2d(padded, unit, step, "VALID")
        squares = tf.reduce_sum(tf.square(padded), axis=-1, keepdims=True)
        if self.kernel_size > 1:  # the sum of squares over each patch
            window = tf.ones([self.kernel_size, self.kernel_size, 1, 1], inputs.dtype)
            squares = tf.nn.conv2d(squares, window, step, "VALID")
        patch_norm = tf.sqrt(squares + 1e-6)
        scale = tf.abs(out) / patch_norm
        if self.explaining:
            scale = tf.stop_gradient(scale)
        return scale * out

    def compute_output_shape(self, input_shape: tuple) -> tuple:
        side = (input_shape[1] + 2 * self.padding - self.kernel_size) // self.strides + 1
        return (input_shape[0], side, side, self.filters)

    def from_torch(self, state: dict, flat: dict) -> tuple:
        key = flat[f"{self.name}_weight"]
        return [state[key].transpose(2, 3, 1, 0)], [key]

    def get_config(self) -> dict:
        return {**super().get_config(), "filters": self.filters,
                "kernel_size": self.kernel_size, "strides": self.strides,
                "padding": self.padding}


@keras.saving.register_keras_serializable(package=PACKAGE)
class UncenteredBatchNorm(layers.Layer):
    """x * gamma / sqrt(var + eps): B-cos' batch norm without centring or bias (the running
    mean is kept for checkpoints but unused)."""

    def __init__(self, epsilon: float = 1e-5, momentum: float = 0.1, **kwargs: Any):
        super().__init__(**kwargs)
        self.epsilon, self.momentum = float(epsilon), float(momentum)

    def build(self, input_shape: tuple) -> None:
        channels = (int(input_shape[-1]),)
        self.gamma = self.add_weight(name="gamma", shape=channels, initializer="ones")
        self.moving_mean = self.add_weight(name="moving_mean", shape=channels,
                                           initializer="zeros", trainable=False)
        self.moving_variance = self.add_weight(name="moving_variance", shape=channels,
                                               initializer="ones", trainable=False)

    def call(self, inputs: tf.Tensor, training: bool = False) -> tf.Tensor:
        variance = self.moving_variance
        if training:
            variance = tf.math.reduce_variance(inputs, axis=[0, 1, 2])
            self.moving_variance.assign((1 - self.momentum) * self.moving_variance
                                        + self.momentum * tf.stop_gradient(variance))
        return inputs * (self.gamma * tf.math.rsqrt(variance + self.epsilon))

    def from_torch(self, state: dict, flat: dict) -> tuple:
        keys = [flat[f"{self.name}_{name}"] for name in ("weight", "running_mean",
                                                          "running_var")]
        return [state[key] for key in keys], keys

    def get_config(self) -> dict:
        return {**super().get_config(), "epsilon": self.epsilon, "momentum": self.momentum}


@keras.saving.register_keras_serializable(package=PACKAGE)
class LogitBias(layers.Layer):
    """Adds the constant log(1 / (classes - 1)) of B-cos' classifier."""

    def call(self, inputs: tf.Tensor) -> tf.Tensor:
        classes = int(inputs.shape[-1])
        return inputs + math.log(1.0 / (classes - 1))


def _bottleneck(x, planes, stride, name):
    out_channels = planes * 4
    y = UncenteredBatchNorm(name=f"{name}_bn1")(BcosConv2D(planes, 1, name=f"{name}_conv1")(x))
    y = BcosConv2D(planes, 3, stride, 1, name=f"{name}_conv2")(y)
    y = UncenteredBatchNorm(name=f"{name}_bn2")(y)
    y = UncenteredBatchNorm(name=f"{name}_bn3")(BcosConv2D(out_channels, 1,
                                                           name=f"{name}_conv3")(y))
    shortcut = x
    if stride != 1 or int(x.shape[-1]) != out_channels:
        shortcut = BcosConv2D(out_channels, 1, stride, name=f"{name}_downsample_0")(x)
        shortcut = UncenteredBatchNorm(name=f"{name}_downsample_1")(shortcut)
    return layers.Add(name=f"{name}_add")([y, shortcut])


def build_bcos_resnet50(num_classes: int, input_shape: tuple, width: int = 64) -> keras.Model:
    """B-cos ResNet-50 (see the module docstring); [0, 1] RGB input, logits."""
    inputs = keras.Input(input_shape, name="images")
    x = AddInverse(name=INVERSE_LAYER)(inputs)
    x = BcosConv2D(width, 7, 2, 3, name="conv1")(x)
    x = UncenteredBatchNorm(name="bn1")(x)
    x = layers.ZeroPadding2D(1, name="pool_pad")(x)
    x = layers.AveragePooling2D(3, strides=2, name="pool")(x)  # counts the padding, as PyTorch
    for stage, blocks in enumerate((3, 4, 6, 3)):
        for index in range(blocks):
            x = _bottleneck(x, width * 2 ** stage, 2 if stage and not index else 1,
                            f"layer{stage + 1}_{index}")
    features = layers.Identity(name=FEATURE_LAYER)(x)
    x = BcosConv2D(num_classes, 1, name="fc")(features)
    x = layers.GlobalAveragePooling2D(name="avgpool")(x)
    logits = LogitBias(name="logit_bias", dtype="float32")(x)
    return keras.Model(inputs, logits, name="bcos_resnet50")


@contextlib.contextmanager
def explanation_mode(model: keras.Model) -> Iterator[None]:
    """Within the block, B-cos layers traced for `model` treat their scaling as constant."""
    bcos = [layer for layer in model.layers if isinstance(layer, BcosConv2D)]
    for layer in bcos:
        layer.explaining = True
    try:
        yield
    finally:
        for layer in bcos:
            layer.explaining = False


def logit_bias(num_classes: int) -> float:
    """The constant B-cos adds to every logit."""
    return float(np.log(1.0 / (num_classes - 1)))
