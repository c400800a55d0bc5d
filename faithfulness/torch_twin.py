"""Copying a Keras network's weights into its PyTorch twin, for the cross-checks and benchmarks
against the PyTorch reference implementations (needs torch; nothing else in the package does)."""


def copy_weights(keras_model, torch_model):
    """Copies the kernels and biases of `keras_model`'s Conv2D / Dense layers, in order, into the
    Conv2d / Linear modules of `torch_model` (NHWC kernels transposed to PyTorch's layout);
    returns `torch_model` in eval mode."""
    import torch

    layers = [layer for layer in keras_model.layers if layer.get_weights()]
    modules = [module for module in torch_model.modules()
               if isinstance(module, (torch.nn.Conv2d, torch.nn.Linear))]
    if len(layers) != len(modules):
        raise ValueError(f"{len(layers)} weighted Keras layers but {len(modules)} torch modules")
    with torch.no_grad():
        for layer, module in zip(layers, modules):
            kernel, bias = layer.get_weights()
            kernel = kernel.transpose(3, 2, 0, 1) if kernel.ndim == 4 else kernel.T
            module.weight.copy_(torch.tensor(kernel))
            module.bias.copy_(torch.tensor(bias))
    return torch_model.eval()
