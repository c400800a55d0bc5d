"""Intervals, paired comparisons and rankings: known answers and the coverage of the interval."""
import numpy as np
import pytest

from models.report import uncertainty


def test_a_constant_has_a_degenerate_interval_and_nan_units_are_counted():
    estimate = uncertainty.interval([0.25] * 40 + [np.nan, np.inf])
    assert (estimate.value, estimate.low, estimate.high) == (0.25, 0.25, 0.25)
    assert (estimate.n, estimate.n_excluded) == (40, 2)
    empty = uncertainty.interval([np.nan])
    assert np.isnan(empty.value) and empty.n == 0


def test_same_seed_same_interval_and_another_seed_another():
    values = np.random.default_rng(3).normal(size=60)
    first, again = uncertainty.interval(values, seed=5), uncertainty.interval(values, seed=5)
    assert first == again
    other = uncertainty.interval(values, seed=6)
    assert other.value == first.value and (other.low, other.high) != (first.low, first.high)
    assert first.low < first.value < first.high


def test_the_95_percent_interval_covers_a_known_mean_95_percent_of_the_time():
    rng = np.random.default_rng(0)
    draws, n = 1000, 200
    samples = rng.exponential(scale=1.0, size=(draws, n)) - 1.0  # skewed, true mean 0
    covered = [uncertainty.interval(sample, seed=i).excludes(0.0) is False
               for i, sample in enumerate(samples)]
    coverage = float(np.mean(covered))
    assert 0.93 <= coverage <= 0.97, coverage


def test_paired_comparison_sees_a_small_shift_that_unpaired_intervals_hide():
    rng = np.random.default_rng(1)
    base = rng.normal(size=80)  # a large spread shared by both methods, image by image
    a, b = base + 0.1 + rng.normal(scale=0.02, size=80), base
    assert uncertainty.interval(a).overlaps(uncertainty.interval(b))
    difference = uncertainty.paired_difference(a, b)
    assert difference.low > 0 and difference.value == pytest.approx(np.mean(a - b))
    assert uncertainty.beats(a, b, higher_is_better=True)
    assert not uncertainty.beats(a, b, higher_is_better=False)
    assert not uncertainty.beats(b, a, higher_is_better=True)
    with pytest.raises(ValueError, match="same units"):
        uncertainty.paired_difference(a, b[:-1])


def test_ranks_tie_what_no_comparison_separates():
    rng = np.random.default_rng(2)
    noise = rng.normal(size=(3, 100))
    per_method = {"good": 1.0 + 0.1 * noise[0], "also good": 1.0 + 0.1 * noise[1],
                  "bad": 0.1 * noise[2]}
    assert uncertainty.ranks(per_method, higher_is_better=True) == {
        "good": 1, "also good": 1, "bad": 3}
    assert uncertainty.ranks(per_method, higher_is_better=False) == {
        "good": 2, "also good": 2, "bad": 1}


def test_kendall_matrix_of_agreeing_and_opposed_metrics():
    scores = {"a": {"m1": 3.0, "m2": 2.0, "m3": 1.0},
              "b": {"m1": 30.0, "m2": 20.0, "m3": 10.0},
              "c": {"m1": 1.0, "m2": 2.0, "m3": 3.0},
              "flat": {"m1": 1.0, "m2": 1.0, "m3": 1.0}}
    names, matrix = uncertainty.kendall_matrix(scores)
    assert names == ["a", "b", "c", "flat"]
    np.testing.assert_allclose(matrix[:3, :3], [[1, 1, -1], [1, 1, -1], [-1, -1, 1]])
    assert np.isnan(matrix[3]).all()


def test_kendall_matrix_counts_each_pair_over_the_methods_both_scored():
    # "partial" has no value for m4: the pairs without it still count m4 (old code dropped m4
    # everywhere, and a column blank for every method blanked the whole matrix)
    scores = {"a": {"m1": 4.0, "m2": 3.0, "m3": 2.0, "m4": 1.0},
              "b": {"m1": 1.0, "m2": 2.0, "m3": 3.0, "m4": 0.0},
              "partial": {"m1": 1.0, "m2": 2.0, "m3": 3.0, "m4": np.nan},
              "blank": {"m1": np.nan, "m2": np.nan, "m3": np.nan, "m4": np.nan}}
    _, matrix = uncertainty.kendall_matrix(scores)
    assert matrix[0, 1] == pytest.approx(0.0)  # over m1..m4: 3 concordant, 3 discordant
    assert matrix[0, 2] == pytest.approx(-1.0)  # over m1..m3
    assert matrix[1, 2] == pytest.approx(1.0)
    assert np.isnan(matrix[3]).all() and np.isnan(matrix[:, 3]).all()
