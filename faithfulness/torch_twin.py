"""PyTorch twins of Keras networks with the same weights, for the cross-checks and benchmarks
against PyTorch reference implementations (Captum, `saliency_maps_metrics`); needs torch, which
nothing else in the package does. Inputs of a twin are NCHW."""
from typing import Any


def copy_weights(keras_model: Any, torch_model: Any) -> None:
    """Copies the kernels and biases of `keras_model`'s Conv2D / Dense layers, in order, into the
    Conv2d / Linear modules of `torch_model` (NHWC kernels transposed to PyTorch's layout);
    returns `torch_model` in eval mode."""
    import torch

    layers = [layer for layer in keras_model.layers if layer.get_weights()]
    modules = [module for module in torch_model.modules()
               if isinstance(module, (torch.nn.Conv2d, torch.nn.Linear))]
    if len(layers) != len(modules):
        raise ValueError(f"{len(layers)} weighted Keras layers but {len(modules)} torch modules")
    for layer, module in zip(layers, modules):
        _copy_layer(layer, module)
    return torch_model.eval()


def _copy_layer(layer, module) -> None:
    """One Keras Conv2D / Dense / BatchNormalization layer's weights into its torch module."""
    import torch

    weights = layer.get_weights()
    with torch.no_grad():
        if isinstance(module, torch.nn.BatchNorm2d):
            gamma, beta, mean, variance = weights
            module.eps = float(layer.epsilon)
            for target, value in ((module.weight, gamma), (module.bias, beta),
                                  (module.running_mean, mean), (module.running_var, variance)):
                target.copy_(torch.tensor(value))
            return
        kernel = weights[0]
        kernel = kernel.transpose(3, 2, 0, 1) if kernel.ndim == 4 else kernel.T
        module.weight.copy_(torch.tensor(kernel))
        if len(weights) > 1:
            module.bias.copy_(torch.tensor(weights[1]))


def plain_cnn(keras_model: Any, softmax: bool = False) -> Any:
    """The twin of the zoo's `plain_cnn` (any widths; `softmax`: a softmax on top, for a Keras
    model that ends in one)."""
    import torch

    convolutions = [layer for layer in keras_model.layers if layer.name.startswith("conv")
                    and layer.get_weights()]
    modules, channels = [], 3
    for layer in convolutions:
        width = layer.get_weights()[0].shape[-1]
        modules += [torch.nn.Conv2d(channels, width, 3, stride=2, padding=1), torch.nn.ReLU()]
        channels = width
    modules += [torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(),
                torch.nn.Linear(channels, keras_model.get_layer("predictions").units)]
    if softmax:
        modules.append(torch.nn.Softmax(dim=1))
    return copy_weights(keras_model, torch.nn.Sequential(*modules))


def small_resnet(keras_model: Any) -> Any:
    """The twin of the zoo's `small_resnet` (batch norm in inference mode). A stride-2 3x3
    convolution pads the bottom and right only, as Keras' "same" padding does on even sizes."""
    import torch
    from torch.nn import functional

    def batch_norm(name):
        return torch.nn.BatchNorm2d(keras_model.get_layer(name).gamma.shape[0])

    def convolution(name, stride=1):
        kernel = keras_model.get_layer(name).get_weights()[0]
        size, _, cin, cout = kernel.shape
        padding = 0 if stride == 2 or size == 1 else size // 2
        return torch.nn.Conv2d(cin, cout, size, stride=stride, padding=padding, bias=False)

    class Block(torch.nn.Module):
        def __init__(self, name, stride):
            super().__init__()
            self.stride = stride
            self.shortcut = None
            if f"{name}_0_conv" in names:
                self.shortcut = torch.nn.Sequential(convolution(f"{name}_0_conv", stride),
                                                    batch_norm(f"{name}_0_bn"))
            self.conv1, self.bn1 = convolution(f"{name}_1_conv", stride), batch_norm(f"{name}_1_bn")
            self.conv2, self.bn2 = convolution(f"{name}_2_conv"), batch_norm(f"{name}_2_bn")
            self.keras_names = {f"{name}_{part}": module for part, module in (
                ("1_conv", self.conv1), ("1_bn", self.bn1), ("2_conv", self.conv2),
                ("2_bn", self.bn2))}
            if self.shortcut is not None:
                self.keras_names.update({f"{name}_0_conv": self.shortcut[0],
                                         f"{name}_0_bn": self.shortcut[1]})

        def forward(self, x):
            shortcut = x if self.shortcut is None else self.shortcut(x)
            y = functional.pad(x, (0, 1, 0, 1)) if self.stride == 2 else x
            y = torch.relu(self.bn1(self.conv1(y)))
            return torch.relu(shortcut + self.bn2(self.conv2(y)))

    class Twin(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.stem, self.stem_bn = convolution("stem_conv"), batch_norm("stem_bn")
            self.blocks = torch.nn.Sequential(*(Block(f"stage{stage}_block1", stride)
                                                for stage, stride in ((1, 1), (2, 2), (3, 2))))
            head = keras_model.get_layer("predictions")
            self.head = torch.nn.Linear(head.kernel.shape[0], head.units)

        def forward(self, x):
            x = self.blocks(torch.relu(self.stem_bn(self.stem(x))))
            return self.head(x.mean(dim=(2, 3)))

    names = {layer.name for layer in keras_model.layers}
    twin = Twin()
    pairs = {"stem_conv": twin.stem, "stem_bn": twin.stem_bn, "predictions": twin.head}
    for block in twin.blocks:
        pairs.update(block.keras_names)
    for name, module in pairs.items():
        _copy_layer(keras_model.get_layer(name), module)
    return twin.eval()


TWINS = {"plain_cnn": plain_cnn, "small_resnet": small_resnet}  # zoo name -> twin builder
