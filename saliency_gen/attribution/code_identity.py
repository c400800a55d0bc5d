"""The identity of a researcher's method code, for the origins that name it (docs/saliency.md,
"Your own method": an edited method is recomputed).

`code_digest(obj)` digests a function's (or class's) source with the files of the user's modules
behind it (`user_modules`: its own module and every module of the user's it reaches through its
globals, not installed libraries, not this project's packages), or, for code without a module
file (a notebook's cells), the helpers and constants of its module that it reads.
`digest_on_disk(obj)` is the same digest for code from files, taken again only when one of
those files changed.
"""
import hashlib
import inspect
import marshal
import os
import site
import sys
import sysconfig
import types
from typing import Any

import numpy as np

from models.foundation import file_digests


def _source_of(obj: Any) -> bytes:
    """The source text of a function or class, or (defined where no source is kept, e.g. with
    exec) its compiled code; b"" for neither."""
    try:
        return inspect.getsource(obj).encode()
    except (OSError, TypeError):
        code = getattr(obj, "__code__", None)
        return marshal.dumps(code) if code is not None else b""


# The project's own packages: their code is fixed by the package version, not digested.
PROJECT_PACKAGES = ("models", "saliency_gen", "bam", "roar", "faithfulness", "scripts")


def _library_folders() -> tuple:
    """The folders of installed code (the standard library, site-packages), each ending in a
    separator: modules there are libraries, whose versions are not a user's edits."""
    paths = sysconfig.get_paths()
    folders = {paths[key] for key in ("stdlib", "platstdlib", "purelib", "platlib")
               if key in paths}
    folders.update(site.getsitepackages() + [site.getusersitepackages()])
    return tuple(os.path.join(os.path.realpath(folder), "") for folder in folders)


def _is_users(module: Any, home: str, libraries: tuple) -> bool:
    """Whether `module` is a user's code: a file of the top-level package `home` (the method's
    own, even when installed), or a file outside the installed libraries and outside the
    project's own packages."""
    path = getattr(module, "__file__", None)
    top = module.__name__.split(".")[0]
    if not path or top in PROJECT_PACKAGES:
        return False
    return top == home or not os.path.realpath(path).startswith(libraries)


def user_modules(obj: Any) -> list:
    """[(module name, file path)]: the module that defines `obj`, then, sorted by name, every
    user module it reaches through its globals (modules imported, and the modules of the
    functions, classes and values imported from them), transitively, so that an edited helper
    in another file of the researcher's code changes the method's digest (docs/saliency.md,
    "Your own method")."""
    start = inspect.getmodule(obj)
    if start is None or not getattr(start, "__file__", None):
        return []
    home, libraries = start.__name__.split(".")[0], _library_folders()
    found: dict = {}
    waiting: list = [start]
    while waiting:
        module = waiting.pop()
        if module is None or module.__name__ in found:
            continue
        if module is not start and not _is_users(module, home, libraries):
            continue
        found[module.__name__] = module.__file__
        for value in list(vars(module).values()):
            if isinstance(value, types.ModuleType):
                waiting.append(value)
                continue
            try:  # (a lazy proxy may fail to say where it comes from: not a user's module)
                name = getattr(value, "__module__", None)
            except Exception:  # noqa: BLE001
                continue
            if isinstance(name, str) and name not in found:
                waiting.append(sys.modules.get(name))
    own = (start.__name__, found.pop(start.__name__))
    return [own, *sorted(found.items())]


def _read(path: str) -> bytes:
    """A file's bytes (b"" when it cannot be read)."""
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except OSError:
        return b""


def _module_bytes(obj: Any) -> bytes:
    """The file of the module that defines `obj`, then each other file of `user_modules(obj)`
    after its name (b"" without a module file; a method whose module imports no other user
    module digests as it did before the other files were read)."""
    found = user_modules(obj)
    if not found:
        return b""
    return _read(found[0][1]) + b"".join(
        b"\0file\0" + name.encode() + b"\0" + _read(path) for name, path in found[1:])


def has_module_file(obj: Any) -> bool:
    """Whether `obj` comes from a module file (not a notebook's cells or `exec`)."""
    return bool(getattr(inspect.getmodule(obj), "__file__", None))


def _names_used(obj: Any) -> set:
    """The global names a function's code (its nested functions' too) or a class's methods
    read."""
    codes = [getattr(obj, "__code__", None)] if not inspect.isclass(obj) else [
        getattr(value, "__code__", None) for value in vars(obj).values()]
    names: set = set()
    waiting = [code for code in codes if code is not None]
    while waiting:
        code = waiting.pop()
        names.update(code.co_names)
        waiting.extend(const for const in code.co_consts if isinstance(const, types.CodeType))
    return names


SIMPLE = (bool, int, float, complex, str, bytes, type(None))


def _fileless_bytes(obj: Any) -> bytes:
    """For code defined without a module file (a notebook's cells): the sources of the
    functions and classes of its module that it reads, transitively, and the values of the
    numbers, strings and arrays it reads there, each after its name, so that a helper or a
    constant edited in another cell changes the digest; b"" for code from a file."""
    module = inspect.getmodule(obj)
    if module is None or has_module_file(obj):
        return b""
    parts, seen, waiting = [], {id(obj)}, [obj]
    while waiting:
        for name in sorted(_names_used(waiting.pop())):
            value = vars(module).get(name)
            if isinstance(value, SIMPLE) or (isinstance(value, tuple)
                                             and all(isinstance(v, SIMPLE) for v in value)):
                parts.append(f"{name}={value!r}".encode())
            elif isinstance(value, np.ndarray):
                parts.append(f"{name}={value.dtype.str}{value.shape}".encode() + value.tobytes())
            elif ((inspect.isfunction(value) or inspect.isclass(value))
                  and value.__module__ == module.__name__ and id(value) not in seen):
                seen.add(id(value))
                waiting.append(value)
                parts.append(name.encode() + b"\0" + _source_of(value))
    return b"\0used\0".join(sorted(parts))


def code_digest(obj: Any) -> str:
    """A digest of a user method's code: the function's (or class's) source and the files of
    the user's modules behind it (`user_modules`), or, without a module file (a notebook), the
    helpers and constants of its module that it reads (`_fileless_bytes`), so that editing the
    method, a helper beside it, or one in another module it imports changes it
    (docs/saliency.md, "Your own method": an edited method is recomputed)."""
    digest = hashlib.sha256(_source_of(obj))
    digest.update(b"\0module\0" + _module_bytes(obj))
    used = _fileless_bytes(obj)
    if used:  # (code from a file digests as it did before these were read)
        digest.update(b"\0fileless\0" + used)
    return digest.hexdigest()[:16]


# id(function or class) -> (it, the files its digest read, their states, the digest)
_ON_DISK: dict[int, tuple[Any, list, list, str]] = {}


def _files_read(obj: Any) -> list:
    """The files `code_digest(obj)` reads: those of `user_modules(obj)` and the file its
    source comes from (another one for a function wrapped by a decorator of another module)."""
    files = [path for _, path in user_modules(obj)]
    try:
        source = inspect.getsourcefile(inspect.unwrap(obj))
    except (OSError, TypeError, ValueError):
        source = None
    return files + [source] if source and source not in files else files


def digest_on_disk(obj: Any) -> str:
    """`code_digest(obj)` of code from module files, kept with the state of each file it read
    (`file_digests.state_of`: device, inode, size, modification and change times) and taken
    again only when one of them changed: checking a method for an edit at each call
    (`plugins.warn_if_edited`) then costs a `stat` a file, where a digest walks the user's
    modules and reads their files again, a visible share of a cheap model's call
    (docs/saliency.md, "Your own method"). As for data fingerprints (docs/architecture.md,
    "Outputs and provenance"), none is kept while one of its files is younger than
    `file_digests.RECENT_NS`."""
    kept = _ON_DISK.get(id(obj))
    if kept is not None and kept[0] is obj and \
            [file_digests.state_of(path) for path in kept[1]] == kept[2]:
        return kept[3]
    files = _files_read(obj)
    states = [file_digests.state_of(path) for path in files]
    digest = code_digest(obj)
    if all(map(file_digests.settled, files, states)):
        _ON_DISK[id(obj)] = (obj, files, states, digest)
    return digest
