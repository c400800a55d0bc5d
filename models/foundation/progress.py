"""Progress that tells the truth and suits where it goes (docs/architecture.md, "Progress"):
every phase longer than a few seconds shows elapsed time, rate and ETA on stderr: as a bar
(tqdm) when stderr is a terminal, and otherwise (a log file, a pipe, a test) as plain
timestamped lines, one when the phase starts, then at most one every `LINE_EVERY` seconds, and
one when it ends, with no carriage returns or colours. A phase with nothing to do shows nothing.

`models.training.training_bar.TrainingBar` follows a Keras fit step by step with the loss beside
it; `CountBar` is a
`progress(done, total)` callable for builders that report counts (the synthetic world, the delta
patch); `CostBar` follows work items of unequal cost, re-estimating each kind's cost and the cost
of a model pass from the time its finished items took, so the ETA does not swing when a cheap
phase gives way to a costly one, nor when one item needs a hundred times the passes of another.
"""
import sys
import threading
import time
from typing import Any, Callable, Optional

from tqdm import tqdm

LINE_EVERY = 30.0  # seconds between two progress lines in a log


def _clock_text(seconds: float) -> str:
    seconds = int(max(seconds, 0.0) + 0.5)
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


class LineProgress:
    """A bar's information as plain lines on `file`: `<date time> <desc>: <n>/<total> <unit>
    (<percent>%), <rate>, elapsed <h:mm:ss>, ETA <h:mm:ss>` when the phase starts, at most every
    `every` seconds as it goes, and once more when it ends. With `counts` off (a bar of
    estimated seconds, `CostBar`) the line gives the share done instead of counts, and the ETA
    is the estimated seconds left (not the rate extrapolated, which a long item under way
    would stretch: an ETA of 1:53:50 for a card 4 minutes from its end). Takes the
    calls the code makes of a tqdm bar (`update`, `refresh`, `set_postfix`, `write`, `close`,
    `n`, `total`)."""

    def __init__(self, total: Optional[float], desc: str, unit: str = "it",
                 every: float = LINE_EVERY, counts: bool = True, file: Any = None,
                 clock: Callable[[], float] = time.monotonic, initial: float = 0.0):
        self.total, self.desc, self.unit, self.every, self.counts = total, desc, unit, every, counts
        self.file = file or sys.stderr
        self.clock, self.n, self.postfix, self.disable = clock, float(initial), "", False
        self.initial = float(initial)  # done before this run (a resumed one): not in its rate
        self.started = clock()
        self.last: Optional[float] = None
        self.shown, self.closed = -1.0, False
        self._line()

    def _line(self) -> None:
        now = self.clock()
        self.last, self.shown = now, self.n
        elapsed = now - self.started
        total = self.total or 0
        share = self.n / total if total else None
        if self.counts:
            done = f"{self.n:g}/{total:g} {self.unit}" if total else f"{self.n:g} {self.unit}"
            if share is not None:
                done += f" ({100 * share:.0f}%)"
            if elapsed > 0 and self.n > self.initial:
                done += f", {(self.n - self.initial) / elapsed:.3g} {self.unit}/s"
        else:
            done = f"{100 * share:.0f}% of the estimated work" if share is not None else "started"
        # a bar of estimated seconds knows what is left; a count extrapolates its rate (over
        # this run's own work: a resumed run's earlier work took none of its elapsed time)
        ran = self.n - self.initial
        left = total - self.n if not self.counts else (
            elapsed * (total - self.n) / ran if ran > 0 else 0.0)
        eta = (f", ETA {_clock_text(left)}"
               if share and share < 1 and not self.closed and (ran > 0 or not self.counts)
               else "")
        stamp = time.strftime("%Y-%m-%d %H:%M:%S")
        extra = f" [{self.postfix}]" if self.postfix else ""
        print(f"{stamp} {self.desc}: {done}, elapsed {_clock_text(elapsed)}{eta}{extra}",
              file=self.file, flush=True)

    def refresh(self) -> None:
        if not self.closed and self.last is not None and self.clock() - self.last >= self.every:
            self._line()

    def update(self, n: float = 1) -> None:
        self.n += n
        self.refresh()

    def set_postfix(self, refresh: bool = True, **values: Any) -> None:
        self.postfix = ", ".join(f"{key}={value}" for key, value in values.items())

    def write(self, text: str) -> None:
        """A result line beside the progress: on stdout, as tqdm's `write` puts it."""
        print(text, flush=True)

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            if self.n != self.shown:  # (not the line just written again)
                self._line()

    def __enter__(self) -> "LineProgress":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def bar(total: Optional[float], desc: str, unit: str = "it", counts: bool = True,
        initial: float = 0, **options: Any) -> Any:
    """The project's progress for one phase, on stderr: a tqdm bar on a terminal (`options` go
    to tqdm), `LineProgress` lines otherwise, nothing for a phase of no work (`total` 0).
    `initial`: the work done before this run (a resumed one), counted as done but not in the
    rate or the ETA."""
    if total is not None and total <= 0:
        return tqdm(total=0, disable=True)
    if sys.stderr.isatty():
        return tqdm(total=total, desc=desc, unit=unit, file=sys.stderr, dynamic_ncols=True,
                    initial=initial, **options)
    return LineProgress(total, desc, unit, counts=counts, initial=initial)


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
    """Work items of several kinds (e.g. a card's benchmarks, whose items are its methods); the bar
    counts estimated seconds. An item costs its kind's own work (a prior in units of a cheap
    item, replaced by the kind's measured cost once one of its items finished) plus the model
    passes it needs: `passes[kind][i]` declared (e.g. the maps it computes first; None for an
    item that costs nothing, e.g. a cell its benchmark leaves out), and, where
    `evaluations[kind][i]` gives its method's evaluations per image, the passes its kind's
    finished items needed beyond their declaration, per evaluation (a measure that explains its
    images again). A kind not started yet costs its prior at the seconds per prior unit its
    group (`groups[kind]`, e.g. one benchmark on several image sets) measured, or all kinds
    where its group has measured nothing. The seconds per pass come from how the items of one
    kind differ as their passes differ, so one costly item (a noise-wrapped method's maps,
    hundreds of times a gradient's passes) inflates neither its kind's other items nor the
    kinds not started. Items run in the order of `passes`; a ticker redraws the bar every
    `tick` seconds, moving it through the item under way up to that item's estimate, so a long
    item never leaves the bar standing still."""

    # seconds per pass / seconds per prior unit, until items of one kind measure it: a gradient
    # pass cost 1/24 of a cheap cell's unit on the synthetic world's CNN and 1/27 on Lite0 at
    # 224 px (2026-11-29; docs/report_card.md, "Where the card's time goes")
    PASS_PRIOR = 0.04

    def __init__(self, passes: dict, priors: dict, desc: str, tick: float = 1.0,
                 clock: Callable[[], float] = time.monotonic,
                 evaluations: Optional[dict] = None, groups: Optional[dict] = None):
        # (an item of None passes costs nothing: a cell its benchmark leaves out)
        self.skipped = {kind: [p is None for p in items] for kind, items in passes.items()}
        self.passes = {kind: [float(p or 0) for p in items] for kind, items in passes.items()}
        self.evaluations = {kind: [float(e) for e in (evaluations or {}).get(kind, [0] * len(
            items))] for kind, items in passes.items()}
        self.priors = dict(priors)
        self.groups = {kind: (groups or {}).get(kind, kind) for kind in passes}
        # per kind: (seconds, passes counted) of each finished item
        self.done: dict[str, list[tuple]] = {kind: [] for kind in passes}
        self.progress = bar(1.0, desc, "s", counts=False,
                            bar_format="{l_bar}{bar}| [{elapsed}{postfix}]")
        self.clock, self.reported = clock, clock()
        self.lock, self.stopped = threading.Lock(), threading.Event()
        self._redraw()
        if not self.progress.disable and tick:
            threading.Thread(target=self._ticker, args=(tick,), daemon=True).start()

    def _ticker(self, tick: float) -> None:
        while not self.stopped.wait(tick):
            self._redraw()

    def _rates(self) -> tuple:
        """(seconds per pass, {kind: own seconds of one item}, {group: own seconds per prior
        unit, None: over every group}), from the finished items that were not left out."""
        counted = {kind: [item for item, skipped in zip(items, self.skipped[kind])
                          if not skipped] for kind, items in self.done.items()}
        # the pooled slope of seconds on passes within each kind (its own work held fixed)
        spread = moved = 0.0
        for items in counted.values():
            if len(items) > 1:
                mean_s = sum(s for s, _ in items) / len(items)
                mean_p = sum(p for _, p in items) / len(items)
                spread += sum((p - mean_p) ** 2 for _, p in items)
                moved += sum((p - mean_p) * (s - mean_s) for s, p in items)
        finished = [(kind, s, p) for kind, items in counted.items() for s, p in items]
        spent = sum(s for _, s, _ in finished)
        units = sum(self.priors[kind] + self.PASS_PRIOR * p for kind, _, p in finished)
        fallback = spent / units if spent > 0 and units > 0 else 1.0
        per_pass = max(moved / spread, 0.0) if spread > 0 else fallback * self.PASS_PRIOR
        own = {kind: sum(max(s - per_pass * p, 0.0) for s, p in items) / len(items)
               for kind, items in counted.items() if items}
        rates = {}
        for group in (None, *set(self.groups.values())):
            members = [(kind, s, p) for kind, s, p in finished
                       if group is None or self.groups[kind] == group]
            group_units = sum(self.priors[kind] for kind, _, _ in members)
            group_own = sum(max(s - per_pass * p, 0.0) for _, s, p in members)
            if group_units > 0 and group_own > 0:
                rates[group] = group_own / group_units
        rates.setdefault(None, fallback)
        return per_pass, own, rates

    def _unforeseen(self, kind: str) -> float:
        """The passes per method evaluation that the kind's finished items needed beyond their
        declared passes (0 until one with a model-based method finished)."""
        finished = [(p, declared, e) for (_, p), declared, e, skipped in zip(
            self.done[kind], self.passes[kind], self.evaluations[kind], self.skipped[kind])
            if not skipped]
        evaluations = sum(e for _, _, e in finished)
        beyond = sum(p - declared for p, declared, _ in finished)
        return max(beyond / evaluations, 0.0) if evaluations > 0 else 0.0

    def _estimate(self) -> tuple:
        """(estimated total seconds, seconds done so far, estimate of the item under way)."""
        per_pass, own, rates = self._rates()
        spent = sum(s for items in self.done.values() for s, _ in items)
        total, under_way = spent, None
        for kind, items in self.passes.items():
            per_unit = rates.get(self.groups[kind], rates[None])
            base, extra, done = own.get(kind, self.priors[kind] * per_unit), \
                self._unforeseen(kind), len(self.done[kind])
            left = [0.0 if skipped else base + per_pass * (p + extra * e)
                    for p, e, skipped in zip(items[done:], self.evaluations[kind][done:],
                                             self.skipped[kind][done:])]
            total += sum(left)
            if under_way is None and left:
                under_way = left[0]
        return max(total, spent, 1e-9), spent, under_way or 0.0

    def _redraw(self) -> None:
        with self.lock:
            total, spent, under_way = self._estimate()
            running = min(self.clock() - self.reported, 0.95 * under_way)
            self.progress.total = total
            self.progress.n = spent + max(running, 0.0)
            if isinstance(self.progress, tqdm):  # the estimate's seconds left, as the lines say
                self.progress.set_postfix_str(
                    f"ETA {_clock_text(total - self.progress.n)}", refresh=False)
            self.progress.refresh()

    def finished(self, kind: str, seconds: float, passes: Optional[float] = None,
                 reused: bool = False) -> None:
        """The next item of `kind` took `seconds` and (when counted) `passes` model passes
        (None: the passes it was expected to need). A `reused` item (a result read back, not
        computed) is done but measures nothing: it is left out of the rates, as a left-out
        item is, so a resumed card's first cells, read in no time, do not price every cell
        still to compute at nothing."""
        with self.lock:
            index = len(self.done[kind])
            if reused:
                self.skipped[kind][index] = True
            if passes is None:
                passes = self.passes[kind][index]
            self.done[kind].append((max(float(seconds), 0.0), max(float(passes), 0.0)))
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
