"""PyTorch twins of Keras networks with the same weights, for the cross-checks and benchmarks
against PyTorch reference implementations (Captum, `saliency_maps_metrics`, Quantus); needs
torch, which nothing else in the package does. Inputs of a twin are NCHW.

`twin(keras_model)` builds the twin of any network of the layers in `LAYERS` (the zoo's
plain_cnn and small_resnet, EfficientNet-Lite0, the benchmarks' networks) from its layer
graph: `graph_of` reads the graph and the weights as plain data (JSON and arrays, on the Keras
side), `from_graph` builds the PyTorch module from them (where only torch and NumPy are at hand:
Quantus's environment, `scripts/quantus_timing.py`)."""
import json
from typing import Any, Sequence

import numpy as np

from models.architectures.padding import same_padding

# Keras layer class (or a base class of it) -> what the twin does; the config keys it reads
LAYERS = {
    "InputLayer": (), "Dropout": (), "Identity": (),
    "ZeroPadding2D": ("padding",),
    "Conv2D": ("kernel_size", "strides", "padding", "activation", "use_bias", "dilation_rate",
               "groups", "data_format"),
    "DepthwiseConv2D": ("kernel_size", "strides", "padding", "activation", "use_bias",
                        "dilation_rate", "depth_multiplier", "data_format"),
    "BatchNormalization": ("epsilon", "center", "scale", "axis"),
    "ReLU": ("max_value", "negative_slope", "threshold"),
    "Activation": ("activation",), "Softmax": ("axis",),
    "Add": (), "GlobalAveragePooling2D": ("keepdims", "data_format"), "AveragePooling2D": (
        "pool_size", "strides", "padding", "data_format"),
    "Dense": ("activation", "use_bias"), "Flatten": ("data_format",),
}


def _kind(layer: Any) -> str:
    """The name in `LAYERS` of the layer's class or of its nearest base class there."""
    for cls in type(layer).__mro__:
        if cls.__name__ in LAYERS:
            return cls.__name__
    raise ValueError(f"no PyTorch twin of layer {layer.name!r} ({type(layer).__name__}); "
                     f"the twins know {', '.join(LAYERS)}")


def graph_of(keras_model: Any) -> tuple[list, list]:
    """(nodes, weights): one node per layer of the Keras model, in its order, {"name", "kind"
    (`LAYERS`), "config" (the keys the twin reads), "inputs" (the names of the layers it reads;
    a name no node has is the model's input), "weights" (how many arrays)}, JSON-ready; and
    every layer's weights in order, float32 arrays in Keras's layouts."""
    nodes: list = []
    weights: list = []
    for layer in keras_model.layers:
        kind = _kind(layer)
        if kind == "InputLayer":
            continue
        if len(layer._inbound_nodes) != 1:  # (Keras keeps no public name for a layer's calls)
            raise ValueError(f"layer {layer.name!r} is called {len(layer._inbound_nodes)} "
                             "times; a twin needs each layer called once")
        config = layer.get_config()
        if config.get("data_format", "channels_last") != "channels_last":
            raise ValueError(f"layer {layer.name!r} is channels first; the twins read "
                             "channels-last Keras layers")
        own = [np.asarray(value, np.float32) for value in layer.get_weights()]
        nodes.append({
            "name": layer.name, "kind": kind,
            "config": json.loads(json.dumps({key: config[key] for key in LAYERS[kind]
                                             if key in config}, default=str)),
            "inputs": [tensor._keras_history.operation.name
                       for tensor in layer._inbound_nodes[0].input_tensors],
            "weights": len(own)})
        weights += own
    return nodes, weights


def twin(keras_model: Any) -> Any:
    """The PyTorch twin of `keras_model` from its layer graph (`graph_of`, `from_graph`)."""
    return from_graph(*graph_of(keras_model))


def from_graph(nodes: Sequence[dict], weights: Sequence[np.ndarray]) -> Any:
    """The PyTorch module (eval mode, NCHW inputs) computing the network of `graph_of`'s
    `nodes` with `weights`: each node's module in order on the outputs of the nodes it reads;
    the last node's output is the model's. Its modules are a PyTorch network's: one per Keras
    layer, named as the layer (Conv2d, BatchNorm2d, Linear, ZeroPad2d, ReLU, ...), and one for
    a layer's own activation after it (`<name>_activation`), so a peer that walks the modules
    (Quantus's MPRT and its first-layer shift, its hooked representations) finds the layers
    a PyTorch author would have written."""
    import torch

    arrays = iter(weights)
    built = [(node, _module(node, [next(arrays) for _ in range(node["weights"])]),
              _activation(node["config"].get("activation")))
             for node in nodes]
    if next(arrays, None) is not None:
        raise ValueError("more weights than the graph's layers hold")

    class Twin(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.steps = []  # (node, module name, its activation's module name or None)
            for node, module, activation in built:
                name = node["name"].replace(".", "_")
                self.add_module(name, module)
                if activation is not None:
                    self.add_module(f"{name}_activation", activation)
                self.steps.append((node, name, activation and f"{name}_activation"))

        def forward(self, x: Any) -> Any:  # (a copy, say Quantus's, computes with its own)
            outputs: dict = {}
            for node, name, activation in self.steps:
                inputs = [outputs.get(source, x) for source in node["inputs"]]
                if node["kind"] == "Dense" and inputs[0].dim() != 2:  # (Keras: the last axis)
                    raise ValueError(f"the twin's dense layer {node['name']!r} takes "
                                     "[N, features]; flatten or pool before it")
                found = getattr(self, name)(*inputs)
                outputs[node["name"]] = found if activation is None else getattr(
                    self, activation)(found)
            return outputs[nodes[-1]["name"]]

    return Twin().eval()


def _activation(name: Any) -> Any:
    """The torch module of a Keras activation's name (None for none or "linear")."""
    import torch

    if name in (None, "linear"):
        return None
    if name == "relu":
        return torch.nn.ReLU()
    if name == "softmax":
        return torch.nn.Softmax(dim=1)
    raise ValueError(f"no PyTorch twin of the activation {name!r}")


def _module(node: dict, own: list) -> Any:  # noqa: C901 (a case per layer kind)
    """The torch module of one Keras layer, holding its weights `own` (Keras layouts)."""
    import torch

    kind, config = node["kind"], node["config"]
    if kind in ("Conv2D", "DepthwiseConv2D"):
        return _convolution(kind, config, own)
    if kind == "Dense":
        module = torch.nn.Linear(*own[0].shape, bias=len(own) > 1)
        _fill((module.weight, module.bias), [own[0].T, *own[1:]])
        return module
    if kind == "BatchNormalization":
        if config.get("axis", -1) not in (-1, 3, [-1], [3]):
            raise ValueError("the twins' batch norm normalises the channels (axis -1)")
        parts = list(own)
        channels = len(parts[-1])
        module = torch.nn.BatchNorm2d(channels, eps=float(config["epsilon"]))
        _fill((module.weight, module.bias, module.running_mean, module.running_var), [
            parts.pop(0) if config.get("scale", True) else np.ones(channels),
            parts.pop(0) if config.get("center", True) else np.zeros(channels), *parts])
        return module
    if kind == "ZeroPadding2D":
        (top, bottom), (left, right) = config["padding"]
        return torch.nn.ZeroPad2d((left, right, top, bottom))
    if kind == "ReLU":
        if float(config.get("negative_slope") or 0) or float(config.get("threshold") or 0):
            raise ValueError("the twins' ReLU has no negative slope or threshold")
        top = config.get("max_value")
        return torch.nn.ReLU() if top is None else torch.nn.Hardtanh(0.0, float(top))
    if kind == "Activation":
        return _activation(config["activation"]) or torch.nn.Identity()
    if kind == "Softmax":
        if config.get("axis", -1) not in (-1, [-1]):
            raise ValueError("the twins' softmax is over the last axis")
        return torch.nn.Softmax(dim=1)
    if kind == "AveragePooling2D":
        if config.get("padding", "valid") != "valid":
            raise ValueError("the twins' average pooling is valid")
        return torch.nn.AvgPool2d(tuple(config["pool_size"]),
                                  tuple(config.get("strides") or config["pool_size"]))
    return _operation(kind, bool(config.get("keepdims")))


def _fill(targets: tuple, values: list) -> None:
    import torch

    with torch.no_grad():
        for target, value in zip(targets, values):
            target.copy_(torch.tensor(np.asarray(value, np.float32)))


def _convolution(kind: str, config: dict, own: list) -> Any:
    """A Conv2d of the Keras (depthwise) convolution: its kernel in PyTorch's layout, and
    TensorFlow's "same" padding (the odd pixel after) before it where the layer has it."""
    import torch
    from torch.nn import functional

    kernel = own[0]
    rows, cols, channels, outputs = kernel.shape
    if kind == "Conv2D":  # [kh, kw, in / groups, out] -> [out, in / groups, kh, kw]
        groups = int(config.get("groups") or 1)
        inputs, kernel = channels * groups, kernel.transpose(3, 2, 0, 1)
    else:  # [kh, kw, in, m] -> [in m, 1, kh, kw], one group a channel
        groups, inputs, outputs = channels, channels, channels * outputs
        kernel = kernel.reshape(rows, cols, 1, outputs).transpose(3, 2, 0, 1)
    same = config["padding"] == "same"

    class Convolution(torch.nn.Conv2d):
        def forward(self, x: Any) -> Any:
            if same:
                top, bottom = same_padding(x.shape[2], rows, self.stride[0],
                                            self.dilation[0])
                left, right = same_padding(x.shape[3], cols, self.stride[1],
                                            self.dilation[1])
                x = functional.pad(x, (left, right, top, bottom))
            return super().forward(x)

    module = Convolution(inputs, outputs, (rows, cols), tuple(config["strides"]), 0,
                         tuple(config.get("dilation_rate") or (1, 1)), groups,
                         bias=len(own) > 1)
    _fill((module.weight, module.bias), [kernel, *own[1:]])
    return module


def _operation(kind: str, keepdims: bool) -> Any:
    """The torch module of a parameterless Keras layer: Dropout and Identity (the input),
    Add (the sum of its inputs), GlobalAveragePooling2D (the mean over the positions) and
    Flatten (in Keras's H, W, C order)."""
    import torch

    class Operation(torch.nn.Module):
        def __init__(self, kind: str, keepdims: bool) -> None:
            super().__init__()
            if kind not in ("Dropout", "Identity", "Add", "GlobalAveragePooling2D", "Flatten"):
                raise ValueError(f"no PyTorch twin of a {kind} layer")
            self.kind, self.keepdims = kind, keepdims

        def forward(self, *inputs: Any) -> Any:
            x = inputs[0]
            if self.kind == "Add":
                return sum(inputs[1:], x)
            if self.kind == "GlobalAveragePooling2D":
                return x.mean(dim=(2, 3), keepdim=self.keepdims)
            if self.kind == "Flatten":
                return torch.flatten(x.permute(0, 2, 3, 1) if x.dim() == 4 else x, 1)
            return x

    return Operation(kind, keepdims)
