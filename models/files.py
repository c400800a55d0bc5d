"""Writing outputs so that an interrupted job never leaves a file that looks finished."""
import contextlib
import json
import os
import shutil


def temporary_name(path):
    """The name an output is written under before it is complete: `<path>.tmp-<pid>`."""
    return f"{os.fspath(path)}.tmp-{os.getpid()}"


@contextlib.contextmanager
def atomic_output(path):
    """Yields a temporary path to write `path` to; renames it to `path` only if the block succeeds.

    Works for files and directories (an existing directory at `path` is replaced). On an error the
    temporary output is removed and the error propagates.
    """
    path = os.fspath(path)
    parent = os.path.dirname(os.path.abspath(path))
    os.makedirs(parent, exist_ok=True)
    temporary = temporary_name(path)
    _remove(temporary)
    try:
        yield temporary
    except BaseException:
        _remove(temporary)
        raise
    if os.path.isdir(temporary) and os.path.isdir(path):
        shutil.rmtree(path)
    os.replace(temporary, path)


def write_json(path, value, **dump_options):
    """Writes `value` as JSON to `path` through `atomic_output`; `dump_options` go to json.dump
    (indent, sort_keys)."""
    with atomic_output(path) as temporary:
        with open(temporary, "w", encoding="utf-8") as handle:
            json.dump(value, handle, **dump_options)


def _remove(path):
    if os.path.isdir(path):
        shutil.rmtree(path)
    elif os.path.exists(path):
        os.remove(path)
