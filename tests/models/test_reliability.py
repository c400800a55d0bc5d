"""Known answers of the metric-reliability statistics (models.report.reliability): Krippendorff's
published example, a hand-computed disagreement and split, and metrics built to be perfectly
consistent or unreliable."""
import numpy as np
import pytest

from models.foundation.metric_spec import MetricSpec
from models.report import reliability

NAN = np.nan
# Krippendorff (2011), "Computing Krippendorff's alpha-reliability": 4 observers, 12 units.
PUBLISHED = [[1, 2, 3, 3, 2, 1, 4, 1, 2, NAN, NAN, NAN],
             [1, 2, 3, 3, 2, 2, 4, 1, 2, 5, NAN, 3],
             [NAN, 3, 3, 3, 2, 3, 4, 2, 2, 5, 1, NAN],
             [1, 2, 3, 3, 2, 4, 4, 1, 2, 5, 1, NAN]]


def test_ordinal_alpha_of_the_published_example_and_a_hand_case():
    assert reliability.ordinal_alpha(PUBLISHED) == pytest.approx(0.815, abs=5e-4)
    # two images ranking two methods in opposite orders: 1 - (n - 1) * 4 / (2 * 2 * 2) = -0.5
    assert reliability.ordinal_alpha([[1, 2], [2, 1]]) == pytest.approx(-0.5)


def test_ranks_follow_the_direction_and_share_ties():
    values = [[0.9, 0.1, 0.5], [0.2, 0.2, 0.7], [NAN, 0.1, 0.2]]
    assert reliability.unit_ranks(values, True)[:2].tolist() == [[1, 3, 2], [2.5, 2.5, 1]]
    assert reliability.unit_ranks(values, False)[0].tolist() == [3, 1, 2]
    assert np.isnan(reliability.unit_ranks(values, True)[2]).all()


def test_a_consistent_metric_scores_one_and_an_unreliable_one_about_zero():
    rng = np.random.default_rng(0)
    consistent = np.arange(6)[None, :] + rng.uniform(0, 0.5, (200, 1))  # every image: same order
    assert reliability.alpha(consistent, True) == 1.0
    assert reliability.split_half(consistent) == 1.0
    noise = rng.uniform(size=(1000, 8))  # no image agrees with another beyond chance
    assert abs(reliability.alpha(noise, True)) < 0.02
    assert reliability.split_half(noise) < 0.5
    estimate = reliability.metric_reliability(consistent, True, separated_pairs=15)
    assert estimate["alpha"].low == estimate["alpha"].high == 1.0
    assert estimate["separated"] == 1.0


def test_split_half_of_a_hand_case():
    # Each half is one image: ranks (1, 2, 3) against (1, 3, 2) give Spearman 1 - 6 * 2 / 24 =
    # 0.5 whichever image comes first; Spearman-Brown: 2 * 0.5 / 1.5 = 2 / 3.
    assert reliability.split_half([[1, 2, 3], [1, 3, 2]]) == pytest.approx(2 / 3)
    assert np.isnan(reliability.split_half([[1, 2, 3]]))  # one image cannot be split


def test_intervals_are_seeded_and_hold_the_estimate():
    rng = np.random.default_rng(1)
    values = np.arange(5)[None, :] * 0.1 + rng.normal(0, 0.2, (60, 5))
    first = reliability.metric_reliability(values, False, separated_pairs=3, seed=4)
    again = reliability.metric_reliability(values, False, separated_pairs=3, seed=4)
    assert first == again and first["separated"] == 0.3
    for name in ("alpha", "split_half"):
        estimate = first[name]
        assert estimate.low <= estimate.value <= estimate.high and estimate.low < estimate.high
    assert 0.2 < first["alpha"].value < 0.9  # a real but imperfect agreement


def test_the_card_flags_a_metric_that_rewards_blur_and_judges_only_real_methods():
    from models.report import card_engine

    rng = np.random.default_rng(2)
    methods = ["a", "b", "c"]
    names = methods + [card_engine.blurred(m) for m in methods]
    benchmark = card_engine.Benchmark(name="Toy", settings={}, score=None, metrics=(
        MetricSpec("smooth", True), MetricSpec("sharp", True),
        MetricSpec("lower", False)))
    cells = {}
    for index, name in enumerate(names):
        base = methods.index(card_engine.unblurred(name) or name)
        blur = card_engine.unblurred(name) is not None
        cells[("Toy", name)] = {
            "smooth": list(base + 0.5 * blur + rng.normal(0, 0.1, 40)),  # blur scores higher
            "sharp": list(base - 0.5 * blur + rng.normal(0, 0.1, 40)),  # blur scores lower
            "lower": list(base - 0.5 * blur + rng.normal(0, 0.1, 40))}  # lower is better
    summary = card_engine.summarise([benchmark], names, cells)
    verdicts = {name: found["rewards_blur"] for name, found in summary.trust.items()}
    assert verdicts == {"Toy smooth": True, "Toy sharp": False, "Toy lower": True}
    # reliability is over a, b and c only: 3 pairs, all separated by 1 with noise 0.1
    assert summary.trust["Toy smooth"]["separated"] == 1.0
    assert card_engine.rewards_blur({"a": 1.0, "b": 2.0}) is None  # no blur control
    # the same verdicts from the blurred maps' own table on the same images (the card's default,
    # without blur rows); a NaN image is left out of its method's mean
    for metric, expected in (("smooth", True), ("sharp", False), ("lower", True)):
        plain, smoothed = (np.array([cells[("Toy", name)][metric] for name in group]).T
                           for group in (methods, names[3:]))
        plain[0, 0] = np.nan
        higher = metric != "lower"
        assert card_engine.rewards_blur_on_units(methods, plain, smoothed, higher) is expected
        assert card_engine.rewards_blur_on_units(methods, plain, plain, higher) is False  # ties
    assert card_engine.unblurred("blur(bam:GC)") == "bam:GC"
    assert card_engine.unblurred("bam:GC") is None


def test_the_blur_control_is_a_gaussian_of_a_32nd_of_the_side():
    from saliency_gen.attribution import transforms

    delta = np.zeros((1, 64, 64, 2), np.float32)
    delta[0, 32, 32, 0] = 1.0
    blurred = transforms.blur(delta)
    assert blurred[0, 32, 32, 0] == pytest.approx(1 / (2 * np.pi * 2.0 ** 2), rel=0.02)  # sigma 2
    assert blurred[..., 0].sum() == pytest.approx(1.0, abs=1e-5)  # mass kept
    assert np.all(blurred[..., 1] == 0)  # channels stay apart


def test_ranking_agreement_of_a_variant_with_its_default():
    from models.report import card_engine

    same, reversed_ = {"a": 1.0, "b": 2.0, "c": 3.0}, {"a": 3.0, "b": 2.0, "c": 1.0}
    assert card_engine.ranking_agreement(same, {"a": 10.0, "b": 20.0, "c": 30.0, "d": 0.0}) == 1.0
    assert card_engine.ranking_agreement(same, reversed_) == -1.0
    assert np.isnan(card_engine.ranking_agreement(same, {"a": 1.0}))  # one shared method
    benchmark = card_engine.Benchmark(name="T", settings={}, score=None,
                                 metrics=(MetricSpec("low", False),))
    summary = card_engine.summarise([benchmark], ["a", "b"], {
        ("T", "a"): {"low": [1.0, 1.0]}, ("T", "b"): {"low": [2.0, 2.0]}})
    assert card_engine.oriented_means(summary, "T low") == {"a": -1.0, "b": -2.0}  # lower is better
