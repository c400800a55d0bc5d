"""Values pinned before methods became units and the engine and scorer moved onto the one chunked
executor and model adapter: the refactored code must give the same numbers (they were
bit-identical on the machine that recorded them; the tolerance only absorbs other CPUs' float
rounding)."""
import keras
import numpy as np
import pytest

import faithfulness
import models
import saliency_gen


@pytest.fixture(scope="module")
def setup():
    keras.utils.set_random_seed(1)
    model = models.build("small_cnn", 4, (16, 16, 3), width=4)
    images = np.random.default_rng(2).normal(0, 40, (5, 16, 16, 3)).astype(np.float32)
    return model, images


# (method, parameters, sum of |map| over all 5 images, element 1000 of the flat maps)
PINNED = [
    ("gradient", {}, 2.2586832653505553, -0.0004207875463180244),
    ("integrated_gradients", {"steps": 5}, 58.106908225617715, 0.005119646433740854),
    ("grad_cam", {}, 655.273246671888, 0.11672484874725342),
    ("sg_grad_cam_pp", {"nsamples": 3}, 8584.042228639126, 2.0076541900634766),
    ("rise", {"n_masks": 50}, 1395.4898933954537, 0.2666463553905487),
    ("occlusion", {"size": 5, "stride": 3}, 874.4320746660233, 0.13055419921875),
    ("random", {}, 1906.3822001218796, 0.27693164348602295),
    ("smoothgrad_sq(gradient)", {"nsamples": 3}, 0.0022846570952508305, 2.0434644909528288e-07),
    ("vargrad(integrated_gradients)", {"steps": 5, "nsamples": 3}, 2.874256139994542,
     0.00022417870059143752),
    ("roar:IG_SG_2", {"steps": 4, "nsamples": 3}, 17.770641439493943, 0.001861529890447855),
    ("bam:GGC", {}, 1.0459890013177642, -0.0001461150823161006),
    ("integrated_gradients", {"steps": 5, "baseline": "uniform", "rule": "gausslegendre"},
     67.70293660694253, 0.006107671186327934),
]


@pytest.mark.parametrize("method, params, total, element", PINNED,
                         ids=[f"{m}{sorted(p)}" for m, p, _, _ in PINNED])
def test_maps_equal_the_values_pinned_before_the_refactoring(setup, method, params, total,
                                                             element):
    model, images = setup
    maps = saliency_gen.attribute(model, images, method, batch_size=7, seed=3, **params)
    assert np.abs(maps).astype(np.float64).sum() == pytest.approx(total, rel=1e-5)
    assert float(maps.reshape(-1)[1000]) == pytest.approx(element, rel=1e-4, abs=1e-9)


def test_idsds_scheme_with_labels_equals_its_pinned_value(setup):
    model, images = setup
    maps = saliency_gen.attribute(model, images, "idsds:IG-U abs", [0, 1, 2, 3, 1],
                                  batch_size=7, seed=3, steps=4)
    assert maps.shape == (5, 16, 16, 1)
    assert maps.astype(np.float64).sum() == pytest.approx(76.29541382906609, rel=1e-5)


def test_faithfulness_scores_equal_the_values_pinned_before_the_refactoring(setup):
    model, _ = setup
    images = np.random.default_rng(5).normal(0, 1, (6, 16, 16, 3)).astype(np.float32) * 30
    maps = np.random.default_rng(6).normal(0, 1, (6, 4, 4)).astype(np.float32)
    full = np.random.default_rng(7).normal(0, 1, (6, 16, 16, 3)).astype(np.float32)
    classes = np.array([0, 1, 2, 3, 0, 1])
    deletion = faithfulness.Deletion(batch_size=3, output_activation="softmax").compute_scores(
        model, images, maps, classes)
    assert deletion.curves.sum() == pytest.approx(28.85808722022921, rel=1e-5)
    clean, masked = faithfulness.IIC_AD(batch_size=3, output_activation="softmax") \
        .compute_scores(model, images, maps, classes)
    assert clean.sum() + masked.sum() == pytest.approx(3.9263729378581047, rel=1e-5)
    rise = faithfulness.RiseDeletion(step=16, batch_size=3, output_activation="softmax") \
        .compute_scores(model, images, full[..., 0], classes)
    assert rise.curves.sum() == pytest.approx(30.84894418530166, rel=1e-5)
    single = faithfulness.single_deletion(model, images, classes, full, grid=4,
                                          baseline="random", batch_size=3)
    assert single["drops"].sum() == pytest.approx(4.48624849319458, rel=1e-4)
    incremental = faithfulness.incremental_deletion(model, images, classes, full, steps=4,
                                                    baseline="blur", batch_size=3,
                                                    blur_kernel=5, blur_sigma=2.0)
    assert incremental["curves"].sum() == pytest.approx(7.183569049462676, rel=1e-5)
