"""ResNet-50 v1.5 as ROAR trained it (google-research
`interpretability_benchmark/utils/resnet_model.py`).

Differences from `keras.applications.ResNet50` (v1): the stride sits on the 3x3 convolution of a
bottleneck, convolutions have no bias, strided convolutions pad explicitly ((k-1)//2 before, the
rest after) then run VALID, batch norm uses epsilon 1e-5 and momentum 0.9 with gamma initialised to
zero on the last BN of every block, the stem max-pool is SAME, kernels use fan-in truncated-normal
initialisation, the head is N(0, 0.01) and the output is float32 logits.

Layer names follow Keras' ResNet50 (`conv2_block3_out` ... `conv5_block3_out`), so BAM's bottleneck
names (block_layer1..4) map to the same layers in both implementations.
"""
from typing import Any

import keras
from keras import layers

from models.architectures.layers import conv2d

BLOCKS_PER_GROUP = (3, 4, 6, 3)
FILTERS_PER_GROUP = (64, 128, 256, 512)
STRIDES_PER_GROUP = (1, 2, 2, 2)


def _conv(x, filters, kernel, stride, name, regularizer):
    """Convolution with the TF-official "fixed padding" for strides > 1."""
    if stride > 1:
        total = kernel - 1
        before = total // 2
        x = layers.ZeroPadding2D(((before, total - before), (before, total - before)),
                                 name=f"{name}_pad")(x)
    return conv2d(
        filters, kernel, strides=stride, padding="valid" if stride > 1 else "same", use_bias=False,
        kernel_initializer=keras.initializers.VarianceScaling(1.0, "fan_in", "truncated_normal"),
        kernel_regularizer=regularizer, name=f"{name}_conv")(x)


def _bn(x, name, zero_gamma=False):
    return layers.BatchNormalization(
        momentum=0.9, epsilon=1e-5,
        gamma_initializer="zeros" if zero_gamma else "ones", name=f"{name}_bn")(x)


def _bottleneck(x, filters, stride, project, name, regularizer):
    shortcut = x
    if project:
        shortcut = _conv(x, 4 * filters, 1, stride, f"{name}_0", regularizer)
        shortcut = _bn(shortcut, f"{name}_0")
    y = _conv(x, filters, 1, 1, f"{name}_1", regularizer)
    y = layers.ReLU(name=f"{name}_1_relu")(_bn(y, f"{name}_1"))
    y = _conv(y, filters, 3, stride, f"{name}_2", regularizer)
    y = layers.ReLU(name=f"{name}_2_relu")(_bn(y, f"{name}_2"))
    y = _conv(y, 4 * filters, 1, 1, f"{name}_3", regularizer)
    y = _bn(y, f"{name}_3", zero_gamma=True)
    y = layers.Add(name=f"{name}_add")([shortcut, y])
    return layers.ReLU(name=f"{name}_out")(y)


def resnet50_v15_features(inputs: Any, weight_decay: float = 1e-4) -> Any:
    """Builds the ResNet-50 v1.5 trunk on `inputs`; returns the `conv5_block3_out` tensor.

    `weight_decay` is ROAR's (1e-4), applied as L2(weight_decay / 2) on every convolution kernel.
    """
    regularizer = keras.regularizers.L2(weight_decay / 2) if weight_decay else None
    x = _conv(inputs, 64, 7, 2, "conv1", regularizer)
    x = layers.ReLU(name="conv1_relu")(_bn(x, "conv1"))
    x = layers.MaxPooling2D(3, strides=2, padding="same", name="pool1_pool")(x)
    for group, (blocks, filters, stride) in enumerate(
            zip(BLOCKS_PER_GROUP, FILTERS_PER_GROUP, STRIDES_PER_GROUP), start=2):
        for block in range(1, blocks + 1):
            x = _bottleneck(x, filters, stride if block == 1 else 1, block == 1,
                            f"conv{group}_block{block}", regularizer)
    return x


def logits_head(features: Any, num_classes: int, weight_decay: float = 1e-4,
                name: str = "predictions") -> Any:
    """ROAR's head: global average pool, then Dense with N(0, 0.01) kernel and zero bias."""
    regularizer = keras.regularizers.L2(weight_decay / 2) if weight_decay else None
    x = layers.GlobalAveragePooling2D(name="avg_pool")(features)
    return layers.Dense(
        num_classes, kernel_initializer=keras.initializers.RandomNormal(stddev=0.01),
        kernel_regularizer=regularizer, bias_regularizer=regularizer, dtype="float32",
        name=name)(x)
