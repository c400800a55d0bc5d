"""Resilience, reactivity and MC of a metric (models.report.meta_evaluation) on known answers: a
metric built to be consistent scores 1, one whose scores are noise scores what chance gives, and a
hand-computed case."""
import numpy as np
import pytest
import scipy.stats

from models.report import meta_evaluation


def test_a_consistent_metric_scores_one():
    rng = np.random.default_rng(0)
    values = rng.uniform(size=(30, 4)) + np.arange(4)  # every image ranks the methods alike
    found = meta_evaluation.meta_consistency(values, {"same": values.copy()},
                                             {"down": values - 1.0}, True)
    assert {key: found["resilience"][key] for key in ("iac", "iec", "score")} == {
        "iac": 1.0, "iec": 1.0, "score": 1.0}
    # 30 pairs, all differences of one sign: p below 1e-5 (2 / 2**30 exactly)
    assert found["reactivity"]["iac"] == pytest.approx(1.0, abs=1e-5)
    assert found["reactivity"]["iec"] == 1.0 and found["mc"] == pytest.approx(1.0, abs=1e-5)
    # lower is better: the same scores raised by the disruption are the reactive direction
    lower = meta_evaluation.reactivity(values, values + 1.0, higher_is_better=False)
    assert lower["iec"] == 1.0
    assert meta_evaluation.reactivity(values, values + 1.0, True)["iec"] == 0.0


def test_a_metric_of_noise_scores_what_chance_gives():
    rng = np.random.default_rng(1)
    values, minor, disruptive = rng.uniform(size=(3, 3000, 3))
    found = meta_evaluation.meta_consistency(values, {"noise": minor}, {"noise": disruptive},
                                             True)
    # three methods: a random ranking puts the same method at a position 1 time in 3
    assert found["resilience"]["iec"] == pytest.approx(1 / 3, abs=0.02)
    assert found["reactivity"]["iec"] == pytest.approx(0.5, abs=0.02)
    assert found["mc"] < 0.6


def test_a_hand_computed_case():
    values = np.array([[1.0, 2.0], [3.0, 4.0]])
    minor = np.array([[2.0, 1.0], [3.0, 4.0]])  # image 0's ranking flips, image 1's stays
    disruptive = np.array([[0.0, 3.0], [3.0, 3.0]])  # beaten: 1 > 0 and 4 > 3 only
    found = meta_evaluation.meta_consistency(values, {"hand": minor}, {"hand": disruptive}, True)
    assert found["resilience"]["iec"] == 0.5 and found["reactivity"]["iec"] == 0.5
    expected = np.mean([scipy.stats.wilcoxon([1.0, 3.0], [2.0, 3.0], zero_method="zsplit").pvalue,
                        scipy.stats.wilcoxon([2.0, 4.0], [1.0, 4.0], zero_method="zsplit").pvalue])
    assert found["resilience"]["iac"] == pytest.approx(expected)
    # an image with a non-finite value in any table is left out
    ragged = np.vstack([values, [[np.nan, 1.0]]])
    again = meta_evaluation.meta_consistency(ragged, {"hand": np.vstack([minor, [[1.0, 1.0]]])},
                                             {"hand": np.vstack([disruptive, [[1.0, 1.0]]])}, True)
    assert again == found
    # two disruptive perturbations: reactivity's parts are their means (IEC 0.5 and 1.0 here)
    # two perturbations of each kind: each side's parts are their means (reactivity's IEC 0.5
    # and 1.0 here, resilience's 0.5 and 1.0)
    both = meta_evaluation.meta_consistency(values, {"hand": minor, "none": values.copy()},
                                            {"hand": disruptive, "lower": values - 5.0}, True)
    assert both["reactivity"]["iec"] == 0.75 and set(both["reactivity"]["tests"]) == {
        "hand", "lower"}
    assert both["reactivity"]["tests"]["hand"] == found["reactivity"]["tests"]["hand"]
    assert both["resilience"]["iec"] == 0.75
    assert both["resilience"]["iac"] == pytest.approx((expected + 1.0) / 2)
    assert both["resilience"]["tests"]["hand"] == found["resilience"]["tests"]["hand"]
    assert meta_evaluation.wilcoxon_p([1.0, 2.0], [1.0, 2.0]) == 1.0
