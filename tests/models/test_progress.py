"""Progress bars: a training bar counts every step of every epoch with the loss; the cost bar
re-estimates the remaining work from what finished items really took."""
import io
import re
import time

import keras
import numpy as np
from tqdm import tqdm

from models.foundation import progress
from models.training.training_bar import TrainingBar


def _visible(monkeypatch):
    shown = io.StringIO()
    monkeypatch.setattr(progress, "bar", lambda total, desc, unit="it", counts=True, **options:
                        tqdm(total=total, desc=desc, unit=unit, file=shown, disable=False,
                             mininterval=0, **options))
    return shown


def test_training_bar_counts_steps_over_epochs_with_the_loss(monkeypatch):
    shown = _visible(monkeypatch)
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    model.compile("sgd", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    tracker = TrainingBar("training")
    model.fit(np.zeros((10, 3)), np.zeros(10, int), batch_size=4, epochs=3, verbose=0,
              callbacks=[tracker])
    assert tracker.progress.total == 9 and tracker.progress.n == 9  # 3 steps x 3 epochs
    assert "training" in shown.getvalue() and "loss=" in shown.getvalue()


def test_a_resumed_run_counts_its_earlier_work_as_done_but_not_in_its_rate(monkeypatch):
    """A training resumed after epoch 2 of 3 (3 steps an epoch), one step a second: its bar
    starts at 6/9, and its rate and ETA are those of its own steps (before: 6 steps in the
    first second, so 3 steps/s at the end and an ETA of 0:00:00 with 2 s left)."""
    shown, now = io.StringIO(), [0.0]
    monkeypatch.setattr(progress, "bar", lambda total, desc, unit, initial=0: (
        progress.LineProgress(total, desc, unit, file=shown, clock=lambda: now[0], every=0,
                              initial=initial)))
    tracker = TrainingBar("training")
    tracker.set_params({"steps": 3, "epochs": 3})
    tracker.on_train_begin()
    tracker.on_epoch_begin(2)
    for step in range(3):
        now[0] += 1.0
        tracker.on_train_batch_end(step, {"loss": 0.5})
    tracker.on_train_end()
    written = [line.split(" ", 2)[2] for line in shown.getvalue().splitlines()]
    assert written == ["training: 6/9 step (67%), elapsed 0:00:00",
                       "training: 7/9 step (78%), 1 step/s, elapsed 0:00:01, ETA 0:00:02 "
                       "[loss=0.500]",
                       "training: 8/9 step (89%), 1 step/s, elapsed 0:00:02, ETA 0:00:01 "
                       "[loss=0.500]",
                       "training: 9/9 step (100%), 1 step/s, elapsed 0:00:03 [loss=0.500]"]


def test_cost_bar_replaces_priors_with_measured_costs(monkeypatch):
    _visible(monkeypatch)
    with progress.CostBar({"cheap": [0, 0], "costly": [0, 0]}, {"cheap": 1.0, "costly": 10.0},
                          "card", tick=0, clock=lambda: 0.0) as tracker:
        assert tracker.progress.total == 22.0  # priors only: 2 x 1 + 2 x 10
        tracker.finished("cheap", 2.0)  # a prior unit costs 2 s: costly cells 20 s each
        assert tracker.progress.total == 2 + 2 + 2 * 20 and tracker.progress.n == 2
        tracker.finished("costly", 5.0)  # measured: the other costly cell 5 s too
        assert tracker.progress.total == 2 + 2 + 5 + 5 and tracker.progress.n == 7
        tracker.finished("cheap", 0.0)  # a reused cell
        tracker.finished("costly", 5.0)
        assert tracker.progress.total == tracker.progress.n == 12


def test_cost_bar_separates_a_kinds_own_work_from_the_passes_its_items_need(monkeypatch):
    """A card's first benchmark computes the maps: its items' seconds are 0.5 s of its own work
    plus 0.6 ms per gradient pass, and one noise-wrapped method needs 625x a plain gradient's
    passes. Before: the kind's mean (and every unstarted kind's seconds per prior unit) took in
    the costly item, and the card's ETA read 30 min for a card 4 minutes from its end."""
    _visible(monkeypatch)
    maps = [250, 6250, 156250, 250, 250, 0]
    seconds = [0.5 + 0.0006 * p for p in maps]
    with progress.CostBar({"maps": maps, "scoring": [0] * 6}, {"maps": 1.0, "scoring": 2.0},
                          "card", tick=0, clock=lambda: 0.0) as tracker:
        def left():
            return tracker.progress.total - tracker.progress.n

        truth = sum(seconds) + 6 * 1.0  # a scoring item: 2 prior units at 0.5 s each
        for done in range(3):
            tracker.finished("maps", seconds[done])
            truth -= seconds[done]
            if done:  # (one item cannot tell its own work from its passes)
                assert abs(left() - truth) < 0.02 * truth, (done, left(), truth)
        assert abs(left() - (3 * 0.5 + 0.0006 * 500 + 6.0)) < 0.1  # not 3 x 33 s + 6 x 66 s


def test_cost_bar_learns_the_passes_a_kind_needs_beyond_its_declaration(monkeypatch):
    """A measure that explains 640 noisy copies per method evaluation, declared as needing no
    passes: after its first item, the others are estimated at 640 passes per evaluation."""
    _visible(monkeypatch)
    with progress.CostBar({"maps": [100, 100], "robust": [0, 0, 0]},
                          {"maps": 1.0, "robust": 1.0}, "card", tick=0, clock=lambda: 0.0,
                          evaluations={"maps": [1, 3], "robust": [1, 25, 625]}) as tracker:
        tracker.finished("maps", 1.0 + 0.001 * 100, passes=100)
        tracker.finished("maps", 1.0 + 0.001 * 300, passes=300)  # 1 ms a pass, 1 s its own
        tracker.finished("robust", 1.0 + 0.001 * 640, passes=640)
        left = tracker.progress.total - tracker.progress.n
        assert abs(left - (2 * 1.0 + 0.001 * 640 * 650)) < 1e-6  # (before: 2 x 1.64 s)


def test_a_cell_left_out_costs_nothing_and_leaves_its_kinds_estimate_alone(monkeypatch):
    """A meta-evaluation benchmark leaves out 5 of a card's 13 methods (the controls): before,
    the bar estimated them as costly as the others."""
    _visible(monkeypatch)
    with progress.CostBar({"k": [0, None, 0]}, {"k": 1.0}, "card", tick=0,
                          clock=lambda: 0.0) as tracker:
        assert tracker.progress.total == 2.0
        tracker.finished("k", 2.0)
        tracker.finished("k", 0.0)  # the cell left out
        assert tracker.progress.total == 4.0 and tracker.progress.n == 2.0


def test_cells_read_back_measure_nothing(monkeypatch):
    """A resumed card reads its first cells back in no time: before, they priced every cell
    still to compute at nothing (the real card's log read `ETA 0:00:00` at 53% with 15
    minutes of cells to go)."""
    _visible(monkeypatch)
    with progress.CostBar({"k": [0, 0, 0, 0], "other": [0]}, {"k": 1.0, "other": 2.0}, "card",
                          tick=0, clock=lambda: 0.0) as tracker:
        tracker.finished("k", 0.001, reused=True)
        tracker.finished("k", 0.001, reused=True)
        # nothing measured yet: the priors stand, at one second a unit (not 0.001 s)
        assert tracker.progress.total - tracker.progress.n == 2 * 1.0 + 2.0
        tracker.finished("k", 3.0)
        assert tracker.progress.total - tracker.progress.n == 3.0 + 2 * 3.0  # not 1.0 + ...


def test_a_kind_not_started_costs_what_its_group_measured_per_prior_unit(monkeypatch):
    """Deletion on 16 perturbed images (prior 16) costs what Deletion on the card's 64 measured
    per prior unit (64 units in 64 s), not the mean over every benchmark (ROAD's 10 s a unit)."""
    _visible(monkeypatch)
    with progress.CostBar({"ROAD": [0], "Deletion": [0], "Deletion [noise]": [0, 0]},
                          {"ROAD": 1.0, "Deletion": 64.0, "Deletion [noise]": 16.0}, "card",
                          tick=0, clock=lambda: 0.0, groups={"Deletion [noise]": "Deletion"}
                          ) as tracker:
        tracker.finished("ROAD", 10.0)
        tracker.finished("Deletion", 64.0)
        assert tracker.progress.total - tracker.progress.n == 2 * 16.0  # (all: 2 x 18.2 s)


def test_cost_bar_moves_through_a_long_item_up_to_its_estimate(monkeypatch):
    _visible(monkeypatch)
    now = [0.0]
    with progress.CostBar({"cheap": [0], "costly": [0, 0]}, {"cheap": 1.0, "costly": 10.0}, "card",
                          tick=0, clock=lambda: now[0]) as tracker:
        tracker.finished("cheap", 2.0)  # the costly items are estimated at 20 s each
        now[0] = 8.0  # 8 s into the first costly item, nothing reported yet
        tracker._redraw()
        assert tracker.progress.n == 2 + 8 and tracker.progress.total == 42
        now[0] = 60.0  # far past its estimate: the bar waits just short of it
        tracker._redraw()
        assert tracker.progress.n == 2 + 0.95 * 20
        tracker.finished("costly", 58.0)  # measured: the last one is estimated at 58 s
        assert tracker.progress.n == 60 and tracker.progress.total == 2 + 58 + 58
        assert tracker.progress.postfix == "ETA 0:00:58"  # the estimate's seconds left


def test_a_cost_line_gives_the_estimated_seconds_left_not_the_rate_extrapolated():
    """In a log, a bar of estimated seconds: 60 s done of 100 s estimated after 200 s of wall
    time (an item ran long) is 40 s from its end (before: 200 x 40 / 60 = 2:13)."""
    shown, now = io.StringIO(), [0.0]
    with progress.LineProgress(100.0, "card", "s", counts=False, file=shown,
                               clock=lambda: now[0]) as lines:
        now[0] = 200.0
        lines.update(60.0)
    assert shown.getvalue().splitlines()[1].endswith(
        "card: 60% of the estimated work, elapsed 0:03:20, ETA 0:00:40")


def test_cost_bar_ticks_by_itself(monkeypatch):
    shown = _visible(monkeypatch)
    with progress.CostBar({"slow": [0]}, {"slow": 1.0}, "card", tick=0.05) as tracker:
        before = shown.getvalue().count("card")
        time.sleep(0.3)
        assert shown.getvalue().count("card") > before + 2  # redrawn with no report
        assert 0 < tracker.progress.n < 1


def test_count_bar_opens_on_the_first_report_and_closes_at_the_end(monkeypatch):
    shown = _visible(monkeypatch)
    counted = progress.CountBar("world", "image")
    for done in range(5):
        counted(done, 4)
    assert counted.progress.n == 4 and "world" in shown.getvalue()


def test_away_from_a_terminal_progress_is_timestamped_lines_at_most_every_30_s():
    """In a log: a line when the phase starts, at most one per `LINE_EVERY` seconds with counts,
    rate and ETA, one when it ends; no carriage return, no colour (before: tqdm's bar, redrawn
    with carriage returns into the file, or nothing at all for a minute)."""
    shown, now = io.StringIO(), [0.0]
    with progress.LineProgress(600, "saliency", "map", file=shown,
                               clock=lambda: now[0]) as lines:
        for _ in range(60):  # 10 maps a second for a minute
            now[0] += 1.0
            lines.update(10)
    text = shown.getvalue()
    assert "\r" not in text and "\x1b" not in text
    written = text.splitlines()
    assert len(written) == 3  # started, after 30 s, after 60 s (the end: not written twice)
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d saliency: 0/600 map \(0%\), "
                        r"elapsed 0:00:00", written[0])
    assert written[1].endswith("saliency: 300/600 map (50%), 10 map/s, elapsed 0:00:30, "
                               "ETA 0:00:30")
    assert written[2].endswith("600/600 map (100%), 10 map/s, elapsed 0:01:00")
    assert progress.bar(0, "saliency", "map").disable  # no work: no bar at all
