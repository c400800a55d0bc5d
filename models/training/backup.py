"""The epoch backup of every training (docs/architecture.md, "Outputs and provenance", exact
resume): written so that
no kill, full disk or damaged file costs more than the epoch in progress.

A backup folder holds committed states, one per finished epoch N:

* `epoch-000N.weights.h5`: the model's weights, optimizer state and random generators' state
  (Keras `save_weights`), written in a hidden temporary folder and moved into place;
* `epoch-000N.json`: {"epoch", "weights": {"file", "bytes", "sha256"}, "progress"}, written
  atomically after the weights: it is the commit. A state without it does not exist.

The two newest states are kept (the previous good one stays until the new one is committed).
On resume the newest state whose JSON reads and whose weights match their recorded size and
SHA-256 is loaded; a damaged one is moved to `damaged/` with one line, and the run continues
from the state before it (or from the start). Leftovers of a killed write are removed.
"""
import os
import re
import shutil
from typing import Callable, Optional

import keras

from models.foundation.errors import UserError
from models.foundation.files import (
    ensure_directory,
    file_sha256,
    read_json,
    remove_leftovers,
    temporary_name,
    write_json,
)

STATE = re.compile(r"^epoch-(\d{4,})\.json$")
KEPT = 2  # committed states kept: the newest and the one before it
DAMAGED = "damaged"
STATE_SCHEMA = {
    "type": "object", "required": ["epoch", "weights"],
    "properties": {
        "epoch": {"type": "integer", "minimum": 1},
        "weights": {"type": "object", "required": ["file", "bytes", "sha256"],
                    "properties": {"file": {"type": "string"}, "bytes": {"type": "integer"},
                                   "sha256": {"type": "string"}}},
        "progress": {"type": "object", "properties": {
            "train_seconds": {"type": "number"},
            "resumed_at_epochs": {"type": "array", "items": {"type": "integer"}}}}}}


def weights_name(epoch: int) -> str:
    return f"epoch-{epoch:04d}.weights.h5"


def state_name(epoch: int) -> str:
    return f"epoch-{epoch:04d}.json"


def _states(folder: str) -> list:
    """Epoch numbers of the committed states in `folder`, newest first."""
    if not os.path.isdir(folder):
        return []
    found = [int(match.group(1)) for match in map(STATE.match, os.listdir(folder)) if match]
    return sorted(found, reverse=True)


def _checked(folder: str, epoch: int) -> tuple[Optional[dict], Optional[str]]:
    """(the state of `epoch`, None) when it can be used, else (None, why not)."""
    try:
        state = read_json(os.path.join(folder, state_name(epoch)), "backup state",
                          STATE_SCHEMA)
    except UserError as error:
        return None, str(error).split(";")[0]
    weights = os.path.join(folder, state["weights"]["file"])
    if state["epoch"] != epoch or os.path.basename(weights) != weights_name(epoch):
        return None, f"{state_name(epoch)} describes another epoch"
    if not os.path.isfile(weights):
        return None, f"{weights_name(epoch)} is missing"
    size = os.path.getsize(weights)
    if size != state["weights"]["bytes"]:
        return None, (f"{weights_name(epoch)} is {size} bytes, not the "
                      f"{state['weights']['bytes']} written")
    if file_sha256(weights) != state["weights"]["sha256"]:
        return None, f"{weights_name(epoch)} differs from what was written"
    return dict(state, path=weights), None


def _set_aside(folder: str, epoch: int) -> None:
    aside = ensure_directory(os.path.join(folder, DAMAGED))
    for name in (state_name(epoch), weights_name(epoch)):
        if os.path.lexists(os.path.join(folder, name)):
            os.replace(os.path.join(folder, name), os.path.join(aside, name))


def latest(folder: Optional[str], log: Callable[[str], None] = print,
           writer: bool = True) -> Optional[dict]:
    """The newest usable state of the backup `folder` (None: start from the beginning). The
    `writer` of the folder first removes a killed write's leftovers and moves each damaged
    newer state to `<folder>/damaged/` with one line through `log`; a reader (a multi-worker
    run's other workers) skips them."""
    if folder is None:
        return None
    if writer:
        remove_leftovers(folder)
    for epoch in _states(folder):
        state, reason = _checked(folder, epoch)
        if state is not None:
            return state
        if not writer:
            continue
        _set_aside(folder, epoch)
        before = next(iter(_states(folder)), 0)
        log(f"training backup {folder}: the state after epoch {epoch} is damaged ({reason}); "
            f"set aside in {os.path.join(folder, DAMAGED)}, resuming from "
            + (f"epoch {before}" if before else "the start"))
    return None


def commit(folder: str, model: keras.Model, epoch: int, progress: dict) -> None:
    """Writes the state after `epoch` (weights first, then the JSON that commits them) and
    drops the states older than the `KEPT` newest."""
    ensure_directory(folder)
    final = os.path.join(folder, weights_name(epoch))
    incoming = temporary_name(final)  # a hidden folder: Keras wants a name ending .weights.h5
    os.makedirs(incoming)
    written = os.path.join(incoming, weights_name(epoch))
    model.save_weights(written, overwrite=True)
    with open(written, "rb") as handle:  # on the disk before the commit names it
        os.fsync(handle.fileno())
    os.replace(written, final)
    os.rmdir(incoming)
    write_json(os.path.join(folder, state_name(epoch)),
               {"epoch": epoch, "weights": {"file": weights_name(epoch),
                                            "bytes": os.path.getsize(final),
                                            "sha256": file_sha256(final)},
                "progress": progress}, indent=1, sort_keys=True)
    for old in _states(folder)[KEPT:]:
        for name in (state_name(old), weights_name(old)):
            if os.path.exists(os.path.join(folder, name)):
                os.remove(os.path.join(folder, name))


def restore(model: keras.Model, state: dict) -> None:
    """Loads a state's weights (and optimizer state) into `model` and makes `fit` continue
    after its epoch."""
    if model.optimizer is not None and not model.optimizer.built:
        model.optimizer.build(model.trainable_variables)
    model.load_weights(state["path"])
    model._initial_epoch = state["epoch"]


class EpochBackup(keras.callbacks.Callback):
    """Restores `state` (from `latest`) when training begins and commits a state after every
    epoch with `progress()` (time spent and resumptions); the folder is removed when training
    ends unless `keep`. With `scratch` (a multi-worker run's non-chief worker) it restores the
    chief's state and saves its weights only to `scratch`, at the same moments as the chief:
    saving takes part in the workers' collective operations."""

    def __init__(self, folder: str, state: Optional[dict], progress: Callable[[], dict],
                 keep: bool = False, scratch: Optional[str] = None):
        super().__init__()
        self.folder, self.state, self.progress = folder, state, progress
        self.keep, self.scratch = keep, scratch

    def on_train_begin(self, logs: Optional[dict] = None) -> None:
        if self.state is not None:
            restore(self.model, self.state)

    def on_epoch_end(self, epoch: int, logs: Optional[dict] = None) -> None:
        if self.scratch is not None:
            self.model.save_weights(os.path.join(ensure_directory(self.scratch),
                                                 "latest.weights.h5"), overwrite=True)
        else:
            commit(self.folder, self.model, epoch + 1, self.progress())

    def on_train_end(self, logs: Optional[dict] = None) -> None:
        if self.scratch is None and not self.keep:
            shutil.rmtree(self.folder, ignore_errors=True)
