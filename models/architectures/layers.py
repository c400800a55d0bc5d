"""Keras layers the PyTorch-layout zoo models need and Keras lacks (docs/model_zoo.md).

Each layer computes exactly what its PyTorch counterpart computes, so that a converted state dict
gives the same logits (`models.formats.torch_checkpoints`): adaptive average pooling with PyTorch's
bin edges, a channels-first flatten (the order of `torch.flatten` on NCHW), and Fixup's scalar bias
and scale parameters; and a strided 1x1 convolution that avoids a oneDNN defect. Every layer is
serialisable, so exported models reload.
"""
import math
from typing import Any

import keras
import numpy as np
import tensorflow as tf

PACKAGE = "models"
# The identity layer every zoo model has for Grad-CAM (docs/models.md, "The Grad-CAM feature
# layer").
FEATURE_LAYER = "gradcam_features"


def _pooling_matrix(size_in: int, size_out: int) -> np.ndarray:
    """[size_out, size_in]: row i averages PyTorch's bin [floor(i*n/m), ceil((i+1)*n/m))."""
    matrix = np.zeros((size_out, size_in), np.float32)
    for i in range(size_out):
        start = (i * size_in) // size_out
        end = math.ceil((i + 1) * size_in / size_out)
        matrix[i, start:end] = 1.0 / (end - start)
    return matrix


@keras.saving.register_keras_serializable(package=PACKAGE)
class AdaptiveAveragePooling2D(keras.layers.Layer):
    """PyTorch's AdaptiveAvgPool2d on NHWC: [N, H, W, C] -> [N, out, out, C] (linear in its
    input; a smaller map is spread, a larger one averaged over PyTorch's bins)."""

    def __init__(self, output_size: int, **kwargs: Any):
        super().__init__(**kwargs)
        self.output_size = int(output_size)

    def call(self, inputs: tf.Tensor) -> tf.Tensor:
        height, width = int(inputs.shape[1]), int(inputs.shape[2])
        rows = tf.constant(_pooling_matrix(height, self.output_size))
        columns = tf.constant(_pooling_matrix(width, self.output_size))
        return tf.einsum("ih,nhwc,jw->nijc", rows, inputs, columns)

    def compute_output_shape(self, input_shape: tuple) -> tuple:
        return (input_shape[0], self.output_size, self.output_size, input_shape[3])

    def get_config(self) -> dict:
        return {**super().get_config(), "output_size": self.output_size}


@keras.saving.register_keras_serializable(package=PACKAGE)
class ChannelsFirstFlatten(keras.layers.Layer):
    """[N, H, W, C] -> [N, C*H*W] in PyTorch's NCHW order, so a converted classifier needs no
    permutation of its weights."""

    def call(self, inputs: tf.Tensor) -> tf.Tensor:
        transposed = tf.transpose(inputs, [0, 3, 1, 2])
        return tf.reshape(transposed, [-1, int(np.prod(inputs.shape[1:]))])

    def compute_output_shape(self, input_shape: tuple) -> tuple:
        return (input_shape[0], int(np.prod(input_shape[1:])))


@keras.saving.register_keras_serializable(package=PACKAGE)
class ScalarBias(keras.layers.Layer):
    """x + b with one learned scalar b (Fixup's bias1a, bias1b, ...; starts at 0)."""

    def build(self, input_shape: tuple) -> None:
        self.bias = self.add_weight(name="bias", shape=(1,), initializer="zeros")

    def call(self, inputs: tf.Tensor) -> tf.Tensor:
        return inputs + self.bias


@keras.saving.register_keras_serializable(package=PACKAGE)
class ScalarScale(keras.layers.Layer):
    """x * s with one learned scalar s (Fixup's scale; starts at 1)."""

    def build(self, input_shape: tuple) -> None:
        self.scale = self.add_weight(name="scale", shape=(1,), initializer="ones")

    def call(self, inputs: tf.Tensor) -> tf.Tensor:
        return inputs * self.scale


@keras.saving.register_keras_serializable(package=PACKAGE)
class StridedPointwiseConv2D(keras.layers.Conv2D):
    """A 1x1 convolution with a stride > 1, computed as a subsample then a stride-1 convolution:
    the same values and weights as `Conv2D(filters, 1, strides=s)`. oneDNN's own strided 1x1
    kernel corrupts the heap in its gradients on AVX2 CPUs when the input has fewer than 16
    channels (docs/architecture.md, "oneDNN")."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        if tuple(self.kernel_size) != (1, 1) or self.data_format != "channels_last":
            raise ValueError("StridedPointwiseConv2D is a channels-last 1x1 convolution")

    def convolution_op(self, inputs: tf.Tensor, kernel: tf.Tensor) -> tf.Tensor:
        rows, cols = self.strides
        return keras.ops.conv(inputs[:, ::rows, ::cols, :], kernel, strides=1,
                              padding=self.padding, dilation_rate=self.dilation_rate,
                              data_format=self.data_format)


def conv2d(filters: int, kernel: int, strides: int = 1, **kwargs: Any) -> keras.layers.Conv2D:
    """`keras.layers.Conv2D(filters, kernel, strides, ...)`, as `StridedPointwiseConv2D` when
    it is a strided 1x1 convolution (the zoo's ResNet shortcuts)."""
    if kernel == 1 and strides > 1:
        return StridedPointwiseConv2D(filters, kernel, strides=strides, **kwargs)
    return keras.layers.Conv2D(filters, kernel, strides=strides, **kwargs)
