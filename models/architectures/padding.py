"""TensorFlow's "same" padding, computed from a static size: the Keras layers that pad
explicitly (EfficientNet-Lite's padding layers, the folded convolutions of `folding`) and the
PyTorch twins (`faithfulness.torch_twin`) share it. Imports nothing heavy: the twins run where
only torch and NumPy are at hand."""


def same_padding(size: int, kernel: int, stride: int, dilation: int = 1) -> tuple[int, int]:
    """(before, after) zero padding of one axis of `size` values for a convolution of `kernel`
    taps, `stride` and `dilation` under TensorFlow's "same" rule: the output has ceil(size /
    stride) positions, and the odd pixel goes after."""
    total = max((-(-size // stride) - 1) * stride + (kernel - 1) * dilation + 1 - size, 0)
    return total // 2, total - total // 2
