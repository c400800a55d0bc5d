"""Progress bars that tell the truth (docs/architecture.md, "Progress"): every phase longer than
a few seconds shows elapsed time, rate and ETA on stderr when it is a terminal (tqdm's
`disable=None`), and nothing in logs or tests.

`TrainingBar` follows a Keras fit step by step with the loss beside it; `CountBar` is a
`progress(done, total)` callable for builders that report counts (the synthetic world, the delta
patch); `CostBar` follows work items of unequal cost, re-estimating each kind's cost from the
time its finished items took, so the ETA does not swing when a cheap phase gives way to a
costly one.
"""
import sys
import threading
import time
from typing import Any, Callable, Optional

import keras
from tqdm import tqdm


def bar(total: Optional[float], desc: str, unit: str = "it", **options: Any) -> tqdm:
    """The project's bar: on stderr, off when stderr is not a terminal."""
    return tqdm(total=total, desc=desc, unit=unit, file=sys.stderr, disable=None,
                dynamic_ncols=True, **options)


class TrainingBar(keras.callbacks.Callback):
    """One tick per training step over all epochs, with the running loss."""

    def __init__(self, desc: str):
        super().__init__()
        self.desc, self.steps = desc, 0
        self.progress = tqdm(disable=True)  # a silent stand-in until training begins

    def on_train_begin(self, logs: Optional[dict] = None) -> None:
        self.steps = int(self.params.get("steps") or 0)
        epochs = int(self.params.get("epochs") or 1)
        self.progress = bar(self.steps * epochs or None, self.desc, "step")

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


class CountBar:
    """`progress(done, total)` for a builder: the bar opens on the first report."""

    def __init__(self, desc: str, unit: str = "it"):
        self.desc, self.unit = desc, unit
        self.progress: Optional[tqdm] = None

    def __call__(self, done: int, total: int) -> None:
        if self.progress is None:
            self.progress = bar(total, self.desc, self.unit)
        self.progress.update(done - self.progress.n)
        if done >= total:
            self.close()

    def close(self) -> None:
        if self.progress is not None:
            self.progress.close()


class CostBar:
    """Work items of several kinds (e.g. a card's benchmarks), each with a prior cost; the bar
    counts estimated seconds. A kind's remaining items are re-estimated from the measured time of
    its finished ones, and kinds not started yet from the measured seconds per unit of prior
    cost, so the ETA follows what the work really costs. Items run in the order of `counts`; a
    ticker redraws the bar every `tick` seconds, moving it through the item under way up to
    that item's estimate, so a long item never leaves the bar standing still."""

    def __init__(self, counts: dict, priors: dict, desc: str, tick: float = 1.0,
                 clock: Callable[[], float] = time.monotonic):
        self.counts, self.priors = dict(counts), dict(priors)
        self.done: dict[str, list[float]] = {kind: [] for kind in counts}
        self.progress = bar(1.0, desc, "s", bar_format="{l_bar}{bar}| [{elapsed}<{remaining}]")
        self.clock, self.reported = clock, clock()
        self.lock, self.stopped = threading.Lock(), threading.Event()
        self._redraw()
        if not self.progress.disable and tick:
            threading.Thread(target=self._ticker, args=(tick,), daemon=True).start()

    def _ticker(self, tick: float) -> None:
        while not self.stopped.wait(tick):
            self._redraw()

    def _estimate(self) -> tuple:
        """(estimated total seconds, seconds done so far, estimate of the item under way)."""
        spent = sum(sum(items) for items in self.done.values())
        prior_done = sum(self.priors[k] * len(items) for k, items in self.done.items())
        per_prior = spent / prior_done if prior_done and spent else 1.0
        total, under_way = 0.0, None
        for kind, count in self.counts.items():
            items = self.done[kind]
            each = (sum(items) / len(items)) if items and sum(items) > 0 else \
                self.priors[kind] * per_prior
            total += sum(items) + each * (count - len(items))
            if under_way is None and len(items) < count:
                under_way = each
        return max(total, spent, 1e-9), spent, under_way or 0.0

    def _redraw(self) -> None:
        with self.lock:
            total, spent, under_way = self._estimate()
            running = min(self.clock() - self.reported, 0.95 * under_way)
            self.progress.total = total
            self.progress.n = spent + max(running, 0.0)
            self.progress.refresh()

    def finished(self, kind: str, seconds: float) -> None:
        """One item of `kind` took `seconds`."""
        with self.lock:
            self.done[kind].append(max(float(seconds), 0.0))
            self.reported = self.clock()
        self._redraw()

    def close(self) -> None:
        self.stopped.set()
        with self.lock:
            self.progress.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
