"""Writes PyTorch checkpoint files without torch, in both of PyTorch's serialisations (the zip
format and the legacy format), for tests of `models.formats.torch_pickle`: tensors from numpy
arrays, and any other picklable object beside them (a crafted payload).

The pickles name the same globals torch writes (`torch._utils._rebuild_tensor_v2`,
`torch.FloatStorage`, `collections.OrderedDict`) and use the same persistent ids, so the files
are what `torch.save` would write for these tensors."""
import collections
import io
import pickle
import struct
import zipfile

import numpy as np

STORAGE_NAMES = {np.dtype(np.float32): "FloatStorage", np.dtype(np.float64): "DoubleStorage",
                 np.dtype(np.int64): "LongStorage", np.dtype(np.float16): "HalfStorage"}
LEGACY_MAGIC = 0x1950A86A20F9469CFC6C


class Global:
    """A module-level name to write as a GLOBAL opcode, whatever this process can import."""

    def __init__(self, module: str, name: str):
        self.module, self.name = module, name

    def __call__(self, *args):  # pickle's save_reduce wants a callable; never called here
        raise TypeError(f"{self.module}.{self.name} is only written, not called")


class Tensor:
    """A numpy array to pickle as a torch tensor (storage, offset, shape, strides); a crafted
    one may declare another `shape` and `strides` than its array has, and (legacy format) a
    `view` (key, element offset, size) of its storage."""

    def __init__(self, array: np.ndarray, key: str, shape=None, strides=None, view=None):
        self.array, self.key = np.ascontiguousarray(array), key
        self.shape, self.strides, self.view = shape, strides, view

    def __reduce__(self):
        strides = self.strides or tuple(s // self.array.itemsize for s in self.array.strides)
        return (Global("torch._utils", "_rebuild_tensor_v2"),
                (Storage(self), 0, self.shape or self.array.shape, strides, False,
                 collections.OrderedDict()))


class Storage:
    def __init__(self, tensor: Tensor):
        self.tensor = tensor


class _Pickler(pickle._Pickler):
    """The pure-Python pickler, writing `Global`s verbatim and storages as persistent ids."""

    dispatch = dict(pickle._Pickler.dispatch)

    def __init__(self, handle, legacy: bool):
        super().__init__(handle, protocol=2)
        self.legacy = legacy
        self.storages = []

    def save_verbatim_global(self, obj):
        self.write(pickle.GLOBAL + f"{obj.module}\n{obj.name}\n".encode())
        self.memoize(obj)

    dispatch[Global] = save_verbatim_global

    def persistent_id(self, obj):
        if not isinstance(obj, Storage):
            return None
        tensor = obj.tensor
        self.storages.append(tensor)
        kind = Global("torch", STORAGE_NAMES[tensor.array.dtype])
        pid = ("storage", kind, tensor.key, "cpu", tensor.array.size)
        return pid + (tensor.view,) if self.legacy else pid


def tensors_of(state: dict) -> dict:
    """`state` with every numpy array wrapped as a `Tensor` (one storage each)."""
    return {key: Tensor(value, str(index)) if isinstance(value, np.ndarray) else value
            for index, (key, value) in enumerate(state.items())}


def write_checkpoint(path: str, obj, legacy: bool = False,
                     compression: int = zipfile.ZIP_STORED) -> None:
    """Writes `obj` (containers of `Tensor`s and anything picklable) to `path`; the zip format's
    members with `compression` (PyTorch stores them uncompressed)."""
    stream = io.BytesIO()
    pickler = _Pickler(stream, legacy)
    pickler.dump(obj)
    if legacy:
        with open(path, "wb") as handle:
            headers = (LEGACY_MAGIC, 1001, {"protocol_version": 1001, "little_endian": True})
            handle.writelines(pickle.dumps(header, protocol=2) for header in headers)
            handle.write(stream.getvalue())
            handle.write(pickle.dumps([t.key for t in pickler.storages], protocol=2))
            for tensor in pickler.storages:
                handle.write(struct.pack("<q", tensor.array.size))
                handle.write(tensor.array.tobytes())
        return
    with zipfile.ZipFile(path, "w", compression) as archive:
        archive.writestr("archive/data.pkl", stream.getvalue())
        archive.writestr("archive/byteorder", "little")
        for tensor in pickler.storages:
            archive.writestr(f"archive/data/{tensor.key}", tensor.array.tobytes())
        archive.writestr("archive/version", "3\n")


def keras_state_dict(model) -> dict:
    """A PyTorch-layout state dict of a zoo model's convolution, dense and batch-norm layers
    (module names are the Keras layer names, which the converter maps back by name)."""
    import keras

    state = {}
    for layer in model.layers:
        weights = [np.asarray(w) for w in layer.weights]
        if isinstance(layer, keras.layers.BatchNormalization):
            names = ("weight", "bias", "running_mean", "running_var")
        elif isinstance(layer, keras.layers.Conv2D):
            names, weights[0] = ("weight", "bias"), weights[0].transpose(3, 2, 0, 1)
        elif isinstance(layer, keras.layers.Dense):
            names, weights[0] = ("weight", "bias"), weights[0].T
        else:
            continue
        for name, value in zip(names, weights):
            state[f"{layer.name}.{name}"] = np.ascontiguousarray(value, np.float32)
    return state
