"""scripts/profile_card.py: what the card's progress bar estimated was left, against what was."""
import os

from models.foundation.cli import script_module
from tests import REPO


def test_eta_rows_take_the_last_estimate_before_each_share_of_the_cells_time():
    profile = script_module(os.path.join(REPO, "scripts", "profile_card.py"))
    # (seconds since the bar opened, estimated seconds left) after each cell; the last at 100 s
    estimates = [(4.0, 300.0), (30.0, 80.0), (60.0, 50.0), (100.0, 0.0)]
    rows = {row["share"]: row for row in profile.eta_honesty(estimates)}
    assert (rows[0.1]["at"], rows[0.1]["estimated_left"], rows[0.1]["true_left"]) == (4.0, 300.0,
                                                                                     96.0)
    assert (rows[0.5]["at"], rows[0.5]["estimated_left"], rows[0.5]["true_left"]) == (30.0, 80.0,
                                                                                     70.0)
    assert rows[0.9]["at"] == 60.0 and rows[0.9]["true_left"] == 40.0
    assert profile.eta_honesty([]) == []


def test_the_solver_is_timed_as_a_set_up_and_iterations(monkeypatch):
    """`rates` times ROAD's solver twice (stopped before its first iteration, and 10 iterations
    on): "setup" is images set up a second, "solve" image iterations a second beyond the set-up
    (a solver faked to take 40 ms to set up and 8 ms an iteration)."""
    import time
    import types

    import keras
    import numpy as np
    import tensorflow as tf

    profile = script_module(os.path.join(REPO, "scripts", "profile_card.py"))

    def solve(pixels, removed, tol, max_iters):
        time.sleep(0.040 + 0.008 * int(max_iters))
        return (tf.zeros([1]),)

    monkeypatch.setattr(profile, "imputation", types.SimpleNamespace(solve=solve))
    model = keras.Sequential([keras.Input((8, 8, 3)), keras.layers.Flatten(),
                              keras.layers.Dense(2)])
    found = profile.rates(model, np.zeros((2, 8, 8, 3), np.float32), batch_size=4, repeats=1,
                          kinds=("solve",), timing_seconds=0.1)
    assert set(found) == {"setup", "solve"}
    assert 4 / 0.040 * 0.8 < found["setup"] < 4 / 0.040 * 1.02  # images a second
    assert 4 / 0.008 * 0.8 < found["solve"] < 4 / 0.008 * 1.25  # image iterations a second


def test_traces_counts_each_new_trace_and_the_outermost_seconds():
    """`Traces` counts a `tf.function`'s trace for each new input shape and none for a call
    that reuses one; a function traced inside another's trace counts as a trace of its own."""
    import tensorflow as tf

    profile = script_module(os.path.join(REPO, "scripts", "profile_card.py"))
    traces = profile.Traces().install()
    assert traces.installed  # (TensorFlow 2.21 has the function it wraps)
    try:
        inner = tf.function(lambda x: x * 2)
        outer = tf.function(lambda x: inner(x) + 1)
        before = traces.snapshot()
        outer(tf.constant([1.0]))
        outer(tf.constant([2.0]))  # the same shape: no trace
        found = traces.since(before)
        assert found["traces"] == 2 and found["tracing_s"] > 0
        outer(tf.constant([1.0, 2.0]))  # a new shape: both trace again
        assert traces.since(before)["traces"] == 4
    finally:
        traces.uninstall()
    outer(tf.constant([1.0, 2.0, 3.0]))  # TensorFlow's own function back: not counted
    assert traces.since(before)["traces"] == 4
