"""The ResNet and VGG families in torchvision's layout, for IDSDS (docs/model_zoo.md).

Layer names are torchvision's module paths with "." replaced by "_" (`layer1.0.conv1` ->
`layer1_0_conv1`, `features.0` -> `features_0`), and every operation is PyTorch's (symmetric
explicit padding before each strided convolution, BatchNorm epsilon 1e-5, adaptive average
pooling to 7x7 and a channels-first flatten in VGG), so a torchvision or IDSDS state dict
converts name by name and gives the same logits (`models.formats.torch_checkpoints`). Variants:

* ResNet-18/34 (basic blocks) and -50/101/152 (bottlenecks), Wide-ResNet-50-2 (bottleneck
  width x2);
* `norm="fixup"`: ResNet without BatchNorm, with Fixup's scalar biases and scale (Zhang et al.
  2019, in the layout of the X-DNN code IDSDS uses); `norm="none"`: without BatchNorm and
  without any bias (`x_resnet50`);
* VGG-11/13/16/19 (configurations A, B, D, E), with BatchNorm (`vgg16_bn`) or without biases
  (`x_vgg16`).

`width` scales every channel count (64 = torchvision's) and `hidden` VGG's classifier, so small
variants of the same graph run in tests. All take ImageNet-normalised input (mean/std).
"""
from typing import Any, Optional

import keras
from keras import layers

from models.architectures.layers import (
    FEATURE_LAYER,
    AdaptiveAveragePooling2D,
    ChannelsFirstFlatten,
    ScalarBias,
    ScalarScale,
    conv2d,
)

BN_EPSILON = 1e-5

RESNET_DEPTHS = {18: ("basic", (2, 2, 2, 2)), 34: ("basic", (3, 4, 6, 3)),
                 50: ("bottleneck", (3, 4, 6, 3)), 101: ("bottleneck", (3, 4, 23, 3)),
                 152: ("bottleneck", (3, 8, 36, 3))}
VGG_CONFIGS = {
    11: (64, "M", 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M"),
    13: (64, 64, "M", 128, 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M"),
    16: (64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M"),
    19: (64, 64, "M", 128, 128, "M", 256, 256, 256, 256, "M", 512, 512, 512, 512, "M", 512, 512,
         512, 512, "M"),
}
NORMS = ("batch", "fixup", "none")


def conv(x: Any, filters: int, kernel: int, name: str, stride: int = 1, padding: int = 0,
         use_bias: bool = False, initializer: Any = None) -> Any:
    """PyTorch's Conv2d: explicit symmetric zero padding, then a valid convolution."""
    if padding:
        x = layers.ZeroPadding2D(padding, name=f"{name}_pad")(x)
    return conv2d(filters, kernel, strides=stride, use_bias=use_bias, name=name,
                  kernel_initializer=initializer or "he_normal")(x)


def batch_norm(x: Any, name: str) -> Any:
    """PyTorch's BatchNorm2d (epsilon 1e-5, momentum 0.1)."""
    return layers.BatchNormalization(epsilon=BN_EPSILON, momentum=0.9, name=name)(x)


def max_pool_3x3(x: Any, name: str) -> Any:
    """MaxPool2d(3, 2, padding=1) after a ReLU (zero padding equals PyTorch's -inf there)."""
    x = layers.ZeroPadding2D(1, name=f"{name}_pad")(x)
    return layers.MaxPooling2D(3, strides=2, name=name)(x)


class _Fixup:
    """Fixup's initialisation (scaled He normal branches, zero last layers) or Keras' default."""

    def __init__(self, enabled, num_blocks, branch_layers):
        self.enabled = enabled
        self.factor = num_blocks ** (-1.0 / (2 * branch_layers - 2)) if enabled else 1.0

    def branch(self):
        if not self.enabled:
            return None
        return keras.initializers.VarianceScaling(2.0 * self.factor ** 2, "fan_out",
                                                  "untruncated_normal")

    def last(self):
        return "zeros" if self.enabled else None


def _residual_block(x, kind, planes, stride, base_width, norm, name, fixup):
    """One torchvision (or Fixup / bias-free) residual block named `name` (layerI_J)."""
    expansion = 4 if kind == "bottleneck" else 1
    width = int(planes * base_width / 64) if kind == "bottleneck" else planes
    out_channels = planes * expansion
    in_channels = int(x.shape[-1])

    def shifted(tensor, suffix):
        return ScalarBias(name=f"{name}_{suffix}")(tensor) if norm == "fixup" else tensor

    if kind == "bottleneck":
        specs = [(width, 1, 1, 0), (width, 3, stride, 1), (out_channels, 1, 1, 0)]
    else:
        specs = [(planes, 3, stride, 1), (out_channels, 3, 1, 1)]
    entry = shifted(x, "bias1a")  # Fixup: the branch and the downsample both read x + bias1a
    y = entry
    for index, (filters, kernel, step, padding) in enumerate(specs, start=1):
        last = index == len(specs)
        if index > 1:
            y = shifted(y, f"bias{index}a")
        y = conv(y, filters, kernel, f"{name}_conv{index}", stride=step, padding=padding,
                 initializer=fixup.last() if last else fixup.branch())
        if norm == "batch":
            y = batch_norm(y, f"{name}_bn{index}")
        if not last:
            y = layers.ReLU(name=f"{name}_relu{index}")(shifted(y, f"bias{index}b"))
        elif norm == "fixup":
            y = ScalarBias(name=f"{name}_bias{index}b")(ScalarScale(name=f"{name}_scale")(y))
    shortcut = x
    if stride != 1 or in_channels != out_channels:
        if norm == "batch":
            shortcut = conv(x, out_channels, 1, f"{name}_downsample_0", stride=stride)
            shortcut = batch_norm(shortcut, f"{name}_downsample_1")
        else:  # Fixup and bias-free: a bare 1x1 convolution
            shortcut = conv(entry, out_channels, 1, f"{name}_downsample", stride=stride)
    return layers.ReLU(name=f"{name}_out")(layers.Add(name=f"{name}_add")([y, shortcut]))


def build_resnet(num_classes: int, input_shape: tuple, depth: int = 50, width: int = 64,
                 base_width: int = 64, norm: str = "batch", fixup_init: bool = True,
                 name: Optional[str] = None) -> keras.Model:
    """A torchvision-layout ResNet (see the module docstring); logits, Grad-CAM features after
    layer4."""
    if depth not in RESNET_DEPTHS or norm not in NORMS:
        raise ValueError(f"depth must be one of {sorted(RESNET_DEPTHS)} and norm one of {NORMS}")
    kind, blocks = RESNET_DEPTHS[depth]
    fixup = _Fixup(norm != "batch" and fixup_init, sum(blocks), 3 if kind == "bottleneck" else 2)
    inputs = keras.Input(input_shape, name="images")
    x = conv(inputs, width, 7, "conv1", stride=2, padding=3,
             initializer=None if norm == "batch" else "he_normal")
    if norm == "batch":
        x = batch_norm(x, "bn1")
    elif norm == "fixup":
        x = ScalarBias(name="bias1")(x)
    x = max_pool_3x3(layers.ReLU(name="relu")(x), "maxpool")
    for stage, count in enumerate(blocks):
        planes = width * 2 ** stage
        for index in range(count):
            x = _residual_block(x, kind, planes, 2 if stage and not index else 1,
                                        base_width, norm, f"layer{stage + 1}_{index}", fixup)
    features = layers.Identity(name=FEATURE_LAYER)(x)
    x = layers.GlobalAveragePooling2D(name="avgpool")(features)
    if norm == "fixup":
        x = ScalarBias(name="bias2")(x)
    logits = layers.Dense(num_classes, use_bias=norm != "none", dtype="float32", name="fc",
                          kernel_initializer=fixup.last() or "glorot_uniform")(x)
    return keras.Model(inputs, logits, name=name or f"resnet{depth}")


def build_vgg(num_classes: int, input_shape: tuple, depth: int = 16, width: int = 64,
              hidden: int = 4096, with_batch_norm: bool = False, bias: bool = True,
              name: Optional[str] = None) -> keras.Model:
    """A torchvision-layout VGG (see the module docstring); Grad-CAM features after the last
    max-pool (IDSDS' `model.features`)."""
    if depth not in VGG_CONFIGS:
        raise ValueError(f"depth must be one of {sorted(VGG_CONFIGS)}")
    inputs = keras.Input(input_shape, name="images")
    x, index = inputs, 0
    for entry in VGG_CONFIGS[depth]:
        if isinstance(entry, str):  # "M"
            x = layers.MaxPooling2D(2, name=f"features_{index}")(x)
            index += 1
            continue
        filters = int(entry * width / 64)
        x = conv(x, filters, 3, f"features_{index}", padding=1,
                 use_bias=bias)  # torchvision keeps the bias before BatchNorm
        index += 1
        if with_batch_norm:
            x = batch_norm(x, f"features_{index}")
            index += 1
        x = layers.ReLU(name=f"features_{index}")(x)
        index += 1
    features = layers.Identity(name=FEATURE_LAYER)(x)
    x = AdaptiveAveragePooling2D(7, name="avgpool")(features)
    x = ChannelsFirstFlatten(name="flatten")(x)
    for position in (0, 3):
        x = layers.Dense(hidden, activation="relu", use_bias=bias, name=f"classifier_{position}",
                         kernel_initializer=keras.initializers.RandomNormal(0.0, 0.01))(x)
        x = layers.Dropout(0.5, name=f"classifier_{position + 2}")(x)
    logits = layers.Dense(num_classes, use_bias=bias, dtype="float32", name="classifier_6",
                          kernel_initializer=keras.initializers.RandomNormal(0.0, 0.01))(x)
    suffix = "_bn" if with_batch_norm else ""
    return keras.Model(inputs, logits, name=name or f"vgg{depth}{suffix}")

