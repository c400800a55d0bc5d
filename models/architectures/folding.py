"""A Keras functional model's inference pass with its batch norms folded into the convolutions
before them and its explicit zero pads into the convolutions after them (docs/models.md, "Folded
inference").

`folded_call(model)` returns `call(x) -> outputs`, the same function of the model's current
weights as `model(x, training=False)`, computed as inference runtimes compute it:

* a Conv2D or DepthwiseConv2D (the Keras classes themselves, linear, channels last, float32)
  whose only consumer is a BatchNormalization over its last axis computes `conv(x, K * s) + b`
  with `s = gamma / sqrt(variance + epsilon)` and `b = beta - mean * s` (+ its own bias times
  `s`), read from the variables at every call, and the batch norm passes its input through. On CPU
  TensorFlow then runs convolution, bias and a following ReLU/ReLU6 as one oneDNN operation,
  where the batch norm was two passes over the activations (a multiply and an add) and the
  activation a third;
* a ZeroPadding2D whose only consumer is such a convolution with "valid" padding, when its
  amounts are TensorFlow's "same" rule for that convolution (the extra pixel of an even total at
  the bottom and right), passes its input through and the convolution pads itself.

Every other layer runs as the model runs it, in inference mode; a model with nothing to fold (or
not functional, or with several inputs) runs as Keras runs it. The arithmetic is the same up to
rounding: the folded kernel rounds `K * s` once, where the model rounds the convolution's output
and then its product with `s` (a relative difference of the order of 1e-6 in the logits).
"""
from typing import Any, Callable, Optional

import keras
import tensorflow as tf

from models.architectures.padding import same_padding

CONVOLUTIONS = (keras.layers.Conv2D, keras.layers.DepthwiseConv2D)


def folds(model: Any) -> bool:
    """Whether `folded_call(model)` computes otherwise than Keras (a pair to fold or a pad to
    merge)."""
    return _is_functional(model) and any(foldable(model))


def folded_call(model: Any) -> Callable[[tf.Tensor], Any]:
    """`call(x)`: `model(x, training=False)` with its conv + batch-norm pairs folded and its
    "same" zero pads merged (the module's note); `model(x, training=False)` itself for a model
    with nothing to fold or with more than one input, or that is not functional."""
    norms, pads = foldable(model) if _is_functional(model) else ({}, {})
    if not norms and not pads:
        return lambda x: model(x, training=False)
    folded = {id(conv): norm for conv, norm in norms.items()}
    padded = {id(conv) for conv in pads.values()}
    passed = {id(layer) for layer in (*norms.values(), *pads)}

    def operation(layer: Any) -> Callable:
        if id(layer) in passed:
            return lambda inputs, *args, **kwargs: inputs
        if id(layer) in folded or id(layer) in padded:
            return lambda inputs, *args, **kwargs: _convolved(
                layer, inputs, folded.get(id(layer)), id(layer) in padded)
        return lambda *args, **kwargs: layer(
            *args, **{**kwargs, **({"training": False} if _takes_training(layer) else {})})

    def call(x: tf.Tensor) -> Any:
        outputs = model._run_through_graph([x], operation_fn=operation)  # the outputs' structure
        return outputs[0] if isinstance(outputs, (list, tuple)) and len(outputs) == 1 else outputs
    return call


def _is_functional(model: Any) -> bool:
    return (hasattr(model, "_run_through_graph") and hasattr(model, "_nodes_by_depth")
            and len(model.inputs) == 1)


def _takes_training(layer: Any) -> bool:
    return "training" in getattr(layer, "_call_context_args", ())


def _consumers(model: Any) -> tuple[dict, dict]:
    """({layer id: [consuming layers]}, {layer id: its single inbound node's input layers}) over
    the model's graph; a layer called more than once maps to None (never folded)."""
    consumers: dict = {}
    producers: dict = {}
    for nodes in model._nodes_by_depth.values():
        for node in nodes:
            layer = node.operation
            if layer is None or node.is_input:
                continue
            inputs = [tensor._keras_history.operation for tensor in node.input_tensors]
            producers[id(layer)] = None if id(layer) in producers else inputs
            for producer in inputs:
                consumers.setdefault(id(producer), []).append(layer)
    return consumers, producers


def foldable(model: Any) -> tuple[dict, dict]:
    """({conv: its batch norm}, {zero pad: its conv}): the pairs `folded_call` folds in the
    functional `model`."""
    consumers, producers = _consumers(model)
    outputs = {id(tensor._keras_history.operation) for tensor in model.outputs}
    norms, pads = {}, {}
    for layer in model.layers:
        after = consumers.get(id(layer), [])
        if len(after) != 1 or id(layer) in outputs or producers.get(id(layer)) is None:
            continue
        (following,) = after
        if (_is_linear_convolution(layer) and type(following) is keras.layers.BatchNormalization
                and following.axis in (-1, len(layer.output.shape) - 1)
                and producers.get(id(following)) is not None):
            norms[layer] = following
        elif (type(layer) is keras.layers.ZeroPadding2D and _is_linear_convolution(following)
              and following.padding == "valid" and producers.get(id(following)) is not None
              and _same_amounts(following, layer.input.shape) == _amounts(layer)):
            pads[layer] = following
    return norms, pads


def _is_linear_convolution(layer: Any) -> bool:
    """A Keras Conv2D or DepthwiseConv2D, linear, channels last, computing in float32 (a model
    in mixed precision runs as Keras runs it)."""
    return (type(layer) in CONVOLUTIONS and layer.data_format == "channels_last"
            and layer.activation in (None, keras.activations.linear)
            and getattr(layer, "groups", 1) == 1 and layer.compute_dtype == "float32")


def _amounts(pad: Any) -> tuple:
    return tuple(tuple(int(side) for side in axis) for axis in pad.padding)


def _same_amounts(conv: Any, shape: tuple) -> Optional[tuple]:
    """TensorFlow's "same" padding of `conv` on inputs of `shape` [N, H, W, C] (None: unknown
    size or a dilated convolution)."""
    if tuple(conv.dilation_rate) != (1, 1) or None in tuple(shape[1:3]):
        return None
    return tuple(same_padding(int(size), kernel, stride)
                 for size, kernel, stride in zip(shape[1:3], conv.kernel_size, conv.strides))


def _convolved(conv: Any, x: tf.Tensor, norm: Any, same: bool) -> tf.Tensor:
    """`conv` on `x` with "same" padding when `same`, its kernel and bias folded with `norm`'s
    inference transform when one is given."""
    kernel = tf.convert_to_tensor(conv.kernel)
    bias = tf.convert_to_tensor(conv.bias) if conv.use_bias else None
    if norm is not None:
        scale = tf.math.rsqrt(tf.convert_to_tensor(norm.moving_variance) + norm.epsilon)
        if norm.scale:
            scale = scale * tf.convert_to_tensor(norm.gamma)
        shift = -tf.convert_to_tensor(norm.moving_mean) * scale
        if norm.center:
            shift = shift + tf.convert_to_tensor(norm.beta)
        # the output channels: a Conv2D's last kernel axis; a depthwise kernel's (input, multiplier)
        # pairs, in the order of its outputs
        depthwise = type(conv) is keras.layers.DepthwiseConv2D
        kernel = kernel * tf.reshape(scale, [1, 1, *(kernel.shape[2:] if depthwise else [1, -1])])
        bias = shift if bias is None else bias * scale + shift
    padding = "SAME" if same else conv.padding.upper()
    kernel = tf.cast(kernel, x.dtype)
    if type(conv) is keras.layers.DepthwiseConv2D:
        y = tf.nn.depthwise_conv2d(x, kernel, [1, *conv.strides, 1], padding,
                                   dilations=conv.dilation_rate)
    else:
        y = tf.nn.conv2d(x, kernel, conv.strides, padding, dilations=conv.dilation_rate)
    return y if bias is None else tf.nn.bias_add(y, tf.cast(bias, x.dtype))
