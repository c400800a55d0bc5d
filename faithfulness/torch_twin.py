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

# Keras layer class (or a base class of it) -> what the twin does; the config keys it reads
LAYERS = {
    "InputLayer": (), "Dropout": (), "Identity": (),
    "ZeroPadding2D": ("padding",),
    "Conv2D": ("kernel_size", "strides", "padding", "activation", "use_bias", "dilation_rate",
               "groups"),
    "DepthwiseConv2D": ("kernel_size", "strides", "padding", "activation", "use_bias",
                        "dilation_rate", "depth_multiplier"),
    "BatchNormalization": ("epsilon", "center", "scale", "axis"),
    "ReLU": ("max_value", "negative_slope", "threshold"),
    "Activation": ("activation",), "Softmax": ("axis",),
    "Add": (), "GlobalAveragePooling2D": ("keepdims",), "AveragePooling2D": (
        "pool_size", "strides", "padding"),
    "Dense": ("activation", "use_bias"), "Flatten": (),
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


def twin(keras_model: Any, softmax: bool = False) -> Any:
    """The PyTorch twin of `keras_model` from its layer graph (`graph_of`, `from_graph`);
    `softmax`: a softmax over the classes on top."""
    return from_graph(*graph_of(keras_model), softmax=softmax)


def _same_padding(size: int, kernel: int, stride: int, dilation: int) -> tuple[int, int]:
    """TensorFlow's "same" padding of one axis: (before, after), the odd pixel after."""
    total = max((-(-size // stride) - 1) * stride + (kernel - 1) * dilation + 1 - size, 0)
    return total // 2, total - total // 2


def from_graph(nodes: Sequence[dict], weights: Sequence[np.ndarray],
               softmax: bool = False) -> Any:
    """The PyTorch module (eval mode, NCHW inputs) computing the network of `graph_of`'s
    `nodes` with `weights`: each node's operation in order on the outputs of the nodes it
    reads; the last node's output is the model's."""
    import torch
    from torch.nn import functional

    arrays = iter(weights)

    def tensor(array: np.ndarray) -> Any:
        return torch.nn.Parameter(torch.tensor(np.asarray(array, np.float32)),
                                  requires_grad=False)

    def activation(name: Any, x: Any) -> Any:
        if name in (None, "linear"):
            return x
        if name == "relu":
            return torch.relu(x)
        if name == "softmax":
            return torch.softmax(x, dim=1)
        raise ValueError(f"no PyTorch twin of the activation {name!r}")

    class Node(torch.nn.Module):
        def __init__(self, node: dict):
            super().__init__()
            self.kind, self.config, self.sources = node["kind"], node["config"], node["inputs"]
            own = [next(arrays) for _ in range(node["weights"])]
            if self.kind in ("Conv2D", "DepthwiseConv2D", "Dense") and own:
                kernel = own[0]
                if self.kind == "Conv2D":  # [kh, kw, in / groups, out] -> [out, in, kh, kw]
                    kernel = kernel.transpose(3, 2, 0, 1)
                elif self.kind == "DepthwiseConv2D":  # [kh, kw, in, m] -> [in m, 1, kh, kw]
                    rows, cols, channels, multiplier = kernel.shape
                    kernel = kernel.reshape(rows, cols, 1, channels * multiplier).transpose(
                        3, 2, 0, 1)
                else:
                    kernel = kernel.T
                self.kernel = tensor(kernel)
                self.bias = tensor(own[1]) if len(own) > 1 else None
            if self.kind == "BatchNormalization":
                if self.config.get("axis", -1) not in (-1, 3, [-1], [3]):
                    raise ValueError("the twins' batch norm normalises the channels (axis -1)")
                parts = list(own)
                self.gamma = tensor(parts.pop(0)) if self.config.get("scale", True) else None
                self.beta = tensor(parts.pop(0)) if self.config.get("center", True) else None
                self.mean, self.variance = tensor(parts[0]), tensor(parts[1])
            if self.kind == "ReLU" and (float(self.config.get("negative_slope") or 0) != 0
                                        or float(self.config.get("threshold") or 0) != 0):
                raise ValueError("the twins' ReLU has no negative slope or threshold")

        def convolution(self, x: Any, groups: int) -> Any:
            config = self.config
            (rows, cols), (down, across) = config["kernel_size"], config["strides"]
            dilation = tuple(config.get("dilation_rate") or (1, 1))
            if config["padding"] == "same":
                top, bottom = _same_padding(x.shape[2], rows, down, dilation[0])
                left, right = _same_padding(x.shape[3], cols, across, dilation[1])
                x = functional.pad(x, (left, right, top, bottom))
            x = functional.conv2d(x, self.kernel, self.bias, (down, across), 0, dilation,
                                  groups)
            return activation(config.get("activation"), x)

        def forward(self, *inputs: Any) -> Any:  # noqa: C901 (one case per layer kind)
            x, kind, config = inputs[0], self.kind, self.config
            if kind in ("Dropout", "Identity"):
                return x
            if kind == "ZeroPadding2D":
                (top, bottom), (left, right) = config["padding"]
                return functional.pad(x, (left, right, top, bottom))
            if kind == "Conv2D":
                return self.convolution(x, int(config.get("groups") or 1))
            if kind == "DepthwiseConv2D":
                return self.convolution(x, x.shape[1])
            if kind == "BatchNormalization":
                return functional.batch_norm(x, self.mean, self.variance, self.gamma,
                                             self.beta, False, 0.0, float(config["epsilon"]))
            if kind == "ReLU":
                top = config.get("max_value")
                return torch.relu(x) if top is None else torch.clamp(x, 0.0, float(top))
            if kind == "Activation":
                return activation(config["activation"], x)
            if kind == "Softmax":
                return torch.softmax(x, dim=1 if config.get("axis", -1) in (-1, [-1]) else 0)
            if kind == "Add":
                return sum(inputs[1:], inputs[0])
            if kind == "GlobalAveragePooling2D":
                return x.mean(dim=(2, 3), keepdim=bool(config.get("keepdims")))
            if kind == "AveragePooling2D":
                if config.get("padding", "valid") != "valid":
                    raise ValueError("the twins' average pooling is valid")
                return functional.avg_pool2d(x, tuple(config["pool_size"]), tuple(
                    config.get("strides") or config["pool_size"]))
            if kind == "Flatten":  # in Keras's (H, W, C) order
                return torch.flatten(x.permute(0, 2, 3, 1) if x.dim() == 4 else x, 1)
            return activation(config.get("activation"), functional.linear(  # Dense
                x, self.kernel, self.bias))

    class Twin(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.order = [node["name"] for node in nodes]
            self.nodes = torch.nn.ModuleList(Node(node) for node in nodes)

        def forward(self, x: Any) -> Any:
            outputs: dict = {}
            for name, node in zip(self.order, self.nodes):
                outputs[name] = node(*(outputs.get(source, x) for source in node.sources))
            found = outputs[self.order[-1]]
            return torch.softmax(found, dim=1) if softmax else found

    built = Twin()
    if next(arrays, None) is not None:
        raise ValueError("more weights than the graph's layers hold")
    return built.eval()
