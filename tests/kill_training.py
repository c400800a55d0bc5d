"""`python tests/kill_training.py POINT roar.train-flags...`: runs `roar.train` and kills its
own process with SIGKILL (nothing cleans up, as with `kill -9`) at POINT
(tests/roar/test_training_features.py):

* `batch:E:S`: after step S of epoch E (0-based), inside the epoch;
* `weights:E`: half-way through writing the backup weights after epoch E (1-based);
* `uncommitted:E`: the weights after epoch E in place, before the state that commits them;
* `committed:E`: after that commit, before older states are dropped;
* `export`: after training, inside the export of the model;
* `none`: no kill.
"""
import os
import runpy
import signal
import sys

import keras

from models.training import backup, loop


def die() -> None:
    sys.stdout.flush()
    os.kill(os.getpid(), signal.SIGKILL)


def install(point: str) -> None:
    kind, *numbers = point.split(":")
    at = [int(n) for n in numbers]
    if kind == "batch":
        def on_train_batch_end(self, batch, logs=None):
            if self.kill_epoch == at[0] and batch == at[1]:
                die()

        def on_epoch_begin(self, epoch, logs=None):
            self.kill_epoch = epoch

        backup.EpochBackup.on_train_batch_end = on_train_batch_end
        backup.EpochBackup.on_epoch_begin = on_epoch_begin
    elif kind == "weights":
        save = keras.Model.save_weights

        def save_weights(self, path, *args, **kwargs):
            save(self, path, *args, **kwargs)
            if os.path.basename(path) == backup.weights_name(at[0]):
                with open(path, "r+b") as handle:  # the write cut half-way
                    handle.truncate(os.path.getsize(path) // 2)
                die()

        keras.Model.save_weights = save_weights
    elif kind in ("uncommitted", "committed"):
        write = backup.write_json

        def write_json(path, *args, **kwargs):
            target = os.path.basename(path) == backup.state_name(at[0])
            if target and kind == "uncommitted":
                die()
            write(path, *args, **kwargs)
            if target:
                die()

        backup.write_json = write_json
    elif kind == "export":
        def dying_export(*args, **kwargs):
            die()

        loop.export = dying_export  # the name the training loop calls
    elif kind != "none":
        raise SystemExit(f"unknown kill point {point}")


if __name__ == "__main__":
    install(sys.argv.pop(1))
    sys.argv[0] = "roar.train"
    runpy.run_module("roar.train", run_name="__main__", alter_sys=True)
