"""Known answers of the peers' measures on constructed models and maps (docs/measures.md):
focus, the sum-based and removal-based faithfulness measures, the representation stability,
smooth and efficient MPRT, MeGe and ReCo; and the agreement with Xplique's stored values.
(The agreement with Quantus is in test_measures.py.)"""
import dataclasses
import json
import os

import numpy as np
import pytest
import scipy.stats
import tensorflow as tf

from faithfulness import measures
from models.foundation.errors import UserError
from tests.faithfulness.test_measures import ARRAYS, MODELS, linear_model


def linear_setup(seed):
    """(model, x [2, 4, 4, 3], logit-0 weights [48], black baselines [2, 1], the exact
    contributions w (x - b) of class 0 [2, 4, 4, 3])."""
    rng = np.random.default_rng(seed)
    x = rng.uniform(0.1, 1.0, (2, 4, 4, 3)).astype(np.float32)
    weights = rng.normal(size=(48, 2))
    black = x.reshape(2, -1).min(axis=1)[:, None]
    contributions = (weights[:, 0][None] * (x.reshape(2, -1) - black)).reshape(x.shape)
    return linear_model(weights), x, weights[:, 0], black, contributions


def test_focus_scores_the_positive_relevance_in_the_class_quadrants():
    """A map that is positive only in the marked quadrants scores 1, one positive only outside
    0, and negative values count nothing; odd sides split at H // 2."""
    maps = np.zeros((3, 5, 6))
    maps[0, :2, :3] = 1.0  # top left only
    maps[1, 2:, 3:] = 2.0  # bottom right only
    maps[2] = -1.0
    maps[2, :2, 3:] = 1.0  # top right positive, the rest negative
    quadrants = np.array([[1, 0, 0, 0], [1, 1, 1, 0], [0, 1, 0, 0]])
    x = np.zeros((3, 5, 6, 3), np.float32)
    found = measures.focus(None, x, np.zeros(3, np.int64), maps, custom_batch=quadrants)
    np.testing.assert_allclose(found, [1.0, 0.0, 1.0], atol=1e-8)
    with pytest.raises(UserError, match="^custom_batch is missing"):
        measures.focus(None, x, np.zeros(3, np.int64), maps)


def test_mosaics_place_the_images_in_their_quadrants():
    """Constant-colour images: each quadrant of a mosaic has its member's colour; the explained
    image and a partner of its label take the two quadrants marked 1; a group with one label
    gives no mosaic; the quadrants are keyed by (seed, id)."""
    from faithfulness.measures import mosaics

    colours = np.arange(1, 6, dtype=np.float32)
    images = np.broadcast_to(colours[:, None, None, None], (5, 8, 8, 3)).copy()
    labels = np.array([0, 0, 1, 2, 1])
    mosaic, quadrants = mosaics.mosaics(images, labels, np.arange(5), seed=3)
    tiles = mosaic[:, ::4, ::4, 0].reshape(5, 4)  # one value per quadrant, reading order
    for index in range(5):
        members = colours[labels == labels[index]]
        assert set(tiles[index][quadrants[index] == 1]) <= set(members)
        assert colours[index] in tiles[index][quadrants[index] == 1]
        assert not set(tiles[index][quadrants[index] == 0]) & set(members)
    assert quadrants.sum(axis=1).tolist() == [2] * 5
    again = mosaics.mosaics(images, labels, np.arange(5), seed=3)[1]
    np.testing.assert_array_equal(quadrants, again)
    single = mosaics.mosaics(images[:2], labels[:2], np.arange(2))[1]
    assert (single == -1).all()


def test_focus_through_the_binary_is_a_share_and_nan_without_other_labels():
    from faithfulness import evaluate

    x, model = ARRAYS["x"], MODELS[8]
    labels = np.array([0, 0, 1, 2, 1])
    found = evaluate.per_image(model, x, labels, np.arange(5), "gradient", "focus",
                               evaluate.Options())["focus"]
    assert found.shape == (5,) and np.all((found >= 0) & (found <= 1))
    alone = evaluate.per_image(model, x[:2], labels[:2], np.arange(2), "gradient", "focus",
                               evaluate.Options())["focus"]
    assert np.isnan(alone).all()


def test_infidelity_and_sensitivity_n_of_a_linear_model():
    """Logits of a linear model on the black baseline: replacing values drops the logit by
    exactly the sum of w (x - b) over them, so the gradient w has infidelity 0 (its product
    with the perturbation is that sum) and the map w (x - b) sensitivity-n 1 at every n (the
    removed set's sum; Quantus's last-step sum is not); twice the gradient has the mean
    squared drop as its infidelity."""
    model, x, weights, black, contributions = linear_setup(20)
    classes = np.zeros(2, np.int64)
    gradient = np.broadcast_to(weights.reshape(4, 4, 3), x.shape)
    found = measures.infidelity(model, x, classes, gradient, perturb_patch_sizes=(2, 4))
    np.testing.assert_allclose(found, 0.0, atol=1e-9)
    doubled = measures.infidelity(model, x, classes, 2 * gradient, perturb_patch_sizes=(4,))
    drop = contributions.reshape(2, -1).sum(axis=1)  # one 4-patch: the whole image
    np.testing.assert_allclose(doubled, drop ** 2, rtol=1e-5)
    several = np.concatenate([x, x[::-1] * 0.5 + 0.3])
    black = several.reshape(4, -1).min(axis=1)[:, None]
    maps = (weights[None] * (several.reshape(4, -1) - black)).reshape(several.shape)
    curve = measures.sensitivity_n(model, several, np.zeros(4, np.int64), maps,
                                   features_in_step=4, softmax=False, normalise=False)
    assert curve.shape == (int(0.8 * 16 // 4),)
    np.testing.assert_allclose(curve, 1.0, atol=1e-6)
    quantus_sums = measures.sensitivity_n(model, several, np.zeros(4, np.int64), maps,
                                          features_in_step=4, softmax=False, normalise=False,
                                          cumulative_sums=False)
    assert not np.allclose(quantus_sums, 1.0)


def test_monotonicity_correlation_of_a_linear_model_is_one():
    """With a fixed baseline a step's squared drop is (sum of w (x - b) over it)^2 / y^2, so
    |w (x - b)|, one value per step, ranks the steps exactly (Spearman 1); uniform draws are
    keyed by seed and image."""
    model, x, _, _, contributions = linear_setup(21)
    classes = np.zeros(2, np.int64)
    found = measures.monotonicity_correlation(model, x, classes, contributions,
                                              perturb_baseline="black", softmax=False)
    np.testing.assert_allclose(found, 1.0, atol=1e-9)
    drawn = measures.monotonicity_correlation(model, x, classes, contributions, nr_samples=4,
                                              softmax=False, seed=1)
    np.testing.assert_array_equal(drawn, measures.monotonicity_correlation(
        model, x, classes, contributions, nr_samples=4, softmax=False, seed=1))
    assert np.all(drawn > 0.5)


def test_irof_of_a_constant_model_and_the_superpixels():
    """A model whose output ignores the image keeps the ratio 1 at every step: the area over
    the curve is 1 for the image with the most segments (its last half step), and one more
    per segment the others lack (their curves are padded with zeros, as Quantus's)."""
    import keras

    from faithfulness.measures import faithfulness_removal

    rng = np.random.default_rng(22)
    x = rng.uniform(0, 1, (3, 16, 16, 3)).astype(np.float32)
    constant = keras.Sequential([keras.Input((16, 16, 3)), keras.layers.Flatten(),
                                 keras.layers.Dense(2, kernel_initializer="zeros",
                                                    bias_initializer="ones")])
    counts = faithfulness_removal.superpixels(x).reshape(3, -1).max(axis=1) + 1
    assert counts.max() > 1
    found = measures.irof(constant, x, np.zeros(3, np.int64), rng.normal(size=(3, 16, 16)))
    largest = counts.max()
    expected = counts - np.where(counts == largest, largest - 1, counts - 0.5)
    np.testing.assert_allclose(found, expected, atol=1e-6)


def test_road_keeps_the_prediction_of_a_constant_image():
    """Imputing pixels of a constant image from their neighbours gives the same constant (no
    noise): the prediction stays, 1 at every percentage where it was right, 0 where not."""
    x = np.full((2, 8, 8, 3), 0.5, np.float32)
    x[1] = -0.5
    model = MODELS[8]
    predicted = np.argmax(model(x).numpy(), axis=1)
    maps = np.random.default_rng(23).normal(size=(2, 8, 8))
    found = measures.road(model, x, predicted, maps, noise=0.0, percentages=(10, 50, 90))
    np.testing.assert_array_equal(found, 1.0)
    other = (predicted + 1) % 3
    np.testing.assert_array_equal(
        measures.road(model, x, other, maps, noise=0.0, percentages=(10, 50)), 0.0)


def test_roads_chunk_pads_least_among_four_sizes():
    """The solver compiles per chunk size: a ROAD stream takes the batch, its half, its
    quarter or its eighth, whichever pads the fewest items, the larger on a tie (80 items at
    64: 16s; 20 items: 8s, 24 computed where a chunk of 32 computed 32)."""
    from models.foundation.executor import compiled_chunk_size

    assert [compiled_chunk_size(items, 64) for items in (1, 20, 25, 64, 80, 100, 250)] == \
        [8, 8, 32, 64, 16, 8, 64]
    assert compiled_chunk_size(10, 2) == 2 and compiled_chunk_size(3, 2) == 1


def test_relative_representation_stability_reads_the_chosen_layers(monkeypatch):
    """A map that does not move under the noise scores 0; the last layer's representation is
    the logits; an unknown layer is one line."""
    model, x, weights, _, _ = linear_setup(24)
    gradient = np.broadcast_to(weights.reshape(4, 4, 3), x.shape)
    found = measures.relative_representation_stability(
        model, x, np.zeros(2, np.int64), gradient, explain_func="gradient", nr_samples=5,
        return_nan_when_prediction_changes=False)
    np.testing.assert_allclose(found, 0.0, atol=1e-6)
    from faithfulness.measures import robustness_family

    def flat_layers(reader, images):  # every layer's outputs, flattened and concatenated
        found = reader(tf.constant(images, tf.float32), training=False)
        return np.concatenate([np.asarray(output, np.float64).reshape(len(images), -1) for
                               output in (found if isinstance(found, list) else [found])], 1)

    last = flat_layers(robustness_family.representation_reader(model, layer_indices=[-1]), x)
    np.testing.assert_allclose(last, model(x).numpy().reshape(len(x), -1), rtol=1e-6)
    # every layer, each row against its own image's: in one block, and in blocks of one image
    # whose 9 samples are read in chunks of 2 (the clean image read again with each chunk)
    every = robustness_family.representation_reader(model)
    moved = (x[None] + np.linspace(-0.2, 0.2, 9)[:, None, None, None, None]).astype(np.float32)
    moved = moved.reshape(-1, *x.shape[1:])
    clean = np.tile(flat_layers(every, x), (9, 1))
    expected = np.linalg.norm((clean - flat_layers(every, moved)) / (clean + (clean == 0) * 1e-6),
                              axis=1)
    one_block = robustness_family.representation_change(every, x, moved)
    np.testing.assert_allclose(one_block.ravel(), expected, rtol=1e-12)
    largest = max(int(np.prod(output.shape[1:])) for output in every.python_function.outputs)
    monkeypatch.setattr(robustness_family, "LAYER_VALUES", 3 * largest)
    np.testing.assert_allclose(robustness_family.representation_change(every, x, moved),
                               one_block, rtol=1e-14)
    with pytest.raises(UserError, match="^layer_names: the model has no layer nowhere"):
        robustness_family.representation_reader(model, layer_names=["nowhere"])


def test_smooth_mprt_with_one_sample_is_bottom_up_mprt(monkeypatch):
    """The last of smooth_mprt's samples is the clean image: with one sample it is mprt
    bottom-up; more samples give other (reproducible) values, from noisy copies drawn once for
    every randomised model."""
    from faithfulness.measures import robustness_family

    draws = []
    original = robustness_family.noisy_copies
    monkeypatch.setattr(robustness_family, "noisy_copies",
                        lambda *args, **kwargs: draws.append(1) or original(*args, **kwargs))
    x, model = ARRAYS["x"], MODELS[8]
    classes = ARRAYS["y"].astype(np.int64)
    gradient = ARRAYS["gradient"]
    one = measures.smooth_mprt(model, x, classes, gradient, explain_func="gradient",
                               nr_samples=1)
    np.testing.assert_allclose(one, measures.mprt(model, x, classes, gradient,
                                                  explain_func="gradient",
                                                  layer_order="bottom_up"), atol=1e-12)
    several = measures.smooth_mprt(model, x, classes, gradient, explain_func="gradient",
                                   nr_samples=4, return_average_correlation=True)
    assert several.shape == (5,) and not np.allclose(several, one.mean(axis=1))
    assert len(draws) == 1  # not one draw per model: the five models explain the same copies
    np.testing.assert_array_equal(several, measures.smooth_mprt(
        model, x, classes, gradient, explain_func="gradient", nr_samples=4,
        return_average_correlation=True))


def test_efficient_mprt_entropy_and_a_model_free_map():
    """The discrete entropy is numpy's histogram's under scipy's entropy; a map that does not
    depend on the model keeps its entropy (0 rise), a gradient's changes."""
    from faithfulness.measures import randomisation_family
    from saliency_gen.attribution import engine

    rows = np.random.default_rng(25).normal(size=(4, 300))
    expected = [scipy.stats.entropy(np.histogram(row, bins=100)[0]) for row in rows]
    np.testing.assert_allclose(randomisation_family.discrete_entropy(rows), expected,
                               rtol=1e-12)
    x, model = ARRAYS["x"], MODELS[8]
    classes = ARRAYS["y"].astype(np.int64)
    random_maps = engine.attribute(model, x, "random", classes, ids=np.arange(5), seed=42)
    np.testing.assert_allclose(measures.efficient_mprt(model, x, classes, random_maps,
                                                       explain_func="random"), 0.0, atol=1e-12)
    assert not np.allclose(measures.efficient_mprt(model, x, classes, ARRAYS["gradient"],
                                                   explain_func="gradient"), 0.0)


XPLIQUE = os.path.join(os.path.dirname(__file__), "..", "data", "xplique_reference.json")


def xplique_models(stored):
    """The stored model (Quantus's cases' weights) and its four fold twins (the dense weights
    shifted as `scripts/xplique_reference.py` shifted them)."""
    from scripts import measures_agreement

    shifts = np.asarray(stored["inputs"]["shifts"], np.float32)
    return (measures_agreement.stored_model(ARRAYS, (8, 8, 3)),
            [measures_agreement.stored_model(ARRAYS, (8, 8, 3), shift) for shift in shifts])


def test_agrees_with_xplique():
    """Xplique 2.0.2's stored values (scripts/xplique_reference.py): MeGe and ReCo exactly on
    the same fold models and gradients; AverageStability's and MuFidelity's means over 16
    images in distribution (their draws differ: within 3% and 0.03)."""
    with open(XPLIQUE) as handle:
        stored = json.load(handle)
    values = {case["measure"]: case["value"] for case in stored["cases"]}
    x = np.asarray(stored["inputs"]["x"], np.float32)
    y = np.asarray(stored["inputs"]["y"], np.int64)
    model, folds = xplique_models(stored)
    from faithfulness.measures import xplique_generalisation

    found = xplique_generalisation.mege_and_reco(folds, x, y, explain_func="gradient")
    np.testing.assert_allclose(found, (values["mege"], values["reco"]), rtol=1e-6)
    assert 0 < values["reco"] < 1  # a case that separates some pairs, not all
    from saliency_gen.attribution import engine

    gradient = np.asarray(engine.attribute(model, x, "gradient", y))
    stability = measures.average_stability(model, x, y, gradient, explain_func="gradient",
                                           nb_samples=200, radius=0.1)
    np.testing.assert_allclose(stability.mean(), values["average_stability"], rtol=0.03)
    fidelity = measures.mu_fidelity(model, x, y, gradient, grid_size=2, subset_percent=0.3,
                                    nb_samples=400)
    np.testing.assert_allclose(fidelity.mean(), values["mu_fidelity"], atol=0.03)


def test_mege_and_reco_of_identical_and_retrained_models(monkeypatch):
    """Fold models that are one model: every pair agrees and its maps are equal (distance 0),
    so MeGe is 1 and ReCo 0 (no disagreeing pair to tell apart); the binary's protocol
    retrains the architecture per fold, reproducibly (a copy of the model retrains the same
    folds), and once per images and settings: reco after mege trains nothing; a model that is
    not k models is one line."""
    import keras

    from faithfulness import evaluate
    from faithfulness.measures import xplique_generalisation

    x = np.concatenate([ARRAYS["x"]] * 2)[:8]
    y = np.concatenate([ARRAYS["y"]] * 2)[:8].astype(np.int64)
    model = MODELS[8]
    found = xplique_generalisation.mege_and_reco([model] * 4, x, y, explain_func="gradient")
    np.testing.assert_allclose(found, (1.0, 0.0), atol=1e-12)
    with pytest.raises(UserError, match="^mege and reco need k models"):
        measures.mege(model, x, y, explain_func="gradient")
    trainings = []
    fit = keras.Model.fit
    monkeypatch.setattr(keras.Model, "fit", lambda *args, **kwargs: trainings.append(1) or fit(
        *args, **kwargs))
    options = evaluate.Config(evaluation_protocol="mege", fold_epochs=40, k_splits=2)
    first = evaluate.per_image(model, x, y, np.arange(8), "gradient", "mege", options)
    evaluate.per_image(model, x, y, np.arange(8), "gradient", "reco",
                       dataclasses.replace(options, evaluation_protocol="reco"))
    assert len(trainings) == 2  # the two folds' models, trained for mege, reused by reco
    copy = keras.models.clone_model(model)
    copy.set_weights(model.get_weights())
    again = evaluate.per_image(copy, x, y, np.arange(8), "gradient", "mege", options)
    assert len(trainings) == 4  # another model: its own folds
    assert first["mege"].shape == (8,) and len(set(first["mege"])) == 1
    assert 0 < first["mege"][0] < 1
    np.testing.assert_array_equal(first["mege"], again["mege"])


def test_input_invariance_of_grad_cam_on_a_zoo_model():
    """The shifted model is a flat copy of the model: Grad-CAM finds its features layer, and
    its map (of the features, not the input) is invariant; gradient x input is not."""
    import keras

    import models
    from saliency_gen.attribution import engine

    keras.utils.set_random_seed(3)
    model = models.build("small_cnn", 4, (16, 16, 3), width=4)
    x = np.random.default_rng(26).uniform(size=(2, 16, 16, 3)).astype(np.float32)
    classes = np.array([0, 3])
    for method, expected in (("bam:GC", 1.0), ("grad_x_input", 0.0)):
        maps = engine.attribute(model, x, method, classes)
        np.testing.assert_array_equal(
            measures.input_invariance(model, x, classes, maps, explain_func=method), expected)


def test_random_logit_with_shared_maps_explains_the_other_class():
    """The card hands the measures the maps it computed once (`maps`); a measure that explains
    the same images for other classes (random_logit) must get those classes' maps, not the
    shared ones (which gave SSIM 1 for every method)."""
    from faithfulness import evaluate
    from saliency_gen.attribution import engine

    x, model = ARRAYS["x"], MODELS[8]
    classes = ARRAYS["y"].astype(np.int64)
    maps = np.asarray(engine.attribute(model, x, "gradient", classes))
    shared = evaluate.per_image(model, x, classes, np.arange(5), "gradient", "random_logit",
                                evaluate.Options(), maps=maps)["random_logit"]
    alone = measures.random_logit(model, x, classes, maps, explain_func="gradient", seed=0,
                                  ids=np.arange(5))
    np.testing.assert_allclose(shared, alone, rtol=1e-6)
    assert np.all(shared < 0.99)
