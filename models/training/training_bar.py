"""A Keras callback that shows a training's progress the project's way
(`models.foundation.progress.bar`: a bar on a terminal, timestamped lines in a log), one tick per
step over all epochs with the running loss. Kept apart from `models.foundation.progress`, which
loads no Keras."""
from typing import Optional

import keras
from tqdm import tqdm

from models.foundation import progress


class TrainingBar(keras.callbacks.Callback):
    """One tick per training step over all epochs, with the running loss."""

    def __init__(self, desc: str):
        super().__init__()
        self.desc, self.steps = desc, 0
        self.progress = tqdm(disable=True)  # a silent stand-in until training begins

    def on_train_begin(self, logs: Optional[dict] = None) -> None:
        self.steps = int(self.params.get("steps") or 0)
        epochs = int(self.params.get("epochs") or 1)
        self.progress = progress.bar(self.steps * epochs or None, self.desc, "step")

    def on_epoch_begin(self, epoch: int, logs: Optional[dict] = None) -> None:
        if self.steps and self.progress.n != epoch * self.steps:  # resumed from a backup
            self.progress.n = epoch * self.steps
            self.progress.refresh()

    def on_train_batch_end(self, batch: int, logs: Optional[dict] = None) -> None:
        if logs and "loss" in logs:
            self.progress.set_postfix(loss=f"{float(logs['loss']):.3f}", refresh=False)
        self.progress.update(1)

    def on_train_end(self, logs: Optional[dict] = None) -> None:
        self.progress.close()
