"""Writing outputs so that an interrupted job never leaves a file that looks finished
(docs/architecture.md, "Outputs and provenance").

* `atomic_output` writes under a hidden temporary name unique across hosts and processes
  (`.<name>.tmp-<host>-<pid>-<token>`) and renames it when complete; no input glob such as
  `train-*` or `*.tfrecord` matches a hidden name, and `remove_leftovers` deletes the ones a
  killed run left behind.
* `exclusive` holds a lock file beside an output so a second writer gets one clear line instead
  of mixing its results with the first one's.
* `build_lock` holds a lock file beside a cache folder while its parts are checked and built,
  so a second process that needs the same cache waits for the first and reuses what it built
  instead of replacing folders the first is reading (docs/synthetic_world.md, "The cache").
* `file_sha256` digests files by streaming them (downloads, checkpoints, TF1 variables).
* `ensure_directory` and `read_json` turn an unusable output folder or a corrupt JSON file into
  one `UserError` line naming the path.
"""
import contextlib
import errno
import fcntl
import hashlib
import json
import math
import os
import secrets
import shutil
import socket
import threading
from typing import Any, Callable, Iterable, Iterator, Optional, Union

from models.foundation.errors import UserError

TEMPORARY_MARK = ".tmp-"


def file_sha256(*paths: str) -> str:
    """The SHA-256 hex digest of the files' bytes, read in order in blocks (checkpoints and
    archives of many GB never sit in memory)."""
    digest = hashlib.sha256()
    for path in paths:
        with open(path, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()


def project_cache_dir(name: str) -> str:
    """`$XDG_CACHE_HOME/attribution-benchmarks/<name>` (default under `~/.cache`): where the
    synthetic world and converted checkpoints are kept."""
    root = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(root, "attribution-benchmarks", name)


def temporary_name(path: Union[str, os.PathLike]) -> str:
    """A hidden sibling of `path`, unique across hosts and processes, to write it under."""
    folder, name = os.path.split(os.fspath(path))
    host = socket.gethostname().split(".")[0] or "host"
    return os.path.join(folder, f".{name}{TEMPORARY_MARK}{host}-{os.getpid()}-"
                                f"{secrets.token_hex(4)}")


def is_temporary(name: str) -> bool:
    """Is `name` (a file name) an unfinished output of `atomic_output`?"""
    name = os.path.basename(os.fspath(name))
    return name.startswith(".") and TEMPORARY_MARK in name


def remove_leftovers(folder: str, names: Optional[Iterable[str]] = None) -> int:
    """Deletes the unfinished outputs killed runs left in `folder` (only those of the outputs
    called `names`, if given); returns how many.

    Call it while holding the outputs' `exclusive` lock, so a live writer's file is not removed.
    """
    folder = os.fspath(folder)
    if not os.path.isdir(folder):
        return 0
    prefixes = None if names is None else tuple(f".{name}{TEMPORARY_MARK}" for name in names)
    leftovers = [name for name in os.listdir(folder) if is_temporary(name)
                 and (prefixes is None or name.startswith(prefixes))]
    for name in leftovers:
        _remove(os.path.join(folder, name))
    return len(leftovers)


@contextlib.contextmanager
def atomic_output(path: Union[str, os.PathLike]) -> Iterator[str]:
    """Yields a temporary path to write `path` to; renames it to `path` only if the block succeeds.

    Works for files and directories (an existing directory at `path` is replaced; a file
    never replaces a directory). On an error, also in the rename, the temporary output is
    removed and the error propagates.
    """
    path = os.fspath(path)
    ensure_directory(os.path.dirname(os.path.abspath(path)))
    temporary = temporary_name(path)
    try:
        yield temporary
        if os.path.isdir(path) and not os.path.isdir(temporary):
            raise UserError(f"cannot write {path}: it is a folder; give a file path")
        if os.path.isdir(temporary) and os.path.isdir(path):
            shutil.rmtree(path)
        os.replace(temporary, path)
    except BaseException:
        _remove(temporary)
        raise


def write_json(path: Union[str, os.PathLike], value: Any, **dump_options: Any) -> None:
    """Writes `value` as JSON to `path` through `atomic_output`; `dump_options` go to json.dump
    (indent, sort_keys). A NaN or infinite number is written as null: JSON has no NaN, and a
    bare `NaN` breaks strict readers."""
    with atomic_output(path) as temporary:
        with open(temporary, "w", encoding="utf-8") as handle:
            json.dump(finite_or_null(value), handle, allow_nan=False, **dump_options)


def finite_or_null(value: Any) -> Any:
    """`value` with every non-finite float (in dicts, lists and tuples) replaced by None."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: finite_or_null(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite_or_null(item) for item in value]
    return value


def read_json(path: Union[str, os.PathLike], what: str = "file",
              schema: Optional[dict] = None) -> Any:
    """The JSON value in `path`; a missing, empty or corrupt file is one `UserError` line, and so
    is valid JSON of another shape than `schema` (a JSON Schema, checked with `jsonschema`)."""
    path = os.fspath(path)
    try:
        with open(path, encoding="utf-8") as handle:
            value = json.load(handle)
    except FileNotFoundError:
        raise UserError(f"{what} {path} does not exist") from None
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as error:
        detail = error if not isinstance(error, RecursionError) else "nested too deeply"
        raise UserError(f"{what} {path} is empty or corrupt ({detail}); delete it or re-create "
                        "it by re-running the job that wrote it") from None
    if schema is not None:
        check_shape(value, schema, f"{what} {path}")
    return value


def check_shape(value: Any, schema: dict, what: str) -> None:
    """One `UserError` line naming `what` if `value` does not fit the JSON Schema `schema`."""
    import jsonschema  # only readers of checked files pay for it

    error = jsonschema.exceptions.best_match(
        jsonschema.Draft202012Validator(schema).iter_errors(value))
    if error is not None:
        where = error.json_path if error.json_path != "$" else "the top level"
        raise UserError(f"{what} does not have the expected shape: at {where}, "
                        f"{error.message[:120]}; delete it or re-create it by re-running the "
                        "job that wrote it")


def ensure_directory(path: Union[str, os.PathLike]) -> str:
    """Creates the folder `path` (and its parents) if needed; a path that is a file, or a folder
    that cannot be created or written, is one `UserError` line."""
    path = os.fspath(path)
    try:
        os.makedirs(path, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        raise UserError(f"output folder {path} is a file (or lies under one); choose another "
                        "output path") from None
    except OSError as error:
        raise UserError(f"cannot create output folder {path} ({error.strerror}); choose a "
                        "writable output path") from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise UserError(f"output folder {path} is not writable; choose a writable output path")
    return path


@contextlib.contextmanager
def exclusive(path: Union[str, os.PathLike], what: str = "output") -> Iterator[str]:
    """Holds an exclusive lock on `path` (a file or folder about to be written) for the block.

    The lock is the file `.<name>.lock` beside `path`, locked with flock, so it is released
    when the process dies however it ends. A second process asking for the same lock gets one
    `UserError` line instead of waiting or mixing its results with the first one's. The lock file
    is deleted when the block ends (a killed process leaves it, unlocked and harmless).
    """
    path = os.path.abspath(os.fspath(path))

    def refuse(holder: str) -> None:
        raise UserError(f"{what} {path} is being written by {holder}; wait for it to finish or "
                        "choose another output path")

    with _holding(path, ".lock", refuse):
        yield path


class _HeldBuilds(threading.local):
    """The paths whose build lock this thread holds (flock keeps out other threads too: each
    taker opens the file anew, and open files' flocks exclude one another)."""

    def __init__(self) -> None:
        self.paths: set = set()


_HELD_BUILDS = _HeldBuilds()


@contextlib.contextmanager
def build_lock(path: Union[str, os.PathLike], what: str,
               log: Callable[[str], Any] = print) -> Iterator[None]:
    """Holds the build lock of the cache folder `path` for the block (docs/synthetic_world.md,
    "The cache"): a second process asking for it waits, after one line saying for whom, then
    finds what the first one built. Nested blocks of one thread take it once. The lock is the
    file `.<name>.build.lock` beside `path` (not `exclusive`'s, which a builder may take inside
    the block: a training run's folder), released when the process dies however it ends and
    deleted when the block ends."""
    path = os.path.abspath(os.fspath(path))
    told = False

    def wait(holder: str) -> None:
        nonlocal told
        if not told:  # once, also where the holder changes while this one waits
            log(f"waiting for {holder}, which is building {what} in {path}")
            told = True

    held = _HELD_BUILDS.paths
    if path in held:
        yield
        return
    with _holding(path, ".build.lock", wait):
        held.add(path)
        try:
            yield
        finally:
            held.discard(path)


@contextlib.contextmanager
def _holding(path: str, suffix: str, when_held: Callable[[str], None]) -> Iterator[None]:
    """Holds the flock of `.<name><suffix>` beside `path` for the block, the file naming this
    process; where another process holds it, `when_held(its holder)` raises, or returns to wait
    for it. The file is deleted when the block ends."""
    folder, name = os.path.split(path)
    ensure_directory(folder)
    lock_path = os.path.join(folder, f".{name}{suffix}")
    try:
        handle = _take_lock(lock_path, when_held)
    except OSError as error:  # a folder where no file can be made (/proc, a full disk, ...)
        raise UserError(f"cannot make the lock file {lock_path} ({error.strerror or error}); "
                        "choose another output path") from None
    try:
        handle.seek(0)
        handle.truncate()
        handle.write(f"process {os.getpid()} on host {socket.gethostname()}")
        handle.flush()
        yield
    finally:
        # Unlinking before unlocking is safe: a process that opened the old file and then gets
        # its lock sees that the name no longer leads to that file and starts again.
        with contextlib.suppress(FileNotFoundError):
            os.remove(lock_path)
        handle.close()


def _take_lock(lock_path: str, when_held: Callable[[str], None]):
    """An open handle of `lock_path` holding its flock (`_holding`)."""
    while True:
        handle = open(lock_path, "a+", encoding="utf-8")
        try:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                held = False
            except OSError as error:
                if error.errno not in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                    raise
                held = True
            if held:  # (outside the except: an error of `when_held` is its own)
                handle.seek(0)
                when_held(handle.read().strip() or "another process")
                fcntl.flock(handle, fcntl.LOCK_EX)
        except BaseException:
            handle.close()
            raise
        try:
            same = os.stat(lock_path).st_ino == os.fstat(handle.fileno()).st_ino
        except FileNotFoundError:
            same = False
        if same:
            return handle
        handle.close()


def _remove(path):
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path, ignore_errors=True)
    elif os.path.lexists(path):
        os.remove(path)
