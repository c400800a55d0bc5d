"""ROAD's one computation (`roar.road_outcomes`): its rank cuts select ROAR's mask sets, and the
binary's values equal those of ROAR's masked input pipeline on the same records."""
import glob

import numpy as np
import pytest
import tensorflow as tf

import models
from roar import masked_data, masking, road, road_outcomes


@pytest.mark.parametrize("unit", ["element", "pixel"])
def test_rank_cuts_select_the_mask_sets_with_ties(unit):
    """MoRF(p) imputes ROAR's top-p set, LeRF(p) all but KAR's kept top p, ties and all: maps
    quantised to 4 levels, so most features tie."""
    maps = np.round(np.random.default_rng(3).uniform(0, 3, (3, 6, 5, 3))).astype(np.float32)
    mask = masked_data.MaskConfig(ranking=unit, squared=False, tie_break="index")
    ranks = road_outcomes.feature_ranks(maps, mask)
    chosen = road_outcomes.settings(road_outcomes.ORDERS, (0.0, 0.1, 0.33, 0.5, 0.9, 1.0))
    limits, keep_top = (value.numpy() for value in road_outcomes.cuts(chosen, ranks.shape[1]))
    for setting, limit, lerf in zip(chosen, limits, keep_top):
        removed = ranks >= limit if lerf else ranks < limit
        config = masking.MaskConfig(ratio=setting.removed, keep_information=setting.order == "lerf",
                                    ranking=unit, squared=False)
        expected = masking.feature_mask(maps, config).numpy().reshape(len(maps), -1)
        assert np.array_equal(removed, expected), setting
    assert sorted(ranks[0].tolist()) == list(range(ranks.shape[1]))


def test_the_binary_equals_roars_masked_pipeline(small_shards):
    """Per image, `roar.road.image_outcomes` (every order and fraction in one pass) gives the
    true-class probability of the clean model on the images ROAR's masked pipeline builds at
    each setting, with ROAD's noisy linear fill keyed by the example."""
    pattern, model_path = small_shards
    model = models.load(model_path)
    files = sorted(glob.glob(pattern))[:1]
    mask = masked_data.MaskConfig(ranking="pixel", squared=False, tie_break="jitter",
                                  fill="noisy_linear", seed=5)
    records = masked_data.Records(control="random", size=32)
    read = road.RoadRecords(files, records, mask, [0.7])
    # its batches are not autotuned (docs/records.md, "Reading records")
    assert masked_data.scored_batches(files, records, 5, batch_size=8).options() \
        .autotune.enabled is False
    found: dict = {}
    for keys, values in road.image_outcomes(model, read, batch_size=8):
        for setting, (hits, probabilities) in values.items():
            for key, hit, probability in zip(keys, hits, probabilities):
                found[setting + (key,)] = (hit, probability)
    assert len(found) == 2 * 13
    for setting in road_outcomes.settings(road_outcomes.ORDERS, read.ratios):
        config = masked_data.MaskConfig(
            ratio=setting.removed, keep_information=setting.order == "lerf",
            **{name: getattr(mask, name) for name in ("ranking", "squared", "tie_break",
                                                       "fill", "seed")})
        data = masked_data.masked_dataset(files, records, config, training=False,
                                          batch_size=16, with_keys=True,
                                          space=model.preprocessing)
        for keys, images, labels in data:
            probabilities = tf.nn.softmax(model(images)).numpy()
            for key, row, label in zip(keys.numpy(), probabilities, labels.numpy()):
                hit, probability = found[setting.order, setting.p, key.decode()]
                assert probability == pytest.approx(row[label], abs=1e-6)
                assert hit == (np.argmax(row) == label)


def test_outcomes_count_the_passes_and_the_solvers_work():
    """A profile's counts (`models.foundation.workload`): one forward pass per (image, setting)
    and, with ROAD's fill, a solver set-up per item and the solver's images x iterations: here
    one chunk of all 8 items, so 8 x the iterations of the same masked images imputed at once;
    none with the mean fill."""
    import keras

    from models.foundation import workload
    from saliency_gen.data import imputation

    rng = np.random.default_rng(4)
    pixels = rng.uniform(size=(4, 16, 16, 3)).astype(np.float32)
    maps = rng.normal(size=(4, 16, 16, 1)).astype(np.float32)
    model = keras.Sequential([keras.Input((16, 16, 3)), keras.layers.Flatten(),
                              keras.layers.Dense(3)])
    chosen = road_outcomes.settings(road_outcomes.ORDERS, (0.5,))
    for fill in ("noisy_linear", "mean"):
        mask = masked_data.MaskConfig(ranking="pixel", squared=False, fill=fill)
        before = workload.snapshot()
        road_outcomes.outcomes(model, pixels, [0, 1, 2, 0], np.arange(4), maps, mask, chosen,
                               batch_size=8)
        counted = workload.since(before)
        ranks = road_outcomes.feature_ranks(maps, mask)
        limits, keep_top = (value.numpy() for value in road_outcomes.cuts(chosen, 256))
        removed = np.concatenate([ranks >= cut if top else ranks < cut
                                  for cut, top in zip(limits, keep_top)]).reshape(8, 16, 16)
        _, info = imputation.noisy_linear_impute(np.concatenate([pixels, pixels]), removed,
                                                 return_info=True)
        expected = 8 * info["iterations"] if fill == "noisy_linear" else 0
        assert counted == {"forward": 8, "gradient": 0, "solve": expected,
                           "setup": 8 if fill == "noisy_linear" else 0}
        assert fill == "mean" or expected > 8


def test_the_measure_averages_each_order_over_its_fractions():
    """`road_outcomes.Road` (ROAD as a `Measure`): its metrics are those of the orders chosen,
    and `score` is each image's true-class probability averaged over the order's fractions."""
    import keras

    rng = np.random.default_rng(5)
    images = road_outcomes.RoadImages(rng.uniform(size=(3, 8, 8, 3)).astype(np.float32),
                                      [0, 1, 2], np.arange(3),
                                      rng.normal(size=(3, 8, 8, 1)).astype(np.float32))
    model = keras.Sequential([keras.Input((8, 8, 3)), keras.layers.Flatten(),
                              keras.layers.Dense(3)])
    mask = masked_data.MaskConfig(ranking="pixel", squared=False, fill="mean")
    morf = road_outcomes.Road(model, mask, road_outcomes.settings(("morf",), (0.2, 0.6)))
    assert [spec.name for spec in morf.metrics] == ["MoRF"]
    found = morf.outcomes(images)
    values = morf.score(images)
    assert list(values) == ["MoRF"]
    np.testing.assert_allclose(values["MoRF"], (found[morf.chosen[0]][0] +
                                                found[morf.chosen[1]][0]) / 2, rtol=1e-12)
    assert not np.allclose(found[morf.chosen[0]][0], found[morf.chosen[1]][0])
