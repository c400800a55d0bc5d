"""BAM on the report card: per-image values whose means are bam.metrics' numbers, and the
per-image RMCS correlation against the reference correlation of each image's curve."""
import numpy as np
import pytest

from bam import card, metrics, rmcs


def test_card_values_average_to_the_metrics_of_bam_metrics(trained_world):
    data_dir, model_dir, _ = trained_world
    expected = metrics.compute(metrics.Config(data_dir=data_dir, model_dir=model_dir,
                                              metrics=("MCS", "IDR"), methods=("GC",),
                                              num_imgs=40))
    values = card.benchmark(data_dir, model_dir, metrics=("MCS", "IDR"), num_imgs=40,
                            seed=0).score("bam:GC")
    for metric in ("MCS", "IDR"):
        value, used, _, _ = expected[metric]["GC"]
        assert len(values[metric]) == used
        assert np.mean(values[metric]) == pytest.approx(value, abs=1e-12)


def test_per_image_rmcs_is_each_images_correlation_over_its_usable_k():
    rng = np.random.default_rng(0)
    n = 40
    g = {k: rng.random(n) for k in range(1, 11)}
    predictions = {k: (rng.random(n) < 0.8).astype(int) for k in range(1, 11)}
    drops = rng.random(9)
    found = card.per_image_rmcs(g, predictions, drops)
    for j in range(n):  # the reference, image by image
        ks = [k for k in rmcs.KS if predictions[k][j] == 1 and predictions[10][j] == 1]
        expected = (rmcs.correlation([g[k][j] - g[10][j] for k in ks],
                                     [drops[k - 1] for k in ks]) if len(ks) >= 3 else np.nan)
        np.testing.assert_allclose(found[j], expected, atol=1e-12, equal_nan=True)
    assert np.isnan(found).any() and np.isfinite(found).sum() > n // 2
