"""The SHA-256 of files' bytes, kept between runs (docs/architecture.md, "Outputs and
provenance": data fingerprints).

An output's origin fingerprints its data by the files' bytes, and a saliency shard's seal holds
its bytes' digest, so a file rewritten at the same size is other data. Reading every byte of a
large listing is a pass over the data, so each file's digest is kept, in this process and (for
files of `KEPT_FROM` bytes or more) in the project cache (`file_digests/<digest of the file's
real path>.json`), with what the file system says of the file: its device, inode, size, and
modification and change times in nanoseconds. Writing a file moves its change time, which no
user can set back, so a kept digest serves only the bytes it was taken of. The kept digests are
this project's own cache: a damaged or unwritable one is ignored and taken again.
"""
import contextlib
import hashlib
import json
import os
import stat
import time
from typing import Any, Optional, Sequence

from models.foundation import progress
from models.foundation.errors import UserError
from models.foundation.files import file_sha256, project_cache_dir, temporary_name

SHOWN_FROM = 1 << 30  # bytes to read before the reading shows progress
# Smaller files are read again in each process: reading one costs about what reading its kept
# digest does, and an image folder would leave a file in the cache for every image.
KEPT_FROM = 1 << 20
# A file written this recently is read again at every call, its digest not kept: a file system
# may stamp files with a coarse clock, so a rewrite within one tick of the digest would keep the
# state it had (git's "racily clean" files). Data are seldom rewritten within 2 s of being read.
RECENT_NS = 2 * 10 ** 9
_KEPT: dict[str, tuple[list, str]] = {}  # absolute path -> (state, digest), this process's


def state_of(path: str) -> Optional[list]:
    """[device, inode, size, modification ns, change ns] of the file `path`, or None when it is
    not a file."""
    try:
        found = os.stat(path)
    except OSError:
        return None
    if not stat.S_ISREG(found.st_mode):
        return None
    return [found.st_dev, found.st_ino, found.st_size, found.st_mtime_ns, found.st_ctime_ns]


def settled(path: str, state: Optional[list]) -> bool:
    """Whether what was read of the file at `path` may be kept under `state` (`state_of`, taken
    before the read): the file still has that state (it was not written meanwhile) and was
    written at least `RECENT_NS` before now."""
    return state is not None and state_of(path) == state and \
        time.time_ns() - max(state[3], state[4]) >= RECENT_NS


def kept_path(real_path: str) -> str:
    """Where the digest of the file at `real_path` is kept in the project cache."""
    name = hashlib.sha256(real_path.encode("utf-8", "surrogateescape")).hexdigest()[:32]
    return os.path.join(project_cache_dir("file_digests"), f"{name}.json")


def contents_sha256(paths: Sequence[str]) -> list:
    """The SHA-256 hex digest of each file's bytes, in order (None for a path that is not a
    file), taken once and then kept (see the module's note); reading more than `SHOWN_FROM`
    bytes shows progress. An unreadable file is one line naming it."""
    found: list = []  # (absolute path, kept digest or None)
    unread: dict[str, list] = {}  # absolute path -> state
    for path in paths:
        where, state = os.path.abspath(path), state_of(path)
        digest = None if state is None else _kept(where, state)
        if state is not None and digest is None:
            unread[where] = state
        found.append((where, digest))
    taken = _read_all(unread) if unread else {}
    return [taken.get(where) if digest is None else digest for where, digest in found]


def _kept(where: str, state: list) -> Optional[str]:
    """The digest kept for the file at the absolute path `where` in its `state` (this
    process's, else the project cache's), or None."""
    if where in _KEPT and _KEPT[where][0] == state:
        return _KEPT[where][1]
    if state[2] < KEPT_FROM:
        return None
    real = os.path.realpath(where)  # (resolving costs some 30 us a file: only where it pays)
    try:
        with open(kept_path(real), encoding="utf-8") as handle:
            value: Any = json.load(handle)
    except (OSError, ValueError, RecursionError):
        return None
    if not (isinstance(value, dict) and value.get("path") == real and value.get("state") == state
            and isinstance(value.get("sha256"), str)):
        return None
    _KEPT[where] = (state, value["sha256"])
    return value["sha256"]


def _read_all(unread: dict) -> dict:
    """{absolute path: digest} of the files `unread` ({absolute path: state}), kept unless a
    file was written while it was read or within `RECENT_NS` of it."""
    total = sum(state[2] for state in unread.values())
    shown = (progress.bar(total / 2 ** 20, "data files read for their digests", "MiB")
             if total >= SHOWN_FROM else None)
    taken = {}
    for where, state in unread.items():
        try:
            taken[where] = digest = file_sha256(where)
        except OSError as error:
            raise UserError(f"data file {where} cannot be read ({error.strerror or error})"
                            ) from None
        if settled(where, state):
            _KEPT[where] = (state, digest)
            if state[2] >= KEPT_FROM:
                _keep(os.path.realpath(where), state, digest)
        if shown is not None:
            shown.update(state[2] / 2 ** 20)
    if shown is not None:
        shown.close()
    return taken


def _keep(real: str, state: list, digest: str) -> None:
    """Writes the kept digest whole under a temporary name and renames it into place; a project
    cache that cannot be written is left as it is."""
    path = kept_path(real)
    temporary = temporary_name(path)
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(temporary, "w", encoding="utf-8") as handle:
            json.dump({"path": real, "state": state, "sha256": digest}, handle)
        os.replace(temporary, path)
    except OSError:
        with contextlib.suppress(OSError):
            os.remove(temporary)
