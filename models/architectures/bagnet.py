"""BagNet-33 (Brendel & Bethge 2019) in the layout of its PyTorch release (docs/model_zoo.md).

A ResNet-50 whose 3x3 convolutions are kept only in the first block of each stage and unpadded,
so every output position sees one 33x33 patch; the class evidence of each position is the
linear classifier applied to that position's features, and the logits are its average over
positions. The model computes exactly that (`fc` on every position, then the average: the
same numbers as the release's average-then-`fc`), so the per-patch evidence is a layer output:
the BagNet explainer reads it (`models.architectures.native_explainers`). The residual of a block
whose branch lost border pixels is cropped at the bottom and right, as the release does.
"""
import keras
from keras import layers

from models.architectures.layers import FEATURE_LAYER
from models.architectures.torchvision_family import batch_norm, conv

EVIDENCE_LAYER = "fc"
STRIDES = (2, 2, 2, 1)


def _bottleneck(x, planes, stride, kernel, name):
    out_channels = planes * 4
    y = layers.ReLU(name=f"{name}_relu1")(batch_norm(conv(x, planes, 1, f"{name}_conv1"),
                                                     f"{name}_bn1"))
    y = conv(y, planes, kernel, f"{name}_conv2", stride=stride)
    y = layers.ReLU(name=f"{name}_relu2")(batch_norm(y, f"{name}_bn2"))
    y = batch_norm(conv(y, out_channels, 1, f"{name}_conv3"), f"{name}_bn3")
    shortcut = x
    if stride != 1 or int(x.shape[-1]) != out_channels:
        # The strided 1x1 convolution as subsampling, then a 1x1 convolution (the same numbers):
        # TensorFlow 2.21's oneDNN kernel for a strided 1x1 convolution of an odd-sized map
        # crashed here (docs/model_zoo.md).
        if stride != 1:
            x = layers.MaxPooling2D(1, strides=stride, name=f"{name}_subsample")(x)
        shortcut = conv(x, out_channels, 1, f"{name}_downsample_0")
        shortcut = batch_norm(shortcut, f"{name}_downsample_1")
    excess = int(shortcut.shape[1]) - int(y.shape[1])
    if excess:
        shortcut = layers.Cropping2D(((0, excess), (0, excess)), name=f"{name}_crop")(shortcut)
    return layers.ReLU(name=f"{name}_out")(layers.Add(name=f"{name}_add")([y, shortcut]))


def build_bagnet33(num_classes: int, input_shape: tuple, width: int = 64) -> keras.Model:
    """BagNet-33: logits [N, classes] = mean over positions of the evidence layer `fc`."""
    inputs = keras.Input(input_shape, name="images")
    x = conv(inputs, width, 1, "conv1")
    x = conv(x, width, 3, "conv2")
    x = layers.ReLU(name="relu")(batch_norm(x, "bn1"))
    for stage, (blocks, stride) in enumerate(zip((3, 4, 6, 3), STRIDES)):
        planes = width * 2 ** stage
        for index in range(blocks):
            x = _bottleneck(x, planes, stride if index == 0 else 1, 3 if index == 0 else 1,
                            f"layer{stage + 1}_{index}")
    features = layers.Identity(name=FEATURE_LAYER)(x)
    evidence = layers.Dense(num_classes, dtype="float32", name=EVIDENCE_LAYER)(features)
    logits = layers.GlobalAveragePooling2D(name="avgpool")(evidence)
    return keras.Model(inputs, logits, name="bagnet33")
