"""The model registry: `build(name, num_classes, input_shape, **options)` returns a Keras 3 model.

Conventions shared by every registered model:

* Input: float32 NHWC images already in the model's input space (`spec(name).preprocessing`,
  see `models.formats.preprocessing`); output: float32 **logits** (no softmax).
* Grad-CAM feature layer: every model has an identity layer named `FEATURE_LAYER`
  ("gradcam_features") on its last convolutional block; `feature_layer_name(model)` finds it, and
  for models built elsewhere falls back to the last layer with a 4-D output.
* Models built on `keras.applications` ImageNet weights (`keras_resnet50`, `vgg16`) take RGB
  mean-subtracted input (`caffe_rgb`, as BAM) and flip to Keras' BGR inside the model, so every
  gradient stays RGB.
"""
import inspect
from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence

import keras
from keras import layers

from models.architectures import (
    bagnet,
    bcos,
    efficientnet_lite,
    resnet_v15,
    torchvision_family,
    vit,
)
from models.architectures.layers import FEATURE_LAYER, conv2d
from models.foundation.errors import UserError, check_one_of, look_up
from models.foundation.rules import PRECISIONS


@keras.saving.register_keras_serializable(package="models")
class RgbToBgr(layers.Layer):
    """Reverses the channel axis: RGB mean-subtracted input -> Keras "caffe" BGR input."""

    def call(self, inputs: Any) -> Any:
        return inputs[..., ::-1]


def _head(features, num_classes):
    """Global average pooling, then a linear layer giving float32 logits."""
    x = layers.GlobalAveragePooling2D(name="avg_pool")(features)
    return layers.Dense(num_classes, dtype="float32", name="predictions")(x)


def _build_resnet50(num_classes, input_shape, weight_decay=1e-4):
    inputs = keras.Input(input_shape, name="images")
    trunk = resnet_v15.resnet50_v15_features(inputs, weight_decay=weight_decay)
    features = layers.Identity(name=FEATURE_LAYER)(trunk)
    logits = resnet_v15.logits_head(features, num_classes, weight_decay=weight_decay)
    return keras.Model(inputs, logits, name="resnet50")


def _default_include_top(weights, num_classes, include_top):
    if include_top is None:
        return weights is not None and num_classes == 1000
    return include_top


def _build_keras_application(app, feature_name, top_layers, model_name, num_classes, input_shape,
                             weights, include_top):
    include_top = _default_include_top(weights, num_classes, include_top)
    inputs = keras.Input(input_shape, name="images")
    bgr = RgbToBgr(name="rgb_to_bgr")(inputs)
    try:
        base = app(include_top=include_top, weights=weights, input_tensor=bgr,
                   input_shape=tuple(input_shape), classes=num_classes,
                   classifier_activation=None)
    except ValueError as error:
        raise UserError(f"{model_name}: {error}") from None
    features = layers.Identity(name=FEATURE_LAYER)(base.get_layer(feature_name).output)
    if include_top:
        # Reuse Keras' own (possibly pretrained) top on the renamed feature tensor.
        x = features
        for name in top_layers:
            x = base.get_layer(name)(x)
        logits = x
    else:
        logits = _head(features, num_classes)
    return keras.Model(inputs, logits, name=model_name)


def _build_keras_resnet50(num_classes, input_shape, weights=None, include_top=None):
    """keras.applications.ResNet50 (v1). `weights`: None, "imagenet" or a weights-file path.

    `include_top` defaults to True only for 1000 classes with weights, keeping Keras' pretrained
    classifier; otherwise the head is a new average-pool + Dense.
    """
    return _build_keras_application(
        keras.applications.ResNet50, "conv5_block3_out", ("avg_pool", "predictions"),
        "keras_resnet50", num_classes, input_shape, weights, include_top)


def _build_vgg16(num_classes, input_shape, weights=None, include_top=None):
    """keras.applications.VGG16; the feature layer follows `block5_pool` (as IDSDS' torchvision).

    With `include_top` (default for 1000 classes with weights) the head is Keras' flatten + two
    4096-unit layers + classifier (224x224 input); otherwise average-pool + Dense.
    """
    return _build_keras_application(
        keras.applications.VGG16, "block5_pool", ("flatten", "fc1", "fc2", "predictions"),
        "vgg16", num_classes, input_shape, weights, include_top)


def _build_small_cnn(num_classes, input_shape, width=16):
    """A plain CNN for 32-128 px inputs: conv-ReLU stages with max-pooling, no batch norm.

    Stages of (width, 2*width, 4*width) filters; features at 1/4 of the input resolution.
    """
    inputs = keras.Input(input_shape, name="images")
    x = inputs
    for stage, filters in enumerate((width, 2 * width, 4 * width), start=1):
        if stage > 1:
            x = layers.MaxPooling2D(2, name=f"block{stage}_pool")(x)
        x = layers.Conv2D(filters, 3, padding="same", activation="relu",
                          name=f"block{stage}_conv1")(x)
        x = layers.Conv2D(filters, 3, padding="same", activation="relu",
                          name=f"block{stage}_conv2")(x)
    features = layers.Identity(name=FEATURE_LAYER)(x)
    return keras.Model(inputs, _head(features, num_classes), name="small_cnn")


def _build_plain_cnn(num_classes, input_shape, widths=(16, 32, 64)):
    """A cheap plain CNN: 3x3 stride-2 conv-ReLU layers (PyTorch's padding=1, i.e. explicit zero
    padding then a valid convolution), global average pooling and a linear head. The benchmarks'
    cheap model, on which per-item overheads of the engines show."""
    inputs = keras.Input(input_shape, name="images")
    x = inputs
    for stage, filters in enumerate(widths, start=1):
        x = layers.ZeroPadding2D(1, name=f"conv{stage}_pad")(x)
        x = layers.Conv2D(filters, 3, strides=2, activation="relu", name=f"conv{stage}")(x)
    features = layers.Identity(name=FEATURE_LAYER)(x)
    return keras.Model(inputs, _head(features, num_classes), name="plain_cnn")


def _basic_block(x, filters, stride, name):
    shortcut = x
    if stride != 1 or x.shape[-1] != filters:
        shortcut = conv2d(filters, 1, strides=stride, use_bias=False, name=f"{name}_0_conv")(x)
        shortcut = layers.BatchNormalization(name=f"{name}_0_bn")(shortcut)
    y = layers.Conv2D(filters, 3, strides=stride, padding="same", use_bias=False,
                      name=f"{name}_1_conv")(x)
    y = layers.ReLU(name=f"{name}_1_relu")(layers.BatchNormalization(name=f"{name}_1_bn")(y))
    y = layers.Conv2D(filters, 3, padding="same", use_bias=False, name=f"{name}_2_conv")(y)
    y = layers.BatchNormalization(name=f"{name}_2_bn")(y)
    return layers.ReLU(name=f"{name}_out")(layers.Add(name=f"{name}_add")([shortcut, y]))


def _build_small_resnet(num_classes, input_shape, width=16):
    """A small residual net for 32-128 px inputs: stem + three stages of one basic block each.

    Stages of (width, 2*width, 4*width) filters with strides (1, 2, 2); features at 1/4 of the
    input resolution.
    """
    inputs = keras.Input(input_shape, name="images")
    x = layers.Conv2D(width, 3, padding="same", use_bias=False, name="stem_conv")(inputs)
    x = layers.ReLU(name="stem_relu")(layers.BatchNormalization(name="stem_bn")(x))
    for stage, (filters, stride) in enumerate(
            zip((width, 2 * width, 4 * width), (1, 2, 2)), start=1):
        x = _basic_block(x, filters, stride, f"stage{stage}_block1")
    features = layers.Identity(name=FEATURE_LAYER)(x)
    return keras.Model(inputs, _head(features, num_classes), name="small_resnet")


def _resnet_builder(name, depth, base_width=64, norm="batch"):
    """A registered builder of a torchvision-layout ResNet
    (`models.architectures.torchvision_family`)."""
    def batch_builder(num_classes, input_shape, width=64):
        return torchvision_family.build_resnet(num_classes, input_shape, depth, width,
                                               base_width, norm, name=name)

    def fixup_builder(num_classes, input_shape, width=64, fixup_init=True):
        return torchvision_family.build_resnet(num_classes, input_shape, depth, width,
                                               base_width, norm, fixup_init, name=name)
    return batch_builder if norm == "batch" else fixup_builder


def _vgg_builder(name, depth, batch_norm=False, bias=True):
    """A registered builder of a torchvision-layout VGG
    (`models.architectures.torchvision_family`)."""
    def builder(num_classes, input_shape, width=64, hidden=4096):
        return torchvision_family.build_vgg(num_classes, input_shape, depth, width, hidden,
                                            batch_norm, bias, name=name)
    return builder


@dataclass(frozen=True)
class ModelSpec:
    """A registered model: its builder, input space, smallest input side, required channels, and
    the builder options of its small variant (what tests build)."""

    name: str
    builder: Callable
    preprocessing: str
    min_size: int
    summary: str
    channels: Optional[int] = None  # None: any channel count
    small: tuple = ()  # (option, value) pairs of the small variant
    native: tuple = ()  # the native explainers it offers (models.architectures.native_explainers)


def _torchvision_specs():
    """The IDSDS ResNet / VGG families (docs/model_zoo.md), torchvision layout, ImageNet input."""
    resnets = [("resnet18", 18, 64, "batch", "ResNet-18"), ("resnet34", 34, 64, "batch",
                                                          "ResNet-34"),
               ("resnet50_tv", 50, 64, "batch", "ResNet-50 (torchvision layout)"),
               ("resnet101", 101, 64, "batch", "ResNet-101"),
               ("resnet152", 152, 64, "batch", "ResNet-152"),
               ("wide_resnet50_2", 50, 128, "batch", "Wide-ResNet-50-2"),
               ("fixup_resnet50", 50, 64, "fixup", "ResNet-50 without BatchNorm (Fixup)"),
               ("x_resnet50", 50, 64, "none", "ResNet-50 without BatchNorm and bias")]
    vggs = [("vgg11", 11, False, True, "VGG-11"), ("vgg13", 13, False, True, "VGG-13"),
            ("vgg16_tv", 16, False, True, "VGG-16 (torchvision layout)"),
            ("vgg19", 19, False, True, "VGG-19"), ("vgg16_bn", 16, True, True,
                                                   "VGG-16 with BatchNorm"),
            ("x_vgg16", 16, False, False, "VGG-16 without BatchNorm and bias")]
    specs = []
    for name, depth, base_width, norm, title in resnets:
        small = (("width", 8),) + ((("fixup_init", False),) if norm != "batch" else ())
        specs.append(ModelSpec(name, _resnet_builder(name, depth, base_width, norm), "imagenet",
                               32, f"{title}, torchvision/IDSDS layout", 3, small))
    for name, depth, batch_norm, bias, title in vggs:
        specs.append(ModelSpec(name, _vgg_builder(name, depth, batch_norm, bias), "imagenet", 32,
                               f"{title}, torchvision/IDSDS layout", 3,
                               (("width", 8), ("hidden", 32))))
    return specs


REGISTRY = {spec.name: spec for spec in (
    ModelSpec("resnet50", _build_resnet50, "imagenet", 32,
              "ResNet-50 v1.5 as ROAR trained it (logits, zero-gamma last BN)"),
    ModelSpec("keras_resnet50", _build_keras_resnet50, "caffe_rgb", 32,
              "keras.applications.ResNet50 (v1), weights None / 'imagenet' / file", channels=3),
    ModelSpec("vgg16", _build_vgg16, "caffe_rgb", 32,
              "keras.applications.VGG16, weights None / 'imagenet' / file", channels=3),
    ModelSpec("small_cnn", _build_small_cnn, "caffe_rgb", 8,
              "plain CNN (6 conv layers, no BN) for 32-128 px inputs"),
    ModelSpec("small_resnet", _build_small_resnet, "caffe_rgb", 8,
              "small residual net (3 basic blocks, BN) for 32-128 px inputs"),
    ModelSpec("plain_cnn", _build_plain_cnn, "caffe_rgb", 8,
              "cheap plain CNN (3 stride-2 convs, widths 16-32-64) for benchmarks"),
    *_torchvision_specs(),
    ModelSpec("bagnet33", bagnet.build_bagnet33, "imagenet", 33,
              "BagNet-33 (33x33-pixel patches), PyTorch release layout", 3, (("width", 8),),
              ("BagNet",)),
    ModelSpec("bcos_resnet50", bcos.build_bcos_resnet50, "pixels01", 32,
              "B-cos ResNet-50 (B = 2, v2 layout), [0, 1] input", 3, (("width", 8),),
              ("Bcos",)),
    ModelSpec("efficientnet_lite0", efficientnet_lite.build_efficientnet_lite0, "inception", 32,
              "EfficientNet-Lite0 (no squeeze-excitation, ReLU6), PyTorch port layout; real "
              "ImageNet weights by models.formats.pretrained", 3, (("width", 0.25),)),
    ModelSpec("vit_b_16", vit.build_vit, "inception", 16,
              "ViT-B/16, timm layout (patch 16, width 768, 12 blocks, 12 heads)", 3,
              (("patch", 8), ("dim", 32), ("depth", 2), ("heads", 2)), ("Rollout", "CheferLRP")),
)}


def spec(name: str) -> "ModelSpec":
    """Returns the `ModelSpec` of a registered model, or a clear error listing the names."""
    return look_up(REGISTRY, name, "model")


def build(name: str, num_classes: int, input_shape: Sequence[int], **options: Any) -> Any:
    """Builds the registered model `name` with `num_classes` logits for `input_shape` (H, W, C).

    `options` are the builder's keyword arguments (e.g. `weights=` for keras_resnet50 and vgg16,
    `width=` for the small models, `weight_decay=` for resnet50).
    """
    model_spec = spec(name)
    shape = tuple(input_shape)
    if len(shape) != 3 or not all(isinstance(d, int) and d > 0 for d in shape):
        raise UserError(f"input_shape must be (height, width, channels) of positive ints; "
                        f"got {input_shape!r}")
    if min(shape[:2]) < model_spec.min_size:
        raise UserError(f"{name} needs inputs of at least {model_spec.min_size}x"
                        f"{model_spec.min_size} pixels; got {shape[0]}x{shape[1]}")
    if model_spec.channels is not None and shape[2] != model_spec.channels:
        raise UserError(f"{name} takes {model_spec.channels}-channel input; got {shape[2]} "
                        "channels")
    if not isinstance(num_classes, int) or num_classes < 2:
        raise UserError(f"num_classes must be an int >= 2; got {num_classes!r}")
    accepted = inspect.signature(model_spec.builder).parameters
    unknown = sorted(set(options) - set(accepted))
    if unknown:
        allowed = [p for p in accepted if p not in ("num_classes", "input_shape")]
        raise UserError(f"{name} has no option {', '.join(unknown)}; its options are "
                        f"{', '.join(allowed) or 'none'}")
    model = model_spec.builder(num_classes, shape, **options)
    model.build_options = dict(options)  # recorded by models.export, reused by models.rebuild
    return model


def feature_layer_name(model: Any) -> str:
    """The name of `model`'s Grad-CAM feature layer (see the module docstring)."""
    names = [layer.name for layer in model.layers]
    if FEATURE_LAYER in names:
        return FEATURE_LAYER
    for layer in reversed(model.layers):
        output = getattr(layer, "output", None)
        if output is not None and len(getattr(output, "shape", ())) == 4:
            return layer.name
    raise UserError(f"model {model.name!r} has no layer with a 4-D output to use for Grad-CAM")


def cam_outputs(features_and_logits: Callable, images: Any, targets: Any) -> tuple:
    """(features, logits, d logit[target] / d features) from `features_and_logits(images)`,
    the inference pass of a `features_and_logits_model`."""
    import tensorflow as tf

    with tf.GradientTape() as tape:
        # The images watched, every intermediate tensor is: a feature map that no weight makes
        # (a padding layer's, the input itself) then has its gradient too, not None.
        tape.watch(images)
        features, logits = features_and_logits(images)
        score = tf.reduce_sum(tf.gather(logits, targets, batch_dims=1))
    return features, logits, tape.gradient(score, features)


def output_in_model(model: Any, layer: Any) -> Any:
    """The layer's output in `model`'s graph. `layer.output` is that of the layer's first call,
    which may lie in another graph: a nested model's own inner graph (a transfer-learning
    Sequential([base, pooling, head])), or the model of which `model` is a view sharing the
    layers (`guided.logits_model`, without a final softmax); Keras then fails with 'not
    connected to inputs'. The call in `model` is found by walking back from `model`'s outputs
    through each tensor's `_keras_history` (Keras keeps no public name for it)."""
    seen, pending = set(), list(model.outputs)
    while pending:
        tensor = pending.pop()
        history = getattr(tensor, "_keras_history", None)
        if history is None or id(tensor) in seen:
            continue
        seen.add(id(tensor))
        operation, node_index, tensor_index = history
        node = operation._inbound_nodes[node_index]
        if operation is layer:
            return node.output_tensors[tensor_index]
        pending.extend(node.input_tensors)
    raise UserError(f"layer {layer.name!r} does not lead to the outputs of model "
                    f"{model.name!r}; name another layer")


def features_and_logits_model(model: Any, layer_name: Optional[str] = None) -> Any:
    """A Keras model mapping images to (feature map, logits) in one forward pass."""
    layer_name = layer_name or feature_layer_name(model)
    try:
        layer = model.get_layer(layer_name)
    except ValueError:
        raise UserError(f"model {model.name!r} has no layer named {layer_name!r}") from None
    features = output_in_model(model, layer)
    if len(features.shape) != 4:
        raise UserError(f"layer {layer_name!r} of model {model.name!r} gives "
                        f"{list(features.shape)}, not a feature map [N, H, W, C]: choose a "
                        "convolutional layer for Grad-CAM")
    # inputs[0] and outputs[0], not input and output: a Sequential model whose input leaves a
    # size open has no `input` in Keras 3
    return keras.Model(model.inputs[0], [features, model.outputs[0]],
                       name=f"{model.name}_features_and_logits")


def in_precision(make: Callable[[], Any], precision: str) -> Any:
    """`make()` (a Keras model) built under `precision`: under a mixed precision its layers
    compute in bfloat16 / float16 with float32 variables, and its logits (so the loss) are
    cast to float32; float32 gives `make()` itself."""
    check_one_of("precision", precision, PRECISIONS)
    previous = keras.mixed_precision.global_policy().name
    keras.mixed_precision.set_global_policy(precision)
    try:
        model = make()
    finally:
        keras.mixed_precision.set_global_policy(previous)
    if precision == "float32":
        return model
    logits = keras.layers.Activation("linear", dtype="float32", name="float32_logits")(
        model.output)
    return keras.Model(model.input, logits, name=model.name)
