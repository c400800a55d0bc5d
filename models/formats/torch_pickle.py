"""PyTorch checkpoint files read without torch and without running code from them
(docs/model_zoo.md, "Reading PyTorch checkpoints").

A PyTorch checkpoint is a pickle, and unpickling a file may call any function it names. Here the
pickle is read by a restricted unpickler that resolves only the few globals a tensor checkpoint
needs (the tensor and parameter rebuild functions, the storage types and dtypes, `OrderedDict`;
`ALLOWED_GLOBALS`) into inert stand-ins; any other global stops the read with a
`UnsafeCheckpointError` naming the file and the global, before anything is called. Both of
PyTorch's serialisations are read:

* **zip** (torch >= 1.6): `<root>/data.pkl` holds the object, each storage's raw bytes are in
  `<root>/data/<key>`, `<root>/byteorder` says little or big endian;
* **legacy** (`_use_new_zipfile_serialization=False`, torch < 1.6): five pickles in a row (magic
  number, protocol version, system information, the object, the storage keys), then every
  storage in the order of the keys as an 8-byte little-endian element count and its bytes.

`read_checkpoint(path)` returns the object with every tensor as a numpy array (copied out of its
storage with the tensor's offset, shape and strides) and only plain containers around them.
"""
import collections
import io
import os
import pickle
import struct
import zipfile
from typing import Any, Optional

import ml_dtypes
import numpy as np

from models.foundation.errors import MissingPathError, UserError

LEGACY_MAGIC = 0x1950A86A20F9469CFC6C
LEGACY_PROTOCOL = 1001

# Storage classes and dtype names as PyTorch pickles them, with their numpy dtype.
STORAGE_DTYPES = {
    "FloatStorage": np.float32, "DoubleStorage": np.float64, "HalfStorage": np.float16,
    "BFloat16Storage": ml_dtypes.bfloat16, "LongStorage": np.int64, "IntStorage": np.int32,
    "ShortStorage": np.int16, "CharStorage": np.int8, "ByteStorage": np.uint8,
    "BoolStorage": np.bool_, "UntypedStorage": np.uint8,
}
DTYPE_NAMES = {
    "float32": np.float32, "float": np.float32, "float64": np.float64, "double": np.float64,
    "float16": np.float16, "half": np.float16, "bfloat16": ml_dtypes.bfloat16,
    "int64": np.int64, "long": np.int64, "int32": np.int32, "int": np.int32,
    "int16": np.int16, "short": np.int16, "int8": np.int8, "uint8": np.uint8, "bool": np.bool_,
}
REBUILD_FUNCTIONS = ("_rebuild_tensor", "_rebuild_tensor_v2", "_rebuild_tensor_v3",
                     "_rebuild_parameter", "_rebuild_parameter_with_state")
ALLOWED_GLOBALS = (
    {("collections", "OrderedDict")}
    | {("torch._utils", name) for name in REBUILD_FUNCTIONS}
    | {("torch", name) for name in STORAGE_DTYPES}
    | {("torch.storage", "UntypedStorage")}
    | {("torch", name) for name in DTYPE_NAMES}
)


class UnsafeCheckpointError(UserError):
    """The checkpoint's pickle names a global that is not part of a tensor checkpoint."""


class _Inert:
    """A stand-in the unpickler makes; refuses pickle's BUILD, so a crafted pickle cannot set
    its state."""

    __slots__ = ()

    def __init__(self, **fields):
        for name, value in fields.items():
            object.__setattr__(self, name, value)

    def __setstate__(self, state):
        raise pickle.UnpicklingError("state set on a tensor stand-in")

    def __setattr__(self, name, value):
        raise pickle.UnpicklingError("attribute set on a tensor stand-in")


class _DType(_Inert):
    """A storage class or dtype global: only its numpy dtype."""

    __slots__ = ("dtype",)
    dtype: np.dtype


class _Storage(_Inert):
    """A storage the pickle refers to: its key, element dtype, size and offset (legacy views
    start inside their root storage)."""

    __slots__ = ("dtype", "key", "numel", "offset")
    dtype: np.dtype
    key: str
    numel: int
    offset: int


class _Tensor(_Inert):
    """A tensor to cut out of a storage: element offset, shape, element strides and (when
    `_rebuild_tensor_v3` names one) its own dtype."""

    __slots__ = ("dtype", "offset", "shape", "storage", "strides")
    dtype: Optional[np.dtype]
    offset: int
    shape: tuple
    storage: _Storage
    strides: tuple


def _as_ints(values, what: str) -> tuple:
    if not isinstance(values, (tuple, list)) or not all(isinstance(v, int) for v in values):
        raise pickle.UnpicklingError(f"a tensor's {what} is not a tuple of ints")
    return tuple(values)


def _tensor(storage, offset, shape, strides, dtype=None) -> _Tensor:
    if not isinstance(storage, _Storage) or not isinstance(offset, int):
        raise pickle.UnpicklingError("a tensor without a storage")
    return _Tensor(storage=storage, offset=offset, shape=_as_ints(shape, "shape"),
                   strides=_as_ints(strides, "strides"), dtype=dtype)


def _rebuild_tensor_v2(storage, offset, shape, strides, *_ignored):
    return _tensor(storage, offset, shape, strides)


def _rebuild_tensor_v3(storage, offset, shape, strides, _requires_grad, _hooks, dtype, *_rest):
    if not isinstance(dtype, _DType):
        raise pickle.UnpicklingError("a tensor whose dtype is not a dtype")
    return _tensor(storage, offset, shape, strides, dtype.dtype)


def _rebuild_parameter(data, *_ignored):
    if not isinstance(data, _Tensor):
        raise pickle.UnpicklingError("a parameter that is not a tensor")
    return data


_REBUILDERS = {"_rebuild_tensor": _rebuild_tensor_v2, "_rebuild_tensor_v2": _rebuild_tensor_v2,
               "_rebuild_tensor_v3": _rebuild_tensor_v3,
               "_rebuild_parameter": _rebuild_parameter,
               "_rebuild_parameter_with_state": _rebuild_parameter}


class _RestrictedUnpickler(pickle.Unpickler):
    """Resolves only `ALLOWED_GLOBALS`, each to an inert stand-in; storages come from
    `storage_of(persistent id)`."""

    def __init__(self, handle, path: str, storage_of=None):
        super().__init__(handle)
        self._path = path
        self._storage_of = storage_of

    def find_class(self, module, name):
        if (module, name) not in ALLOWED_GLOBALS:
            raise UnsafeCheckpointError(
                f"{self._path}: refused: its pickle names the global {module}.{name}, which is "
                "not part of a tensor checkpoint (reading it could run code)")
        if module == "collections":
            return collections.OrderedDict
        if module == "torch._utils":
            return _REBUILDERS[name]
        return _DType(dtype=STORAGE_DTYPES.get(name) or DTYPE_NAMES[name])

    def persistent_load(self, pid):
        if self._storage_of is None:
            raise pickle.UnpicklingError("a storage reference where none belongs")
        return self._storage_of(pid)


def _storage_from_id(pid, legacy: bool) -> _Storage:
    """The `_Storage` of a persistent id: ('storage', type, key, location, numel[, view])."""
    if not isinstance(pid, tuple) or len(pid) < 5 or pid[0] not in ("storage", b"storage"):
        raise pickle.UnpicklingError(f"an unknown persistent id (a {type(pid).__name__})")
    kind, key, numel = pid[1], pid[2], pid[4]
    if not isinstance(kind, _DType) or not _is_count(numel) or \
            not isinstance(key, (str, bytes)) or len(key) > 256:
        raise pickle.UnpicklingError("a malformed storage reference")
    key = key.decode(errors="replace") if isinstance(key, bytes) else key
    view = pid[5] if legacy and len(pid) > 5 else None
    if view is not None:  # a view of a root storage: (view key, element offset, size)
        if not (isinstance(view, tuple) and len(view) == 3 and _is_count(view[1])
                and _is_count(view[2]) and view[1] + view[2] <= numel):
            raise pickle.UnpicklingError("a storage view outside its root storage")
        return _Storage(key=key, dtype=kind.dtype, numel=view[2], offset=view[1])
    return _Storage(key=key, dtype=kind.dtype, numel=numel, offset=0)


def _is_count(value) -> bool:
    """A non-negative int (not a bool)."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _unpickle(data: bytes, path: str, storage_of=None, handle=None):
    reader = handle if handle is not None else io.BytesIO(data)
    return _RestrictedUnpickler(reader, path, storage_of).load()


# What a checkpoint's object may become: its containers at most this deep, at most this many
# container entries, and arrays of at most twice the bytes of its storages (tensors are cut out
# of storages, mostly one each; PyTorch's legacy views split one root storage between them).
MAX_DEPTH = 64
MAX_ENTRIES = 10_000_000


def _materialise(value, buffers: dict, path: str) -> Any:
    """`value` with every `_Tensor` replaced by a numpy array; refuses anything but plain
    containers, strings, numbers and tensors. An object the pickle refers to twice is converted
    once (a pickle of shared references could otherwise stand for exponentially many), and the
    arrays made are bounded by the storages' bytes."""
    memo: dict = {}
    budget = {"entries": MAX_ENTRIES,
              "bytes": 2 * sum(len(raw) for raw in buffers.values()) + (1 << 20)}

    def convert(item, depth):
        if depth > MAX_DEPTH:
            raise UserError(f"{path}: nested too deeply to be a checkpoint")
        if item is None or isinstance(item, (str, bytes, bool, int, float)):
            return item
        if id(item) in memo:
            return memo[id(item)][1]
        budget["entries"] -= 1 + (len(item) if isinstance(item, (dict, list, tuple)) else 0)
        if budget["entries"] < 0:
            raise UserError(f"{path}: more than {MAX_ENTRIES} entries; refused")
        result: Any
        if isinstance(item, _Tensor):
            result = _tensor_array(item, buffers, path)
            budget["bytes"] -= result.nbytes
            if budget["bytes"] < 0:
                raise UserError(f"{path}: its tensors would take more than twice the bytes of "
                                "its storages; refused")
        elif isinstance(item, dict):
            result = collections.OrderedDict() if isinstance(
                item, collections.OrderedDict) else {}
            for key, entry in item.items():
                result[convert(key, depth + 1)] = convert(entry, depth + 1)
        elif isinstance(item, (list, tuple)):
            items = [convert(entry, depth + 1) for entry in item]
            result = items if isinstance(item, list) else tuple(items)
        else:
            raise UserError(f"{path}: holds a {type(item).__name__}, which is not part of a "
                            "tensor checkpoint")
        memo[id(item)] = (item, result)  # (the item kept alive: its id stays its own)
        return result

    return convert(value, 0)


def _tensor_array(tensor: _Tensor, buffers: dict, path: str) -> np.ndarray:
    storage = tensor.storage
    if storage.key not in buffers:
        raise UserError(f"{path}: a tensor refers to the missing storage {storage.key}")
    dtype = np.dtype(tensor.dtype or storage.dtype)
    raw = buffers[storage.key]
    flat = np.frombuffer(raw, dtype=dtype, count=len(raw) // dtype.itemsize)
    flat = flat[storage.offset:storage.offset + storage.numel]
    shape, strides = tensor.shape, tensor.strides
    if len(shape) != len(strides) or len(shape) > 32 or min(shape, default=1) < 0 or \
            min(strides, default=0) < 0:
        raise UserError(f"{path}: a tensor with shape {shape[:8]} and strides {strides[:8]}")
    if 0 in shape:
        return np.zeros(shape, dtype)
    # bounded by its storage: a tensor has no more elements than the storage it is cut from
    # (zero strides could otherwise make a few bytes of file into gigabytes of array)
    elements = int(np.prod(shape, dtype=object))
    if elements > flat.size:
        raise UserError(f"{path}: a tensor of shape {shape} has {elements} elements, more than "
                        f"the {flat.size} of its storage")
    last = tensor.offset + sum((n - 1) * s for n, s in zip(shape, strides))
    if tensor.offset < 0 or last >= flat.size:
        raise UserError(f"{path}: a tensor reaches past the end of its storage "
                        f"({last + 1} > {flat.size} elements; a truncated file?)")
    view = np.lib.stride_tricks.as_strided(
        flat[tensor.offset:], shape=shape, strides=[s * dtype.itemsize for s in strides],
        writeable=False)
    return np.array(view)


def _read_zip(path: str) -> Any:
    with zipfile.ZipFile(path) as archive:
        names = archive.namelist()
        pickles = [name for name in names if name.endswith("/data.pkl") or name == "data.pkl"]
        if len(pickles) != 1:
            raise UserError(f"{path}: a zip file without one data.pkl (not a PyTorch checkpoint)")
        root = pickles[0][:-len("data.pkl")]
        if f"{root}byteorder" in names:
            order = archive.read(f"{root}byteorder").decode(errors="replace").strip()
            if order != "little":
                raise UserError(f"{path}: stored {order}-endian; only little-endian is read")
        wanted = {}

        def storage_of(pid):
            storage = _storage_from_id(pid, legacy=False)
            wanted[storage.key] = storage
            return storage

        value = _unpickle(_bounded_read(archive, pickles[0], path), path, storage_of)
        buffers = {}
        for key, storage in wanted.items():
            member = f"{root}data/{key}"
            if member not in names:
                raise UserError(f"{path}: the storage {key} is missing from the archive")
            buffers[key] = _read_member(archive, member, storage, path)
    return _materialise(value, buffers, path)


# A storage member PyTorch writes is stored uncompressed; one compressed later (a checkpoint
# re-zipped) may be inflated up to this many times its compressed size, no more.
MAX_INFLATION = 20


def _read_member(archive: zipfile.ZipFile, member: str, storage: _Storage, path: str) -> bytes:
    """A storage's bytes, after checking what the archive declares of the member against what
    the pickle declares of the storage, and its inflation, before anything is inflated."""
    info = archive.getinfo(member)
    expected = storage.numel * np.dtype(storage.dtype).itemsize
    if info.file_size != expected:
        raise UserError(f"{path}: the storage {storage.key} holds {info.file_size} bytes, not "
                        f"the {expected} its tensors declare")
    return _bounded_read(archive, member, path)


def _bounded_read(archive: zipfile.ZipFile, member: str, path: str) -> bytes:
    """A member's bytes, refused before inflating when it would inflate more than
    `MAX_INFLATION` times its compressed size."""
    info = archive.getinfo(member)
    if info.compress_type != zipfile.ZIP_STORED and \
            info.file_size > MAX_INFLATION * max(info.compress_size, 1):
        raise UserError(f"{path}: {member} would inflate {info.compress_size} bytes to "
                        f"{info.file_size}; refused (a zip bomb?)")
    return archive.read(member)


def _read_legacy(path: str) -> Any:
    with open(path, "rb") as handle:
        data = handle.read()
    stream = io.BytesIO(data)
    if _unpickle(b"", path, handle=stream) != LEGACY_MAGIC:
        raise UserError(f"{path}: not a PyTorch checkpoint (neither a zip file nor the legacy "
                        "format's magic number)")
    if _unpickle(b"", path, handle=stream) != LEGACY_PROTOCOL:
        raise UserError(f"{path}: an unknown legacy PyTorch protocol version")
    info = _unpickle(b"", path, handle=stream)
    if isinstance(info, dict) and info.get("little_endian") is False:
        raise UserError(f"{path}: stored big-endian; only little-endian is read")
    roots: dict[str, tuple] = {}  # key: (dtype, element count)

    def storage_of(pid):
        storage = _storage_from_id(pid, legacy=True)
        roots.setdefault(storage.key, (storage.dtype, pid[4]))
        return storage

    value = _unpickle(b"", path, storage_of, handle=stream)
    keys = _unpickle(b"", path, handle=stream)
    if not isinstance(keys, list):
        raise UserError(f"{path}: a malformed list of storages")
    buffers, offset = {}, stream.tell()
    for key in keys:
        key = key.decode() if isinstance(key, bytes) else str(key)
        if key not in roots or offset + 8 > len(data):
            raise UserError(f"{path}: the storage {key} is missing or cut off")
        (count,) = struct.unpack_from("<q", data, offset)
        size = count * np.dtype(roots[key][0]).itemsize
        start = offset + 8
        if count < 0 or start + size > len(data):
            raise UserError(f"{path}: the storage {key} is cut off (a truncated file?)")
        buffers[key] = data[start:start + size]
        offset = start + size
    return _materialise(value, buffers, path)


def read_checkpoint(path: str) -> Any:
    """The object saved in the PyTorch checkpoint `path`, tensors as numpy arrays (see the
    module docstring). Raises a `UserError` naming the file: missing, not a checkpoint,
    truncated, or naming a global that could run code (`UnsafeCheckpointError`)."""
    if not os.path.isfile(path):
        raise MissingPathError(f"{path}: no such checkpoint file")
    try:
        if zipfile.is_zipfile(path):
            return _read_zip(path)
        return _read_legacy(path)
    except UserError:
        raise
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, KeyError, IndexError,
            AttributeError, struct.error, zipfile.BadZipFile, zipfile.LargeZipFile,
            NotImplementedError, OverflowError, RecursionError, UnicodeDecodeError,
            MemoryError) as error:
        detail = (str(error).strip().splitlines() or [type(error).__name__])[0][:160]
        raise UserError(f"{path}: not a readable PyTorch checkpoint ({detail})") from None
