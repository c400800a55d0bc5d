"""A Keras callback that shows a training's progress the project's way
(`models.foundation.progress.bar`: a bar on a terminal, timestamped lines in a log), one tick per
step over all epochs with the running loss. Kept apart from `models.foundation.progress`, which
loads no Keras."""
from typing import Optional

import keras
from tqdm import tqdm

from models.foundation import progress


class TrainingBar(keras.callbacks.Callback):
    """One tick per training step over all epochs, with the running loss. The bar opens at the
    first epoch this run trains: a run resumed from a backup starts at the steps of the epochs
    before it, which count as done but not in the rate or the ETA (before: they counted in the
    rate, so a run resumed at epoch 60 of 90 showed an ETA of a third of the time left)."""

    def __init__(self, desc: str):
        super().__init__()
        self.desc, self.steps, self.epochs = desc, 0, 1
        self.progress = tqdm(disable=True)  # a silent stand-in until training begins

    def on_train_begin(self, logs: Optional[dict] = None) -> None:
        self.steps = int(self.params.get("steps") or 0)
        self.epochs = int(self.params.get("epochs") or 1)

    def on_epoch_begin(self, epoch: int, logs: Optional[dict] = None) -> None:
        if self.progress.disable:  # the first epoch of this run
            self.progress = progress.bar(self.steps * self.epochs or None, self.desc, "step",
                                         initial=epoch * self.steps)
        elif self.steps and self.progress.n != epoch * self.steps:  # an epoch cut short
            self.progress.update(epoch * self.steps - self.progress.n)

    def on_train_batch_end(self, batch: int, logs: Optional[dict] = None) -> None:
        if logs and "loss" in logs:
            self.progress.set_postfix(loss=f"{float(logs['loss']):.3f}", refresh=False)
        self.progress.update(1)

    def on_train_end(self, logs: Optional[dict] = None) -> None:
        self.progress.close()
