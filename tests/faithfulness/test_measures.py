"""The peers' measures (`faithfulness.measures`, docs/measures.md): Quantus 0.6's numbers on
stored inputs (`scripts/quantus_reference.py` ran Quantus in its own environment), known
answers on constructed maps, and one error line per bad argument."""
import importlib
import json
import math
import os

import numpy as np
import pytest
import tensorflow as tf

from faithfulness import measures
from faithfulness.measures import subsets
from models.foundation import workload
from models.foundation.errors import UserError
from scripts import measures_agreement

REFERENCE = os.path.join(os.path.dirname(__file__), "..", "data", "quantus_reference.json")
with open(REFERENCE) as handle:
    STORED = json.load(handle)
ARRAYS = {key: np.asarray(value, np.float32) for key, value in STORED["inputs"].items()}
MODELS = measures_agreement.stored_models(ARRAYS)


def call(name, a, s=None, x=None, **settings):
    x = ARRAYS["x"][:len(a)] if x is None else x
    return getattr(measures, name)(None, x, np.zeros(len(x), np.int64), a, s, **settings)


@pytest.mark.parametrize("case", STORED["cases"], ids=lambda case: "{}-{}-{}".format(
    case["measure"], case.get("maps", "objective"), case.get("settings", "")))
def test_agrees_with_quantus(case):
    """Every stored case: the same values as Quantus 0.6 (float32 there, float64 here; the
    model's outputs in TensorFlow here, PyTorch there)."""
    exact = "rtol" not in case  # else random draws: the same values in distribution only
    np.testing.assert_allclose(measures_agreement.ours(case, ARRAYS, MODELS),
                               measures_agreement.quantus_values(case),
                               rtol=1e-5 if exact else case["rtol"],
                               atol=1e-6 if exact else case.get("atol", 0))


# measures Quantus 0.6 cannot check (docs/measures.md): known answers only
NO_QUANTUS_CASE = {"monotonicity",  # Quantus 0.6 never changes its input: every image True
                   # re-initialised layers and random classes (PyTorch's own draws): known
                   # answers, and the SSIM against scikit-image's
                   "mprt", "smooth_mprt", "efficient_mprt", "random_logit",
                   # Quantus shifts the first layer's bias, inexact at a padded border
                   "input_invariance",
                   # Xplique's: checked against Xplique's stored values
                   # (test_measure_known_answers.py, test_agrees_with_xplique)
                   "average_stability", "mu_fidelity", "mege", "reco"}


def test_every_measure_has_a_case_and_a_declaration():
    cased = {case["measure"] for case in STORED["cases"]}
    assert cased == set(measures.__all__) - NO_QUANTUS_CASE
    declared = {spec.name for modules in measures.MODULES.values() for module in modules
                for spec in importlib.import_module(module).SPECS}
    assert declared == set(measures.__all__)


def test_a_map_equal_to_the_mask_localises_perfectly():
    masks = ARRAYS["s"]
    maps = masks + 0.0
    for name in ("pointing_game", "relevance_mass_accuracy", "relevance_rank_accuracy", "auc"):
        np.testing.assert_allclose(call(name, maps, masks), 1.0, err_msg=name)
    np.testing.assert_allclose(call("attribution_localisation", maps, masks), 1.0, atol=1e-8)
    np.testing.assert_allclose(call("top_k_intersection", maps, masks, k=6), 1.0)
    inverted = 1.0 - masks  # everything outside
    np.testing.assert_allclose(call("auc", inverted, masks), 0.0)
    np.testing.assert_allclose(call("relevance_rank_accuracy", inverted, masks), 0.0)


def test_weighted_and_influence_variants_and_empty_masks():
    masks = np.zeros((2, 8, 8), np.float32)
    masks[0, :2, :8] = 1  # 16 of 64 pixels
    maps = masks + 0.01 * np.arange(64, dtype=np.float32).reshape(8, 8)[None]
    # the maximum (bottom right) is outside the first mask; an empty mask has no value
    assert np.isnan(call("pointing_game", maps, masks)[1])
    assert call("pointing_game", maps, masks)[0] == 1.0  # the mask's 1.15 beats 0.63
    assert call("pointing_game", maps, masks, weighted=True)[0] == pytest.approx(0.75)
    assert call("top_k_intersection", maps, masks, k=8, concept_influence=True)[0] == \
        pytest.approx(4.0)
    share = call("attribution_localisation", maps, masks)[0]
    assert call("attribution_localisation", maps, masks, weighted=True)[0] == \
        pytest.approx(share * 0.25)


def test_complexity_of_constant_and_one_hot_maps():
    constant = np.ones((2, 8, 8), np.float32)
    constant[1] = 0.0
    constant[1, 3, 4] = 5.0  # one-hot
    assert call("complexity", constant)[0] == pytest.approx(math.log(64), rel=1e-9)
    assert call("complexity", constant)[1] == pytest.approx(0.0, abs=1e-9)
    assert call("sparseness", constant)[0] == pytest.approx(0.0, abs=1e-9)
    assert call("sparseness", constant)[1] == pytest.approx(63 / 64, rel=1e-5)
    np.testing.assert_array_equal(call("effective_complexity", constant), [64, 1])
    # divided by the batch's largest |a| (5): the constant map's 0.2 is under eps=0.3
    np.testing.assert_array_equal(call("effective_complexity", constant, eps=0.3), [0, 1])


@pytest.mark.parametrize("arguments, culprit", [
    (dict(name="sparseness", a=np.full((2, 8, 8), np.nan)), "a_batch"),
    (dict(name="sparseness", a=np.ones((2, 4, 4))), "a_batch"),
    (dict(name="sparseness", a=np.ones((2, 8, 8)), s=np.ones((2, 8, 8))), "s_batch"),
    (dict(name="auc", a=np.ones((2, 8, 8))), "s_batch"),
    (dict(name="auc", a=np.ones((2, 8, 8)), s=np.full((2, 8, 8), 2.0)), "s_batch"),
    (dict(name="auc", a=np.ones((2, 8, 8)), s=np.ones((2, 4, 8))), "s_batch"),
    (dict(name="sparseness", a=np.ones((2, 8, 8)), x=np.ones((2, 8, 8))), "x_batch"),
    (dict(name="top_k_intersection", a=np.ones((2, 8, 8)), s=np.ones((2, 8, 8)), k=64), "k"),
])
def test_bad_arguments_are_one_line_naming_them(arguments, culprit):
    with pytest.raises(UserError) as raised:
        call(**arguments)
    assert str(raised.value).startswith(culprit) and "\n" not in str(raised.value)


def test_quantus_layouts_and_images_the_model_does_not_take_say_what_to_pass():
    """A Quantus user's channel-first arrays, and images the model does not take: one line
    naming the argument and the way out (images of another size had reached Keras's shape
    error, a traceback, in 31 of the measures)."""
    x, y, maps, masks = ARRAYS["x"], ARRAYS["y"].astype(np.int64), ARRAYS["one"], ARRAYS["s"]
    model = MODELS[8]

    def refusal(name, *arguments, **settings):
        with pytest.raises(UserError) as raised:
            getattr(measures, name)(model, *arguments, **settings)
        assert "\n" not in str(raised.value)
        return str(raised.value)

    assert refusal("pixel_flipping", np.transpose(x, (0, 3, 1, 2)), y, maps[:, None]) == (
        "x_batch has shape (5, 3, 8, 8): it looks channels first (N, C, H, W), as Quantus "
        "takes it; pass NHWC images, np.transpose(x_batch, (0, 2, 3, 1)), and maps [N, H, W] "
        "or [N, H, W, C]")
    assert refusal("pixel_flipping", x, y, maps[:, None]).endswith(
        "(a_batch looks channels first, as Quantus takes it: pass a_batch[:, 0])")
    assert refusal("pixel_flipping", x, y, np.transpose(ARRAYS["three"], (0, 3, 1, 2))).endswith(
        "pass np.transpose(a_batch, (0, 2, 3, 1)))")
    assert refusal("pointing_game", x, y, maps, masks[:, None]).endswith(
        "(s_batch looks channels first, as Quantus takes it: pass s_batch[:, 0])")
    # labels as Keras datasets give them (a column), or one-hot
    assert refusal("pixel_flipping", x, y[:, None], maps).endswith(
        "(a column of classes, as Keras datasets give them: pass y_batch[:, 0])")
    assert refusal("pixel_flipping", x, np.eye(3)[y], maps).endswith(
        "(one row per image, one-hot: pass np.argmax(y_batch, axis=1))")
    # the stored model takes 8 x 8 x 3: 6 x 6 images, and one-channel ones, are refused by name
    for name in ("pixel_flipping", "sufficiency", "mprt", "max_sensitivity"):
        settings = {"explain_func": "gradient"} if name in ("mprt", "max_sensitivity") else {}
        assert refusal(name, ARRAYS["x_small"], y, ARRAYS["one_small"], **settings) == (
            "x_batch holds images of shape (6, 6, 3), but the model takes (8, 8, 3) (H, W, C)")
    assert refusal("irof", ARRAYS["x_gray"], y, maps).startswith(
        "x_batch holds images of shape (8, 8, 1)")
    # one-channel maps (as Quantus's explain gives them) re-explained by a method giving three:
    # a_batch's shape as it was given (before: "(1, 8, 8) (channel first)")
    assert refusal("max_sensitivity", x, y, maps, explain_func="gradient") == (
        "explain_func gives maps of shape (8, 8, 3) per image, but a_batch's are (8, 8) (one "
        "channel); compute a_batch with the same explain_func, or give one whose maps have one "
        "channel (its maps summed over the channels, say)")
    assert refusal("mprt", x, y, ARRAYS["three"], explain_func=lambda model, inputs, targets:
                   np.zeros(np.shape(inputs)[:3])) == (
        "explain_func gives maps of shape (8, 8) per image, but a_batch's are (8, 8, 3); "
        "compute a_batch with the same explain_func")


def test_a_quantus_call_runs_as_it_is_written():
    """Quantus's base settings and its call's layout flag: channel_first=True takes Quantus's
    (N, C, H, W) arrays and gives the NHWC call's values; return_aggregate gives
    [aggregate_func(values)]; the warning, bar and device flags are accepted."""
    x, y, model = ARRAYS["x"], ARRAYS["y"].astype(np.int64), MODELS[8]
    maps, masks = ARRAYS["three"], ARRAYS["s"]
    nhwc = measures.pixel_flipping(model, x, y, maps, features_in_step=16)
    quantus_style = measures.pixel_flipping(
        model=model, x_batch=np.transpose(x, (0, 3, 1, 2)), y_batch=y,
        a_batch=np.transpose(maps, (0, 3, 1, 2)), features_in_step=16, channel_first=True,
        disable_warnings=True, display_progressbar=False, device="cpu")
    np.testing.assert_array_equal(quantus_style, nhwc)
    np.testing.assert_array_equal(
        measures.pointing_game(model, np.transpose(x, (0, 3, 1, 2)), y, ARRAYS["one"],
                               masks[:, None], channel_first=True),
        measures.pointing_game(model, x, y, ARRAYS["one"], masks))
    aggregate = measures.pixel_flipping(model, x, y, maps, features_in_step=16,
                                        return_aggregate=True)
    assert aggregate.shape == (1,) and aggregate[0] == pytest.approx(nhwc.mean(), rel=1e-12)
    sparseness = measures.sparseness(None, x, y, maps)
    assert measures.sparseness(None, x, y, maps, return_aggregate=True,
                               aggregate_func=np.median)[0] == np.median(sparseness)
    from saliency_gen.attribution import engine

    # a Quantus user's explain_func, written for (N, C, H, W) images and maps: it gets them so
    # (before: NHWC images, which it read as 8 channels of 3 x 8 pixels), the same values
    seen = []

    def channel_first_gradient(model, inputs, targets):
        seen.append(np.shape(inputs))
        images = tf.convert_to_tensor(np.transpose(inputs, (0, 2, 3, 1)))
        with tf.GradientTape() as tape:
            tape.watch(images)
            score = tf.reduce_sum(tf.gather(model(images), targets, batch_dims=1))
        return np.transpose(tape.gradient(score, images).numpy(), (0, 3, 1, 2))

    gradients = np.asarray(engine.attribute(model, x, "gradient", y))
    own = measures.max_sensitivity(model, x, y, gradients, explain_func="gradient",
                                   nr_samples=3)
    np.testing.assert_allclose(measures.max_sensitivity(
        model, np.transpose(x, (0, 3, 1, 2)), y, np.transpose(gradients, (0, 3, 1, 2)),
        explain_func=channel_first_gradient, nr_samples=3, channel_first=True), own, rtol=1e-5)
    assert seen and all(shape[1:] == (3, 8, 8) for shape in seen)
    with pytest.raises(UserError, match=r"^model_predict_kwargs \['verbose'\]"):
        measures.sparseness(None, x, y, maps, model_predict_kwargs={"verbose": 0})
    with pytest.raises(UserError, match="^channel_first must be True, False or None"):
        measures.sparseness(None, x, y, maps, channel_first="yes")
    # the settings all measures share, checked once for all (batch_size=0 had been a
    # ZeroDivisionError in 15 measures; seed=-1 taken by 5, refused by others their own way)
    with pytest.raises(UserError, match=r"^batch_size must be an integer of at least 1; got 0$"):
        measures.pixel_flipping(model, x, y, maps, batch_size=0)
    with pytest.raises(UserError, match=r"^seed must be a non-negative integer; got -1$"):
        measures.region_perturbation(model, x, y, maps, seed=-1)


def test_a_keras_model_that_leaves_the_image_size_open_is_measured():
    """A fully convolutional Keras model whose input is (None, None, 3): measured and
    explained at the images' size (the adapter had turned None into an int: a TypeError)."""
    import keras

    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((None, None, 3)), keras.layers.Conv2D(4, 3),
                              keras.layers.GlobalAveragePooling2D(), keras.layers.Dense(3)])
    x, y = ARRAYS["x"], ARRAYS["y"].astype(np.int64)
    curves = measures.pixel_flipping(model, x, y, ARRAYS["three"], features_in_step=16)
    assert curves.shape == (5, 12) and np.isfinite(curves).all()
    from saliency_gen.attribution import engine
    cam = engine.attribute(model, x, "grad_cam", y)  # its features model needs the input
    assert cam.shape == (5, 8, 8, 3) and np.abs(cam).max() > 0
    gradients = engine.attribute(model, x, "gradient", y)
    correlations = measures.mprt(model, x, y, gradients, explain_func="gradient")
    assert correlations.shape == (5, 2) and np.isfinite(correlations).all()
    # PAIR's methods trace for any size (they had refused such a model): the maps of the same
    # weights with the size fixed
    fixed = keras.Sequential([keras.Input((8, 8, 3)), keras.layers.Conv2D(4, 3),
                              keras.layers.GlobalAveragePooling2D(), keras.layers.Dense(3)])
    fixed.set_weights(model.get_weights())
    blurred = [engine.attribute(m, x[:2], "blur_ig", y[:2]) for m in (model, fixed)]
    assert np.abs(blurred[1]).max() > 0
    np.testing.assert_allclose(blurred[0], blurred[1], rtol=1e-5, atol=1e-9)


def test_a_transfer_learning_model_with_a_nested_base_is_explained_and_randomised():
    """Sequential([base, pooling, head]), the base a model of its own, and a flat model with the
    same weights, both ending in a softmax: Grad-CAM reads the feature layer's call in the graph
    it explains (`output` is the first call's: the nested base's inner graph, or the model of
    which the softmax-free view shares the layers; both had failed with Keras's 'not connected
    to inputs'), MPRT re-initialises the base's layers too (it saw the head alone), and the
    representations are read; the two models give the same values."""
    import keras

    from faithfulness import randomisation
    from saliency_gen.attribution import engine

    keras.utils.set_random_seed(0)
    inputs = keras.Input((8, 8, 3))
    base = keras.Model(inputs, keras.layers.Conv2D(4, 3, activation="relu")(inputs), name="base")
    nested = keras.Sequential([keras.Input((8, 8, 3)), base, keras.layers.GlobalAveragePooling2D(),
                               keras.layers.Dense(3, activation="softmax")])
    flat_inputs = keras.Input((8, 8, 3))
    flat = keras.Model(flat_inputs, keras.layers.Dense(3, activation="softmax")(
        keras.layers.GlobalAveragePooling2D()(keras.layers.Conv2D(4, 3, activation="relu")(
            flat_inputs))))
    flat.set_weights(nested.get_weights())
    x, y = ARRAYS["x"], ARRAYS["y"].astype(np.int64)
    cams = [engine.attribute(model, x, "grad_cam", y) for model in (nested, flat)]
    assert np.abs(cams[1]).max() > 0
    np.testing.assert_allclose(cams[0], cams[1], rtol=1e-5, atol=1e-7)
    assert [layer.kernel.shape for layer in randomisation.weighted_layers(nested)] == [
        (4, 3), (3, 3, 3, 4)]
    gradients = engine.attribute(flat, x, "gradient", y)
    for name, settings in (("mprt", {}), ("relative_representation_stability",
                                          {"nr_samples": 3})):
        values = [getattr(measures, name)(model, x, y, gradients, explain_func="gradient",
                                          **settings) for model in (nested, flat)]
        np.testing.assert_allclose(values[0], values[1], rtol=1e-5, err_msg=name)


def test_pixel_flipping_ends_at_the_baseline_whatever_the_chunk():
    """The last step has replaced every value by the image's smallest ("black"), so the curve
    ends at the model's output on that constant image; chunks of 1 or 64 items agree (to the
    model's rounding: oneDNN's convolutions on AVX2 round a batch of 1 otherwise than one of
    64, in the last bit of float32; a misplaced item would differ by far more)."""
    x, maps = ARRAYS["x"], ARRAYS["three"]
    model, classes = MODELS[8], ARRAYS["y"].astype(np.int64)
    curves = measures.pixel_flipping(model, x, classes, maps, features_in_step=16)
    alone = measures.pixel_flipping(model, x, classes, maps, features_in_step=16, batch_size=1)
    np.testing.assert_allclose(curves, alone, rtol=1e-6, atol=1e-8)
    constant = np.broadcast_to(x.min(axis=(1, 2, 3))[:, None, None, None], x.shape)
    expected = np.asarray(model(constant)).astype(np.float64)
    expected = np.exp(expected) / np.exp(expected).sum(axis=1, keepdims=True)
    assert curves.shape == (5, 12)
    np.testing.assert_allclose(curves[:, -1], expected[np.arange(5), classes], rtol=1e-5)


def test_model_measures_refuse_bad_classes_and_steps():
    with pytest.raises(UserError, match="^y_batch holds a class outside the model's 3"):
        measures.pixel_flipping(MODELS[8], ARRAYS["x"], np.array([0, 1, 2, 3, 0]),
                                ARRAYS["three"])
    with pytest.raises(UserError, match="^features_in_step must divide"):
        measures.pixel_flipping(MODELS[8], ARRAYS["x"], ARRAYS["y"].astype(int),
                                ARRAYS["three"], features_in_step=5)


def test_monotonicity_of_a_linear_model():
    """Logit 0 adds every value back with weight +1, logit 1 with one weight -1: putting the
    values back on the black image (least attributed first) never lowers logit 0, and lowers
    logit 1 at that value's step."""
    import keras

    rng = np.random.default_rng(7)
    x = rng.uniform(0.1, 1.0, (2, 4, 4, 1)).astype(np.float32)
    x[:, 0, 0, 0] = 0.05  # the black baseline; (2, 3) lies well above it
    kernel = np.ones((16, 2), np.float32)
    kernel[2 * 4 + 3, 1] = -1.0
    model = keras.Sequential([keras.Input((4, 4, 1)), keras.layers.Flatten(),
                              keras.layers.Dense(2, use_bias=False)])
    model.layers[-1].set_weights([kernel])
    maps = rng.uniform(0.1, 1.0, (2, 4, 4))
    found = measures.monotonicity(model, x, np.array([0, 1]), maps, softmax=False)
    np.testing.assert_array_equal(found, [1.0, 0.0])


def test_random_region_order_is_keyed_by_seed_and_image():
    """order="random": the same seed gives the same values, another seed others, and an
    image's values do not depend on the other images of the call (keyed by its id)."""
    x, maps, model = ARRAYS["x"], ARRAYS["three"], MODELS[8]
    classes = ARRAYS["y"].astype(np.int64)

    def run(images, seed, ids=None):
        return measures.region_perturbation(model, x[images], classes[images], maps[images],
                                            patch_size=2, order="random", seed=seed, ids=ids)

    first = run(slice(None), 0)
    np.testing.assert_array_equal(first, run(slice(None), 0))
    assert not np.allclose(first, run(slice(None), 1))
    np.testing.assert_allclose(run(slice(2, 4), 0, ids=[2, 3]), first[2:4], rtol=1e-6)


def linear_model(kernel):
    """Logits = flattened NHWC image @ kernel, no bias."""
    import keras

    model = keras.Sequential([keras.Input((4, 4, 3)), keras.layers.Flatten(),
                              keras.layers.Dense(kernel.shape[1], use_bias=False)])
    model.layers[-1].set_weights([kernel.astype(np.float32)])
    return model


def test_completeness_and_non_sensitivity_of_a_linear_model():
    """A linear logit: w (x - b) sums exactly to f(x) - f(b) (completeness 1, twice it 0); with
    zero weights on a third of the values, a map that is zero exactly there has
    non-sensitivity 0, and one more attributed zero-weight value counts 1."""
    rng = np.random.default_rng(8)
    x = rng.uniform(0.1, 1.0, (2, 4, 4, 3)).astype(np.float32)
    weights = rng.uniform(0.5, 1.5, (48, 2))
    weights[::3] = 0.0  # every third value (NHWC order) has no effect
    model = linear_model(weights)
    black = x.reshape(2, -1).min(axis=1)[:, None]
    contributions = weights[:, 0][None] * (x.reshape(2, -1) - black)  # class 0
    maps = contributions.reshape(2, 4, 4, 3)
    classes = np.array([0, 0])
    found = measures.completeness(model, x, classes, maps, normalise=False)
    np.testing.assert_array_equal(found, [1.0, 1.0])
    np.testing.assert_array_equal(
        measures.completeness(model, x, classes, 2 * maps, normalise=False), [0.0, 0.0])
    assert measures.non_sensitivity(model, x, classes, maps, softmax=False).tolist() == [0, 0]
    leaky = maps.copy()
    leaky[1, 0, 0, 0] = 0.5  # a zero-weight value with attribution
    assert measures.non_sensitivity(model, x, classes, leaky, softmax=False).tolist() == [0, 1]


def test_the_callers_maps_are_never_overwritten():
    """The measures scale the maps and take their differences in place, on arrays of their
    own: the caller's a_batch and an explain_func's kept array (one-channel float64 maps,
    which a float64 conversion would hand back uncopied) stay as they were."""
    x = np.ones((2, 4, 4, 3), np.float32)
    linear = linear_model(np.random.default_rng(9).uniform(0.5, 1.5, (48, 2)))
    kept = np.random.default_rng(3).normal(size=(16, 4, 4))
    given, copies = kept[:2], kept.copy()
    for name in ("avg_sensitivity", "relative_input_stability"):
        values = getattr(measures, name)(
            linear, x, np.array([0, 0]), given, nr_samples=4, abs=True, normalise=True,
            explain_func=lambda model, inputs, targets: kept[:len(inputs)])
        assert np.isfinite(values).all() and values.max() > 0, name
        np.testing.assert_array_equal(kept, copies, err_msg=name)


def test_sensitivity_of_linear_and_quadratic_models():
    """Gradient maps: a linear model's do not change (sensitivity 0); for f = sum(x^2) the map
    2x moves by 2 delta, so ||a - a'|| / ||a|| = ||delta|| / ||x||: about lower_bound / sqrt(3)
    on average for x = 1 (uniform noise), never above lower_bound; reproducible by seed."""
    import keras

    x = np.ones((2, 4, 4, 3), np.float32)
    linear = linear_model(np.random.default_rng(9).uniform(0.5, 1.5, (48, 2)))
    settings = dict(explain_func="gradient", nr_samples=200, lower_bound=0.1)
    gradient = np.broadcast_to(linear.layers[-1].get_weights()[0][:, 0].reshape(4, 4, 3),
                               x.shape)
    for name in ("max_sensitivity", "local_lipschitz_estimate", "relative_input_stability",
                 "relative_output_stability"):  # the same map whatever the input
        extra = {"lower_bound": 0.1} if "sensitivity" in name else {}
        before = workload.snapshot()
        np.testing.assert_allclose(getattr(measures, name)(
            linear, x, np.array([0, 0]), gradient, explain_func="gradient", nr_samples=5,
            normalise=False, **extra), 0.0, atol=1e-6, err_msg=name)
        # the relative stabilities mark changed predictions (NaN) and read the logits: the
        # clean and noisy images' forward passes, 2 + 2 x 5
        assert workload.since(before)["forward"] == (0 if name in (
            "max_sensitivity", "local_lipschitz_estimate") else 12), name
    np.testing.assert_allclose(measures.continuity(  # translations: the same map too
        linear, x, np.array([0, 0]), gradient, explain_func="gradient", nr_steps=4,
        normalise=False, abs=False), 0.0, atol=1e-6)
    squares = keras.Sequential([keras.Input((4, 4, 3)), keras.layers.Lambda(lambda t: t * t),
                                keras.layers.Flatten(), keras.layers.Dense(2, use_bias=False)])
    squares.layers[-1].set_weights([np.stack([np.ones(48), np.zeros(48)], 1)])
    before = workload.snapshot()
    average = measures.avg_sensitivity(squares, x, np.array([0, 0]), 2 * x, **settings)
    # its explanations alone: no forward pass of the noisy images, whose logits it never reads
    assert {kind: workload.since(before)[kind] for kind in ("forward", "gradient")} == \
        {"forward": 0, "gradient": 400}
    np.testing.assert_allclose(average, 0.1 / np.sqrt(3), rtol=0.03)
    largest = measures.max_sensitivity(squares, x, np.array([0, 0]), 2 * x, **settings)
    assert np.all((largest > average) & (largest <= 0.1))
    again = measures.avg_sensitivity(squares, x, np.array([0, 0]), 2 * x, **settings)
    np.testing.assert_array_equal(average, again)


def test_every_measure_is_a_protocol_of_the_binary():
    """`faithfulness.evaluate` scores a peer measure through the one protocol (`per_image`):
    the library call's values (a curve's area per image); masks reach the localisation
    measures; a setting the measure does not take, or one given to another protocol, is one
    line before any work."""
    from faithfulness import evaluate

    x, maps, classes = ARRAYS["x"], ARRAYS["three"], ARRAYS["y"].astype(np.int64)
    options = evaluate.Config(evaluation_protocol="pixel_flipping", features_in_step=16)
    found = evaluate.per_image(MODELS[8], x, classes, np.arange(5), "unused", "pixel_flipping",
                               options, maps=maps)
    expected = measures.pixel_flipping(MODELS[8], x, classes, maps, features_in_step=16,
                                       return_auc_per_sample=True)
    np.testing.assert_allclose(found["pixel_flipping"], expected, rtol=1e-12)
    one = ARRAYS["one"]
    found = evaluate.per_image(MODELS[8], x, classes, np.arange(5), "unused", "auc",
                               evaluate.Options(), maps=one, masks=ARRAYS["s"])
    np.testing.assert_allclose(found["auc"], call("auc", one, ARRAYS["s"]), rtol=1e-12)
    assert "pixel_flipping" in evaluate.PROTOCOLS and "sparseness" in evaluate.PROTOCOLS
    with pytest.raises(UserError, match="^--patch_size does not apply to sparseness"):
        evaluate.check_flags(evaluate.Config(evaluation_protocol="sparseness", patch_size=4))
    with pytest.raises(UserError, match="^--k is a setting of the peers' measures"):
        evaluate.check_flags(evaluate.Config(evaluation_protocol="deletion", k=4))


def test_the_cards_steps_and_infidelity_patches_divide_the_image_at_any_size():
    """A sixteenth of the pixels a step and a quarter of the side a patch where they divide the
    image (the settings of square sizes a multiple of 4 as before); elsewhere the largest divisor
    below, where Quantus's defaults (steps of 1 value, patches of 4 px) would take 89,401
    passes an image at 299 px, or fail."""
    from faithfulness import card

    def chosen(height, width):
        return (card.card_settings("pixel_flipping", height, width)["features_in_step"],
                card.card_settings("infidelity", height, width)["perturb_patch_sizes"])

    assert chosen(64, 64) == (256, (16,)) and chosen(224, 224) == (3136, (56,))
    assert chosen(299, 299) == (3887, (23,))  # 89,401 = 13^2 x 23^2: 23 steps, 13 x 13 patches
    assert chosen(99, 99) == (363, (11,))
    assert chosen(40, 48) == (120, (8,))  # a patch of min side / 4 = 10 px divides 40, not 48
    assert card.largest_divisor(97 * 97, 588) == 97 and card.largest_divisor(7, 0) == 1


def test_the_card_takes_measures_and_families():
    """--benchmarks names a family for all of its measures; a localisation measure's cells are
    blank without object masks, and with them score the oracle (the mask); the cells of
    faithfulness_correlation name its code's version; the peers' columns carry the measure's
    name alone."""
    import types

    from faithfulness import card
    from models.foundation.cli import script_module
    from models.report import card_engine

    report_card = script_module(os.path.join(os.path.dirname(REFERENCE), "..", "..", "scripts",
                                             "report_card.py"))
    config = report_card.resolved(report_card.Config(benchmarks=("ROAD", "complexity", "auc")))
    assert config.benchmarks == ("ROAD", "sparseness", "complexity", "effective_complexity",
                                 "auc")
    loaded = types.SimpleNamespace(model_id="stand-in")
    found = card.benchmarks(loaded, ARRAYS["x"], ARRAYS["y"], np.arange(5), data={},
                            names=("auc", "sparseness", "faithfulness_correlation"))
    assert [b.supports("random") for b in found] == [False, True, True]
    assert not any(b.supports(card_engine.ORACLE) for b in found)
    # with the images' object masks the localisation measures score the oracle, the mask on
    # every channel as the methods' maps are: each measure's best value; the other measures
    # still leave it out
    masks = ARRAYS["s"]
    masked = card.benchmarks(loaded, ARRAYS["x"], ARRAYS["y"], np.arange(5), data={},
                             names=("pointing_game", "relevance_mass_accuracy", "auc",
                                    "sparseness"), masks=masks)
    assert [b.supports(card_engine.ORACLE) for b in masked] == [True, True, True, False]
    for benchmark in masked[:3]:
        for values in benchmark.score(card_engine.ORACLE).values():
            np.testing.assert_array_equal(values, 1.0)
    oracle = card.oracle_maps(masks, 3)
    assert oracle.shape == (5, 8, 8, 3) and (oracle[..., 2] == masks).all()
    # the smallest mask has 6 pixels, 18 features: all 10 highest inside it (on one channel,
    # 6 of 10)
    np.testing.assert_array_equal(measures.top_k_intersection(None, ARRAYS["x"], ARRAYS["y"],
                                                              oracle, masks, k=10), 1.0)
    # a measure whose code changed its values names the code's version: its earlier cells are
    # recomputed
    assert [b.settings.get("measure_code") for b in found] == [
        None, None, measures.CODE["faithfulness_correlation"]]
    assert card_engine.column_name("sparseness", "sparseness") == "sparseness"
    assert card_engine.column_name("Deletion", "dauc") == "Deletion dauc"


def test_faithfulness_correlation_of_a_linear_model_is_one():
    """Logits of a linear model on the black baseline: replacing a subset drops the logit by
    exactly the sum of w (x - b) over it, so a map w (x - b) correlates perfectly (1), its
    negative perfectly badly (-1); the subsets do not depend on the chunk size."""
    rng = np.random.default_rng(10)
    x = rng.uniform(0.1, 1.0, (3, 4, 4, 3)).astype(np.float32)
    weights = rng.normal(size=(48, 2))
    model = linear_model(weights)
    black = x.reshape(3, -1).min(axis=1)[:, None]
    maps = (weights[:, 0][None] * (x.reshape(3, -1) - black)).reshape(3, 4, 4, 3)
    classes = np.zeros(3, np.int64)
    settings = dict(nr_runs=20, subset_size=5)
    found = measures.faithfulness_correlation(model, x, classes, maps, **settings)
    np.testing.assert_allclose(found, 1.0, atol=1e-5)
    np.testing.assert_allclose(
        measures.faithfulness_correlation(model, x, classes, -maps, **settings), -1.0,
        atol=1e-5)
    small = measures.faithfulness_correlation(model, x, classes, maps, batch_size=1, **settings)
    np.testing.assert_allclose(found, small, rtol=0, atol=1e-6)  # the model's rounding only


def test_ssim_of_rows_is_scikit_images():
    from skimage import metrics as skimage_metrics

    rng = np.random.default_rng(11)
    from faithfulness.measures import randomisation_family

    for width in (7, 50, 3000):  # one window; a row of many windows
        a, b = rng.normal(size=(3, width)), rng.normal(size=(3, width))
        b[2] = a[2] * 0.5 + 0.1
        expected = [skimage_metrics.structural_similarity(
            row, other, data_range=float(np.ptp(np.concatenate([row, other]))))
            for row, other in zip(a, b)]
        np.testing.assert_allclose(randomisation_family.ssim_rows(a, b), expected, rtol=1e-10)
    # a constant pair has no range: 0 / 0, NaN (scikit-image's rounding gives 1 or NaN)
    constant = np.full((3, 50), [[0.3], [1.0], [0.0]])
    assert np.isnan(randomisation_family.ssim_rows(constant, constant)).all()
    # a row's value is the same bytes whatever the rows around it pad to (1 -> 2, 3 -> 4,
    # 5 -> 8, 17 -> 32 rows): the padding only saves compiled programs
    a, b = rng.normal(size=(17, 300)), rng.normal(size=(17, 300))
    whole = randomisation_family.ssim_rows(a, b)
    for count in (1, 3, 5):
        assert randomisation_family.ssim_rows(a[:count], b[:count]).tobytes() == \
            whole[:count].tobytes()


def test_randomisation_measures_known_answers():
    """mprt: a map that does not depend on the model (the keyed random control) keeps
    correlation 1 with itself at every layer, a gradient falls; the model is left as it was.
    random_logit: where every class has the same gradient, the other class's map is the same
    map (SSIM 1)."""
    x, model = ARRAYS["x"], MODELS[8]
    classes = ARRAYS["y"].astype(np.int64)
    weights = [w.copy() for w in model.get_weights()]
    from saliency_gen.attribution import engine

    random_maps = engine.attribute(model, x, "random", classes, ids=np.arange(5), seed=42)
    kept = measures.mprt(model, x, classes, random_maps, explain_func="random")
    np.testing.assert_allclose(kept, 1.0, atol=1e-9)
    assert kept.shape == (5, 2)
    falling = measures.mprt(model, x, classes, ARRAYS["gradient"], explain_func="gradient",
                            return_last_correlation=True)
    assert falling.shape == (5,) and np.all(falling < 0.5)
    for before, after in zip(weights, model.get_weights()):
        np.testing.assert_array_equal(before, after)
    same = linear_model(np.repeat(np.random.default_rng(12).normal(size=(48, 1)), 3, axis=1))
    images = np.random.default_rng(13).uniform(size=(2, 4, 4, 3)).astype(np.float32)
    gradients = engine.attribute(same, images, "gradient", [0, 0])
    np.testing.assert_allclose(measures.random_logit(same, images, np.array([0, 0]), gradients,
                                                     explain_func="gradient"), 1.0, atol=1e-9)


def test_randomising_measures_follow_the_models_weights_between_calls():
    """mprt keeps its copy of the model between calls (the engine's traces on it reused) and
    gives it the model's weights at each call: after the weights change, a call equals a call
    on a model built with those weights, and differs from the call before the change."""
    import keras

    x, classes = ARRAYS["x"], ARRAYS["y"].astype(np.int64)
    rng = np.random.default_rng(21)
    changed = [w + rng.normal(0.0, 0.2, w.shape).astype(w.dtype)
               for w in MODELS[8].get_weights()]
    model, other = (keras.models.clone_model(MODELS[8]) for _ in range(2))
    model.set_weights(MODELS[8].get_weights())
    other.set_weights(changed)

    def mprt(on):
        return measures.mprt(on, x, classes, ARRAYS["gradient"], explain_func="gradient")
    before = mprt(model)
    model.set_weights(changed)
    after = mprt(model)
    assert after.tobytes() == mprt(other).tobytes()
    assert not np.array_equal(before, after)


def test_sufficiency_and_consistency_count_close_maps_of_the_same_prediction():
    """Two pairs of nearly equal maps, far apart: the first pair's images are predicted alike
    (1 each), the second pair's differently (0 each)."""
    kernel = np.stack([np.ones(48), -np.ones(48)], axis=1)  # positive images: class 0
    model = linear_model(kernel)
    rng = np.random.default_rng(14)
    x = rng.uniform(0.1, 1.0, (4, 4, 4, 3)).astype(np.float32)
    x[3] *= -1  # predicted class 1
    base = rng.normal(size=(2, 4, 4))
    maps = np.stack([base[0], base[0] + 0.01, base[1] * 5, base[1] * 5 + 0.01])
    found = measures.sufficiency(model, x, np.zeros(4, np.int64), maps)
    np.testing.assert_array_equal(found, [1.0, 1.0, 0.0, 0.0])
    # a distance scipy does not know: one line naming the setting
    with pytest.raises(UserError, match="^distance_func 'nope': "):
        measures.sufficiency(model, x, np.zeros(4, np.int64), maps, distance_func="nope")
    # consistency: the pairs also share their five highest values' places and signs
    np.testing.assert_allclose(measures.consistency(model, x, np.zeros(4, np.int64), maps),
                               [1.0, 1.0, 0.0, 0.0], atol=1e-8)
    # Quantus's reading (the first five values' signs, all + after abs): one label for all
    np.testing.assert_allclose(measures.consistency(
        model, x, np.zeros(4, np.int64), maps, discretise="first_n_sign"),
        [2 / 3, 2 / 3, 2 / 3, 0.0], atol=1e-8)


def test_sufficiencys_pair_distances_are_cdists_bytes():
    """The seuclidean distances from pdist (each pair once) are Quantus's cdist(a, a) to the
    byte, its variances included; another distance goes to cdist itself."""
    import scipy.spatial.distance

    from faithfulness.measures import faithfulness_family

    rng = np.random.default_rng(15)
    for maps in (rng.normal(size=(5, 300)), np.abs(rng.normal(size=(16, 12_288))),
                 np.round(rng.normal(size=(7, 40)), 1)):
        for name in ("seuclidean", "cityblock"):
            assert faithfulness_family._pair_distances(maps, name).tobytes() == \
                scipy.spatial.distance.cdist(maps, maps, name).tobytes()


def test_input_invariance_of_gradient_and_gradient_times_input():
    """A shift the model absorbs leaves the gradient as it was (1) and changes gradient x
    input (0); through the binary's protocol too, which explains with the method's name."""
    from faithfulness import evaluate
    from saliency_gen.attribution import engine

    x, model = ARRAYS["x"], MODELS[8]
    classes = ARRAYS["y"].astype(np.int64)
    gradient = engine.attribute(model, x, "gradient", classes)
    times_input = engine.attribute(model, x, "grad_x_input", classes)
    np.testing.assert_array_equal(
        measures.input_invariance(model, x, classes, gradient, explain_func="gradient"), 1.0)
    np.testing.assert_array_equal(measures.input_invariance(
        model, x, classes, times_input, explain_func="grad_x_input"), 0.0)
    found = evaluate.per_image(model, x, classes, np.arange(5), "gradient", "input_invariance",
                               evaluate.Options())
    np.testing.assert_array_equal(found["input_invariance"], 1.0)


def test_average_stability_of_linear_and_quadratic_models():
    """Xplique's average stability: a linear model's gradient does not move (0); for
    f = sum(x^2) the map 2x moves by 2 delta, delta uniform in [0, radius] per value, so the
    mean l2 distance is about 2 sqrt(F radius^2 / 3) for F values."""
    import keras

    x = np.ones((2, 4, 4, 3), np.float32)
    linear = linear_model(np.random.default_rng(15).uniform(0.5, 1.5, (48, 2)))
    gradient = np.broadcast_to(linear.layers[-1].get_weights()[0][:, 0].reshape(4, 4, 3),
                               x.shape)
    np.testing.assert_allclose(measures.average_stability(
        linear, x, np.array([0, 0]), gradient, explain_func="gradient"), 0.0, atol=1e-6)
    squares = keras.Sequential([keras.Input((4, 4, 3)), keras.layers.Lambda(lambda t: t * t),
                                keras.layers.Flatten(), keras.layers.Dense(2, use_bias=False)])
    squares.layers[-1].set_weights([np.stack([np.ones(48), np.zeros(48)], 1)])
    found = measures.average_stability(squares, x, np.array([0, 0]), 2 * x,
                                       explain_func="gradient", nb_samples=200)
    np.testing.assert_allclose(found, 2 * np.sqrt(48 * 0.1 ** 2 / 3), rtol=0.03)


def test_mu_fidelity_of_a_linear_model_is_one():
    """Xplique's MuFidelity with the zero baseline: removing cells of a linear logit drops it by
    exactly the map w x summed over them (Spearman 1; the negative map -1), at any chunk."""
    rng = np.random.default_rng(16)
    x = rng.uniform(0.1, 1.0, (2, 4, 4, 3)).astype(np.float32)
    weights = rng.normal(size=(48, 2))
    model = linear_model(weights)
    maps = (weights[:, 0][None] * x.reshape(2, -1)).reshape(2, 4, 4, 3)
    classes = np.zeros(2, np.int64)
    found = measures.mu_fidelity(model, x, classes, maps, grid_size=2, nb_samples=30)
    np.testing.assert_allclose(found, 1.0, atol=1e-6)
    np.testing.assert_allclose(measures.mu_fidelity(model, x, classes, -maps, grid_size=2,
                                                    nb_samples=30), -1.0, atol=1e-6)
    np.testing.assert_array_equal(found, measures.mu_fidelity(
        model, x, classes, maps, grid_size=2, nb_samples=30, batch_size=1))


def _first_distinct_of_stream(key, count: int, size: int, block: int) -> list:
    """The definition, one draw at a time: block j of the stream is keyed by key + (j << 32, 0)."""
    seen: list = []
    for j in range(1000):
        drawn = tf.random.stateless_uniform([block], np.asarray(key) + [j << 32, 0], minval=0,
                                            maxval=count, dtype=tf.int64).numpy()
        for value in drawn:
            if value not in seen and len(seen) < size:
                seen.append(int(value))
        if len(seen) == size:
            return seen
    raise AssertionError("the stream did not give enough distinct values")


def test_the_subset_is_the_first_distinct_draws_alone_or_in_a_chunk_and_uniform():
    keys = tf.constant([[7, 0], [7, 1], [7, 2]], tf.int64)
    image, draw = np.array([0, 1, 2, 0, 1]), np.array([0, 0, 0, 1, 5])
    # default blocks, and blocks of `size` that make most rows draw several
    for count, size, block in ((50, 10, None), (20, 15, 15), (10, 9, 9)):
        got = subsets.subset_indices(keys, tf.constant(image), tf.constant(draw), count, size,
                                     block).numpy()
        want = [_first_distinct_of_stream(keys[i] + [d, 0], count, size,
                                          block or subsets.block_size(count, size))
                for i, d in zip(image, draw)]
        np.testing.assert_array_equal(got, want)
        alone = [subsets.subset_indices(keys, tf.constant(image[i:i + 1]),
                                        tf.constant(draw[i:i + 1]), count, size, block).numpy()
                 for i in range(len(image))]
        np.testing.assert_array_equal(np.concatenate(alone), got)
    # every value as likely: the inclusion counts' chi-square over 4,000 consecutive keys
    count, size, rows = 1024, 32, 4000
    chosen = subsets.subset_indices(tf.constant([[11, 5]], tf.int64), tf.zeros(rows, tf.int32),
                                    tf.range(rows), count, size).numpy()
    counts = np.bincount(chosen.ravel(), minlength=count)
    expected = rows * size / count
    spread = np.sum((counts - expected) ** 2 / expected) / (count - 1)
    assert abs(spread - (1 - size / count)) < 0.2, spread  # sd about 0.045
    assert all(len(set(row)) == size for row in chosen)


class LargestBatch(tf.keras.layers.Layer):
    """Passes its input through and keeps the largest batch it has seen."""

    def build(self, shape):
        self.largest = self.add_weight(shape=(), initializer="zeros", trainable=False,
                                       dtype="int32")

    def call(self, x):
        self.largest.assign(tf.maximum(self.largest, tf.shape(x)[0]))
        return x


def test_a_small_call_runs_no_padded_chunk():
    """A call of 16 images at batch 64 runs the model on 16 items, not on a chunk of 64 (a
    measure of one pass an image ran at a quarter of its ceiling), and 34 items at batch 16 on
    three chunks of 12 (split evenly, a multiple of 4), not three of 16."""
    from faithfulness.measures import perturbation
    from models.formats.adapter import adapt
    seen = LargestBatch()
    model = tf.keras.Sequential([tf.keras.Input((8, 8, 3)), seen, tf.keras.layers.Flatten(),
                                 tf.keras.layers.Dense(3)])
    x = np.random.default_rng(0).normal(size=(34, 8, 8, 3)).astype(np.float32)
    calls = {"outputs": lambda n, batch: perturbation.outputs(model, x[:n], batch),
             "clean scores": lambda n, batch: perturbation.clean_scores(
                 model, x[:n], np.zeros(n, np.int32), batch_size=batch),
             "adapter": lambda n, batch: adapt(model).predict(x[:n], batch)}
    for name, run in calls.items():
        for count, batch, largest in ((16, 64, 16), (34, 16, 12)):
            seen.largest.assign(0)
            run(count, batch)
            assert int(seen.largest.numpy()) == largest, (name, count)
    np.testing.assert_array_equal(perturbation.outputs(model, x, 64),
                                  perturbation.outputs(model, x, 8))
