"""`.npy` files that hold an object array of plain numeric arrays (BAM's `val_mask`), read
without running code from them (docs/bam.md, "The dataset layout").

numpy stores an object array as a pickle after the `.npy` header, and numpy's own reader, once
pickles are allowed, would call any function that pickle names. Here the pickle is read by a
restricted unpickler that resolves only the globals an array of arrays needs (numpy's array
rebuild function, `ndarray`, `dtype`, and latin-1 bytes in protocol 2); any other global stops
the read with an `UnsafeArrayFileError` naming the file and the global, before anything is
called. Arrays that are not object arrays are read with `allow_pickle=False`.
"""
import os
import pickle

import numpy as np

from models.foundation.errors import MissingPathError, UserError

# The globals of an object array of numeric arrays, as numpy 1.x and 2.x pickle them.
ALLOWED_GLOBALS = {
    (module, name)
    for module in ("numpy.core.multiarray", "numpy._core.multiarray")
    for name in ("_reconstruct",)
} | {("numpy", "ndarray"), ("numpy", "dtype"), ("_codecs", "encode")}


class UnsafeArrayFileError(UserError):
    """The file's pickle names a global that an array of arrays does not need."""


class _ArrayUnpickler(pickle.Unpickler):
    """Resolves only `ALLOWED_GLOBALS`; everything else is refused by name."""

    def __init__(self, handle, path: str):
        super().__init__(handle, encoding="latin1")  # latin1: Python 2 arrays, as numpy advises
        self._path = path

    def find_class(self, module: str, name: str):
        if (module, name) not in ALLOWED_GLOBALS:
            raise UnsafeArrayFileError(
                f"{self._path}: refused: its pickle names the global {module}.{name}, which an "
                "array of arrays does not need (reading it could run code)")
        if name == "encode":  # protocol 2 from Python 3 spells bytes as encode(text, latin1)
            return _latin1_bytes
        if name == "_reconstruct":  # numpy's own rebuild function, as ndarray reduces to it
            return np.empty(0).__reduce__()[0]
        return np.ndarray if name == "ndarray" else np.dtype

    def persistent_load(self, pid):
        raise pickle.UnpicklingError("a persistent reference where none belongs")


def _latin1_bytes(text: str, encoding: str = "latin1") -> bytes:
    """The bytes of a protocol-2 pickle's `_codecs.encode(text, "latin1")`; no other codec."""
    if not isinstance(text, str) or encoding not in ("latin1", "latin-1"):
        raise pickle.UnpicklingError(f"an encode call with codec {encoding!r}")
    return text.encode("latin1")


def _check_plain(value, path: str) -> np.ndarray:
    """`value` if it is a numeric (not object) ndarray."""
    if type(value) is not np.ndarray or value.dtype.hasobject:
        raise UserError(f"{path}: holds a {type(value).__name__} where an array of numbers "
                        "belongs")
    return value


def load_object_array(path: str) -> list:
    """The arrays of a 1-D `.npy` object array at `path` (any file name), each a numeric
    ndarray; a numeric `.npy` array comes back as the list of its rows."""
    try:
        handle = open(path, "rb")
    except FileNotFoundError:
        raise MissingPathError(f"{path} does not exist") from None
    with handle:
        try:
            version = np.lib.format.read_magic(handle)
            read_header = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                           else np.lib.format.read_array_header_2_0)
            shape, _, dtype = read_header(handle)
            if not dtype.hasobject:
                declared = int(np.prod(shape, dtype=object)) * dtype.itemsize
                held = os.fstat(handle.fileno()).st_size - handle.tell()
                if declared > held:  # refused before numpy sizes an array by the header
                    raise UserError(f"{path}: its header declares {declared} bytes of values; "
                                    f"the file holds {held}")
                handle.seek(0)
                return list(np.lib.format.read_array(handle, allow_pickle=False))
            array = _ArrayUnpickler(handle, path).load()
        except UserError:
            raise
        except Exception as error:  # noqa: BLE001 - any malformed byte: one line
            raise UserError(f"{path} is not a .npy array of arrays: {error}") from None
    if type(array) is not np.ndarray or array.ndim != 1:
        raise UserError(f"{path}: holds {type(array).__name__} "
                        f"{getattr(array, 'shape', '')}, not a 1-D array of arrays")
    return [_check_plain(item, path) for item in array]
