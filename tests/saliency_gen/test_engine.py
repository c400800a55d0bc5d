"""The attribution engine: known answers, batching invariance, independence, determinism, errors."""
import keras
import numpy as np
import pytest
import scipy.ndimage
import tensorflow as tf

import models
import saliency_gen
from models.formats.adapter import adapt
from models.foundation import executor
from saliency_gen.attribution.methods import integrated_gradients, rise
from tests.saliency_gen import linear_model

SHAPE = (8, 8, 3)
RNG = np.random.default_rng(0)


def _cnn(classes=4, size=16, seed=1):
    keras.utils.set_random_seed(seed)
    return models.build("small_cnn", classes, (size, size, 3), width=4)


def _images(count, size=16, seed=2):
    return np.random.default_rng(seed).normal(0, 1, (count, size, size, 3)).astype(np.float32)


# ----------------------------------------------------------------------------------------------
# Known answers on a linear model f_c(x) = w_c . x + b_c.


@pytest.fixture(scope="module")
def linear():
    model, weights = linear_model(SHAPE)
    images = RNG.normal(0, 1, (4, *SHAPE)).astype(np.float32)
    targets = np.array([0, 1, 2, 1])
    return model, weights[..., targets].transpose(3, 0, 1, 2), images, targets


def test_linear_gradient_and_grad_x_input(linear):
    model, w, images, targets = linear
    np.testing.assert_allclose(saliency_gen.attribute(model, images, "gradient", targets), w,
                               rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(saliency_gen.attribute(model, images, "grad_x_input", targets),
                               w * images, rtol=1e-5, atol=1e-6)
    # No ReLU: guided backprop is the gradient.
    np.testing.assert_allclose(saliency_gen.attribute(model, images, "guided_backprop", targets),
                               w, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("rule", integrated_gradients.RULES)
def test_linear_ig_is_exact_for_every_rule(linear, rule):
    model, w, images, targets = linear
    baseline = RNG.normal(0, 1, SHAPE).astype(np.float32)
    steps = 6
    result = saliency_gen.attribute(model, images, "integrated_gradients", targets, rule=rule,
                                    steps=steps, baseline=baseline)
    factor = 1 - 1 / steps if rule == "captum_trapezoid" else 1.0
    np.testing.assert_allclose(result, factor * w * (images - baseline), rtol=1e-4, atol=1e-5)


def test_linear_noise_wrappers(linear):
    model, w, images, targets = linear
    options = dict(nsamples=5, seed=3)
    np.testing.assert_allclose(saliency_gen.attribute(
        model, images, "smoothgrad(gradient)", targets, **options), w, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(saliency_gen.attribute(
        model, images, "smoothgrad_sq(gradient)", targets, **options), w ** 2, rtol=1e-5,
        atol=1e-6)
    np.testing.assert_allclose(saliency_gen.attribute(
        model, images, "vargrad(gradient)", targets, **options), 0, atol=1e-9)


def test_linear_occlusion_sums_window_effects(linear):
    model, w, images, targets = linear
    size, stride, value = 3, 2, 0.5
    result = saliency_gen.attribute(model, images, "occlusion", targets, size=size,
                                    stride=stride, value=value)
    expected = np.zeros_like(images)
    for n in range(len(images)):
        for r in range(0, SHAPE[0] - size + 1, stride):
            for c in range(0, SHAPE[1] - size + 1, stride):
                window = (slice(r, r + size), slice(c, c + size))
                expected[n][window] += np.sum(w[n][window] * (images[n][window] - value))
    np.testing.assert_allclose(result, expected, rtol=1e-4, atol=1e-4)


def test_quadratic_ig_is_exact_for_symmetric_rules():
    a = RNG.normal(size=(12, 12)).astype(np.float32)
    a = (a + a.T) / 2

    class Quadratic(keras.Model):
        def call(self, x):
            flat = tf.reshape(x, [-1, 12])
            value = 0.5 * tf.reduce_sum(flat * tf.matmul(flat, a), axis=1, keepdims=True)
            return tf.concat([value, -value], axis=1)

    inputs = keras.Input((2, 2, 3))
    model = keras.Model(inputs, Quadratic()(inputs))
    x = RNG.normal(size=(3, 2, 2, 3)).astype(np.float32)
    flat = x.reshape(3, 12)
    exact = (0.5 * flat * (flat @ a)).reshape(x.shape)
    for rule, factor in (("pair_linspace", 0.5), ("trapezoid", 0.5), ("riemann_middle", 0.5),
                         ("gausslegendre", 0.5), ("riemann_left", 5 / 12),
                         ("riemann_right", 7 / 12)):
        result = saliency_gen.attribute(model, x, "integrated_gradients", [0, 0, 0], rule=rule,
                                        steps=6)
        np.testing.assert_allclose(result, exact * factor / 0.5, rtol=1e-4, atol=1e-5,
                                   err_msg=rule)


def test_ig_completeness_on_a_relu_cnn():
    model = _cnn()
    images = _images(3) * 40
    baseline = np.zeros(images.shape[1:], np.float32)
    targets = np.argmax(model.predict(images, verbose=0), axis=1)
    logits = model.predict(images, verbose=0)[np.arange(3), targets]
    base_logits = model.predict(np.repeat(baseline[None], 3, 0), verbose=0)[np.arange(3), targets]
    for rule in ("pair_linspace", "riemann_middle", "gausslegendre"):
        maps = saliency_gen.attribute(model, images, "integrated_gradients", targets, rule=rule,
                                      steps=128, baseline=baseline, batch_size=128)
        gap = np.abs(maps.reshape(3, -1).sum(1) - (logits - base_logits))
        assert np.all(gap <= 0.01 * np.abs(logits - base_logits)), (rule, gap)


def test_gap_head_grad_cam_equals_xgrad_cam_closed_form():
    model = _cnn(size=16)
    images = _images(3)
    targets = np.array([0, 1, 3])
    features = models.features_and_logits_model(model)(images)[0].numpy()
    kernel = model.get_layer("predictions").get_weights()[0]
    expected = np.maximum(np.einsum("nhwk,kn->nhw", features, kernel[:, targets]), 0) / 16
    upsample = dict(cam_upsample="nearest")  # 4x4 features -> 16x16 by exact replication
    grad_cam = saliency_gen.attribute(model, images, "grad_cam", targets, **upsample)
    xgrad_cam = saliency_gen.attribute(model, images, "xgrad_cam", targets, **upsample)
    np.testing.assert_allclose(grad_cam[:, ::4, ::4, 0], expected, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(xgrad_cam, grad_cam, rtol=1e-5, atol=1e-6)
    assert np.all(grad_cam[..., 0] == grad_cam[..., 2])  # repeated over channels


def test_grad_cam_on_the_input_layer_weighs_each_channel_by_its_mean_gradient():
    model = _cnn(size=16)
    images, targets = _images(3), np.array([0, 1, 3])
    gradients = saliency_gen.attribute(model, images, "gradient", targets)
    weights = gradients.mean(axis=(1, 2), keepdims=True)  # alpha_c: the feature map is x
    expected = np.maximum((weights * images).sum(axis=-1), 0)
    found = saliency_gen.attribute(model, images, "grad_cam", targets, feature_layer="images")
    np.testing.assert_allclose(found[..., 0], expected, rtol=1e-5, atol=1e-6 * expected.max())


def test_cam_normalisations_and_legacy_upsampling():
    model = _cnn(size=16)
    images = _images(2)
    raw = saliency_gen.attribute(model, images, "grad_cam", cam_upsample="nearest")
    peak = saliency_gen.attribute(model, images, "grad_cam", cam_upsample="nearest",
                                  cam_normalise="max")
    for n in range(2):
        if raw[n].max() > 0:
            np.testing.assert_allclose(peak[n], raw[n] / raw[n].max(), rtol=1e-5, atol=1e-7)
    legacy = saliency_gen.attribute(model, images, "bam:GC")
    cam = peak[:, ::4, ::4, 0]
    reference = tf.raw_ops.ResizeBilinear(images=cam[..., None], size=[16, 16],
                                          align_corners=False, half_pixel_centers=False)
    np.testing.assert_allclose(legacy[..., 0], reference[..., 0], rtol=1e-5, atol=1e-6)


def test_guided_grad_cam_is_guided_backprop_times_normalised_cam():
    model = _cnn(size=16)
    images = _images(2)
    guided = saliency_gen.attribute(model, images, "guided_backprop")
    cam = saliency_gen.attribute(model, images, "grad_cam", cam_normalise="max")
    product = saliency_gen.attribute(model, images, "guided_grad_cam")
    np.testing.assert_allclose(product, guided * cam, rtol=1e-5, atol=1e-9)


def test_sg_grad_cam_pp_closed_form_on_a_gap_head():
    model = _cnn(size=16)
    images = _images(2) * 30
    targets = np.array([1, 3])
    features = models.features_and_logits_model(model)(images)[0].numpy().astype(np.float64)
    kernel = model.get_layer("predictions").get_weights()[0].astype(np.float64)
    gradient = kernel[:, targets].T[:, None, None, :] / 16  # GAP over 4x4: input-independent
    alpha = gradient ** 2 / (2 * gradient ** 2 + features.sum(axis=(1, 2), keepdims=True)
                             * gradient ** 3 + 1e-8)
    weights = 16 * alpha * np.maximum(gradient, 0)  # sum over the 4x4 positions of a constant
    expected = np.maximum((weights * features).sum(-1), 0)
    ours = saliency_gen.attribute(model, images, "sg_grad_cam_pp", targets, nsamples=5,
                                  cam_upsample="nearest")
    np.testing.assert_allclose(ours[:, ::4, ::4, 0], expected, rtol=1e-4, atol=1e-6)
    torchcam = saliency_gen.attribute(model, images, "sg_grad_cam_pp", targets, nsamples=5,
                                      cam_upsample="nearest", variant="torchcam")
    assert not np.allclose(torchcam, ours)  # activations of the last noisy sample


def test_bam_ggc_sg_is_the_product_of_its_smoothed_parts():
    model = _cnn(size=16)
    images = _images(2) * 30
    product = saliency_gen.attribute(model, images, "bam:GGC-SG", nsamples=3)
    parts = [saliency_gen.attribute(model, images, name, nsamples=3)
             for name in ("bam:GB-SG", "bam:GC-SG")]
    np.testing.assert_allclose(product, parts[0] * parts[1], rtol=1e-6)


def test_centre_gaussian_is_one_at_the_centre_and_exp_minus_half_one_sigma_away():
    images = np.random.default_rng(0).uniform(size=(2, 9, 13, 3)).astype(np.float32)
    result = saliency_gen.attribute(None, images, "centre_gaussian")
    assert result.shape == images.shape and np.array_equal(result[0], result[1])  # image-free
    assert result[0, 4, 6, 0] == pytest.approx(1.0)
    # sigma = side / 4: 2.25 rows, 3.25 columns; two columns from the centre: exp(-0.5 (2/3.25)^2)
    assert result[0, 4, 8, 2] == pytest.approx(np.exp(-0.5 * (2 / 3.25) ** 2), rel=1e-5)
    assert result[0, 0, 6, 1] == pytest.approx(np.exp(-0.5 * (4 / 2.25) ** 2), rel=1e-5)


def test_constant_is_ones_of_the_images_shape():
    images = np.random.default_rng(0).uniform(size=(2, 5, 7, 3)).astype(np.float32)
    result = saliency_gen.attribute(None, images, "constant")
    assert result.shape == images.shape and np.all(result == 1.0)


def test_sobel_equals_scipy():
    images = _images(2, size=12)
    result = saliency_gen.attribute(None, images, "sobel")
    for n in range(2):
        np.testing.assert_allclose(result[n], scipy.ndimage.sobel(images[n], axis=0), atol=1e-5)


def test_rise_masks_match_skimage_and_constant_model_answer():
    from skimage.transform import resize

    grids, rows, cols = rise.mask_factors(5, 4, 0.3, 10, 12, seed=7)
    full = rise.masks(5, 4, 0.3, 10, 12, seed=7)
    offsets = np.random.default_rng([7, 0x215E])
    offsets.random((5, 4, 4))
    dy, dx = offsets.integers(0, 3, 5), offsets.integers(0, 3, 5)
    for i in range(5):
        direct = resize(grids[i].astype(float), (15, 15), order=1, mode="reflect",
                        anti_aliasing=False)
        np.testing.assert_allclose(full[i], direct[dy[i]:dy[i] + 10, dx[i]:dx[i] + 12], atol=1e-6)
    # A constant model (softmax r for class c) gives S = r * sum_i M_i / (n * p1).
    inputs = keras.Input((10, 12, 3))
    constant = keras.layers.Lambda(lambda x: 0 * tf.reduce_sum(x, [1, 2, 3])[:, None]
                                   + tf.constant([[1.0, 2.0, 0.5]]))(inputs)
    model = keras.Model(inputs, constant)
    r = np.exp(2.0) / np.exp([1.0, 2.0, 0.5]).sum()
    maps = saliency_gen.attribute(model, _images(2, 10)[:, :, :10, :].repeat(2, 2)[:, :, :12],
                                  "rise", [1, 1], n_masks=5, cells=4, p1=0.3, seed=7)
    np.testing.assert_allclose(maps[0, ..., 0], r * full.sum(0) / (5 * 0.3), rtol=1e-5)


def test_random_control_is_keyed_by_seed_and_id():
    images = _images(3, size=8)
    first = saliency_gen.attribute(None, images, "random", seed=1, ids=[10, 11, 12])
    again = saliency_gen.attribute(None, images[::-1], "random", seed=1, ids=[12, 11, 10])
    np.testing.assert_array_equal(first, again[::-1])
    assert 0 <= first.min() and first.max() < 1 and first.std() > 0.2
    assert not np.array_equal(first, saliency_gen.attribute(None, images, "random", seed=2,
                                                            ids=[10, 11, 12]))


# ----------------------------------------------------------------------------------------------
# Batching, independence, determinism.

INVARIANCE = [
    ("gradient", {}), ("integrated_gradients", {"steps": 5}),
    ("smoothgrad_sq(integrated_gradients)", {"steps": 3, "nsamples": 4}),
    ("vargrad(gradient)", {"nsamples": 6}), ("smoothgrad(guided_backprop)", {"nsamples": 3}),
    ("grad_cam_pp", {}), ("guided_grad_cam", {}), ("occlusion", {"size": 6, "stride": 5}),
    ("rise", {"n_masks": 9, "cells": 4}), ("smoothgrad_sq(layer_cam)", {"nsamples": 3}),
    ("sg_grad_cam_pp", {"nsamples": 3, "variant": "torchcam"}),
]


@pytest.mark.parametrize("method, params", INVARIANCE, ids=[m for m, _ in INVARIANCE])
def test_results_do_not_depend_on_batch_size(method, params):
    model = _cnn()
    images = _images(3) * 30
    results = [saliency_gen.attribute(model, images, method, batch_size=size, seed=5, **params)
               for size in (1, 7, 64)]
    scale = np.abs(results[0]).max()
    assert scale > 0
    for other in results[1:]:  # oneDNN's kernels round differently per batch size (~1e-6)
        np.testing.assert_allclose(other, results[0], rtol=1e-5, atol=1e-5 * scale)


def test_an_image_is_independent_of_its_batch_mates_and_keyed_by_id():
    model = _cnn()
    images = _images(4) * 30
    method = "smoothgrad_sq(integrated_gradients)"
    params = dict(steps=3, nsamples=4, seed=9, batch_size=5)
    first = saliency_gen.attribute(model, images, method, ids=[5, 6, 7, 8], **params)
    changed = images.copy()
    changed[2] = _images(1, seed=99)[0] * 30
    second = saliency_gen.attribute(model, changed, method, ids=[5, 6, 7, 8], **params)
    np.testing.assert_allclose(second[[0, 1, 3]], first[[0, 1, 3]], rtol=1e-5, atol=1e-9)
    assert not np.allclose(second[2], first[2])
    permuted = saliency_gen.attribute(model, images[::-1], method, ids=[8, 7, 6, 5], **params)
    np.testing.assert_allclose(permuted[::-1], first, rtol=1e-5, atol=1e-9)


def test_same_seed_same_numbers_other_seed_other_noise():
    model = _cnn()
    images = _images(2) * 30
    one = saliency_gen.attribute(model, images, "smoothgrad(gradient)", nsamples=3, seed=1)
    two = saliency_gen.attribute(model, images, "smoothgrad(gradient)", nsamples=3, seed=1)
    three = saliency_gen.attribute(model, images, "smoothgrad(gradient)", nsamples=3, seed=2)
    np.testing.assert_array_equal(one, two)
    assert not np.allclose(one, three)


def test_vargrad_is_the_population_variance_of_the_samples():
    model = _cnn()
    images = _images(2) * 30
    options = dict(nsamples=5, seed=4)
    mean = saliency_gen.attribute(model, images, "smoothgrad(gradient)", **options)
    square = saliency_gen.attribute(model, images, "smoothgrad_sq(gradient)", **options)
    variance = saliency_gen.attribute(model, images, "vargrad(gradient)", **options)
    np.testing.assert_allclose(variance, np.maximum(square - mean ** 2, 0),
                               atol=1e-6 * square.max())
    assert variance.min() >= 0


# ----------------------------------------------------------------------------------------------
# Guided backprop and exported models.


def test_guided_backprop_matches_gradient_override_map_and_differs_from_gradient():
    model = _cnn()
    images = _images(2) * 30
    targets = np.array([1, 2])
    ours = saliency_gen.attribute(model, images, "guided_backprop", targets)

    @tf.RegisterGradient("GuidedReluForTest")
    def _guided_relu(op, grad):
        return tf.where(grad > 0, grad, 0.0) * tf.cast(op.outputs[0] > 0, grad.dtype)

    @tf.function
    def reference(x):
        with tf.compat.v1.get_default_graph().gradient_override_map({"Relu": "GuidedReluForTest"}):
            logits = model(x, training=False)
            score = tf.reduce_sum(tf.gather(logits, targets, batch_dims=1))
        return tf.gradients(score, x)[0]

    np.testing.assert_allclose(ours, reference(tf.constant(images)).numpy(), rtol=1e-5,
                               atol=1e-7)
    plain = saliency_gen.attribute(model, images, "gradient", targets)
    assert not np.allclose(ours, plain, atol=1e-3 * np.abs(plain).max())


def test_compiled_models_work_for_guided_and_cam_methods():
    model = _cnn()
    model.compile(keras.optimizers.Adam(1e-3), "mse")  # clone_model serialises the optimizer
    images = _images(2) * 30
    assert np.abs(saliency_gen.attribute(model, images, "guided_backprop")).max() > 0
    assert saliency_gen.attribute(model, images, "guided_grad_cam").shape == images.shape


def test_a_live_model_keeps_its_adapter_and_traces_its_predictor_once():
    model = _cnn()
    images = _images(3) * 30
    first = saliency_gen.predict(model, images)
    np.testing.assert_array_equal(saliency_gen.predict(model, images), first)
    saliency_gen.attribute(model, images, "gradient")  # targets predicted: the same predictor
    adapter = adapt(model)
    assert adapt(model) is adapter
    # the predictor's key holds its chunk: a call of 3 images at batch 64 runs chunks of 3
    predictor = adapter.traced(("predict", executor.chunk_size(3, 64)), lambda: None)
    assert predictor is not None and predictor.experimental_get_tracing_count() == 1


def test_each_feature_layer_of_a_live_model_gets_its_own_grad_cam():
    model, fresh = _cnn(), _cnn()
    images, targets = _images(2) * 30, np.array([0, 1])
    last = saliency_gen.attribute(model, images, "grad_cam", targets)
    first_conv = saliency_gen.attribute(model, images, "grad_cam", targets,
                                        feature_layer="block1_conv2")
    np.testing.assert_array_equal(
        first_conv, saliency_gen.attribute(fresh, images, "grad_cam", targets,
                                           feature_layer="block1_conv2"))
    assert np.abs(first_conv - last).max() > 1e-3 * np.abs(last).max()


def test_exported_model_gives_the_same_maps(tmp_path):
    model = _cnn()
    models.export(model, tmp_path / "m")
    loaded = models.load(tmp_path / "m")
    images = _images(2) * 30
    for method in ("gradient", "guided_backprop", "grad_cam_pp", "bam:GGC"):
        live = saliency_gen.attribute(model, images, method)
        reloaded = saliency_gen.attribute(loaded, images, method)
        np.testing.assert_allclose(reloaded, live, rtol=1e-5, atol=1e-6 * np.abs(live).max(),
                                   err_msg=method)
    assert loaded.info["has_guided"]
    without = models.load(tmp_path / "m")
    without.info["has_guided"] = False  # as for a model whose ReLUs cannot be gated
    without.info["guided_unavailable"] = "layer 'x' is a leaky ReLU"
    with pytest.raises(models.UserError, match="has no guided-backprop endpoint: layer 'x'"):
        saliency_gen.attribute(without, images, "guided_backprop")


def test_softmax_models_are_explained_through_their_logits():
    model = _cnn()
    logits_layer = model.get_layer("predictions")
    probabilities = keras.layers.Softmax()(model.output)
    with_softmax = keras.Model(model.input, probabilities)
    images = _images(2) * 30
    np.testing.assert_allclose(saliency_gen.attribute(with_softmax, images, "gradient"),
                               saliency_gen.attribute(model, images, "gradient"), rtol=1e-6)
    assert logits_layer.activation.__name__ == "linear"


# ----------------------------------------------------------------------------------------------
# Names and errors.


def test_scheme_names_resolve_to_their_settings():
    spec = saliency_gen.resolve("roar:ig_smooth_2")
    assert (spec.base, spec.wrapper) == ("integrated_gradients", "smoothgrad_sq")
    assert spec.options["baseline"] == "black" and spec.options["nsamples"] == 25
    assert saliency_gen.resolve("roar:IG_SG_2", legacy_ig_sg_sq_baseline=True).options[
        "baseline"] == "zeros"
    assert saliency_gen.resolve("bam:SG").wrapper == "smoothgrad_sq"
    gc = saliency_gen.resolve("bam:GC").options
    assert gc["cam_normalise"] == "max" and gc["cam_upsample"] == "tf1_bilinear"
    ig_u = saliency_gen.resolve("idsds:IG-U abs")
    assert ig_u.options["rule"] == "gausslegendre" and ig_u.options["steps"] == 50
    assert ig_u.options["baseline"] == "uniform" and ig_u.transform == "abs"
    assert ig_u.reduce == "sum"
    assert saliency_gen.resolve("idsds:IxG-SG").options["noise"] == "absolute"
    assert len(saliency_gen.METHODS) == len(set(saliency_gen.METHODS)) > 100


def test_black_baselines_follow_the_input_space():
    model, _ = linear_model(SHAPE)
    # its own draw: the module's RNG gives other images when pytest-xdist splits the file
    images = np.random.default_rng(395).normal(0, 1, (1, *SHAPE)).astype(np.float32)
    roar = saliency_gen.attribute(model, images, "roar:IG", [0], steps=2)
    bam = saliency_gen.attribute(model, images, "bam:IG", [0], steps=2)
    gradient = saliency_gen.attribute(model, images, "gradient", [0])
    for found, expected, tolerance in (
            (roar, gradient * (images - [-2.1179, -2.0357, -1.8044]), 1e-3),
            (bam, gradient * (images + [123.68, 116.78, 103.94]), 1e-4)):
        # (a float32 floor for the elements near zero)
        np.testing.assert_allclose(found, expected, rtol=tolerance,
                                   atol=1e-5 * np.abs(expected).max())


@pytest.mark.parametrize("call, message", [
    (lambda m, x: saliency_gen.attribute(m, x, "deep_lift"), "unknown method 'deep_lift'"),
    (lambda m, x: saliency_gen.attribute(m, x, "gradient", steps=3),
     "method gradient has no parameter steps"),
    (lambda m, x: saliency_gen.attribute(m, x, "integrated_gradients", rule="simpson"),
     "unknown IG rule 'simpson'"),
    (lambda m, x: saliency_gen.attribute(m, x, "gradient", [0, 9]),
     "a target class is outside [0, 4)"),
    (lambda m, x: saliency_gen.attribute(m, x, "gradient", np.eye(4)[[0, 1]]),
     "targets have shape (2, 4); expected one class per image, [2]"),
    (lambda m, x: saliency_gen.attribute(m, x, "gradient", batch_size=2.5),
     "batch_size must be an integer of at least 1; got 2.5"),
    (lambda m, x: saliency_gen.attribute(m, x, "smoothgrad(gradient)", seed=1.5),
     "seed must be a non-negative integer; got 1.5"),
    (lambda m, x: saliency_gen.attribute(m, x, "gradient", [0.5, 1.0]),
     "targets must be integer classes; got float64 values [0.5, 1.0]"),
    (lambda m, x: saliency_gen.attribute(m, x, "gradient", ["cat", "dog"]),
     "targets must be integer classes; got <U3 values ['cat', 'dog']"),
    (lambda m, x: saliency_gen.attribute(m, x[:, :8], "gradient"),
     "the model takes [N, 16, 16, 3]"),
    (lambda m, x: saliency_gen.attribute(m, x, "integrated_gradients", baseline="black"),
     "the black baseline needs the model's preprocessing"),
    (lambda m, x: saliency_gen.attribute(m, x, "vargrad(random)"), "takes no noise wrapper"),
    (lambda m, x: saliency_gen.attribute(m, x, "idsds:Foo"), "unknown IDSDS method 'Foo'"),
    (lambda m, x: saliency_gen.attribute(m, x, "smoothgrad_cube(gradient)"),
     "unknown noise wrapper 'smoothgrad_cube'"),
    (lambda m, x: saliency_gen.attribute(m, x, "integrated_gradients(steps=50)"),
     "settings are not part of a method's name; pass them as keyword arguments, "
     "saliency_gen.attribute(model, images, 'integrated_gradients', targets, steps=50)"),
    (lambda m, x: saliency_gen.attribute(m, np.where(np.arange(2)[:, None, None, None] == 1,
                                                     np.nan, x), "gradient"),
     "image 1 contains NaN or infinite values"),
    (lambda m, x: saliency_gen.attribute(m, x, "roar:IG_SG_3"), "unknown ROAR method 'IG_SG_3'"),
    (lambda m, x: saliency_gen.attribute(m, x, "grad_cam", feature_layer=m.layers[-2].name),
     "gives [None, 2], not a feature map [N, H, W, C]"),
])
def test_clear_errors(call, message):
    inputs = keras.Input((16, 16, 3))
    x = keras.layers.Conv2D(2, 3, activation="relu")(inputs)
    model = keras.Model(inputs, keras.layers.Dense(4)(keras.layers.GlobalAveragePooling2D()(x)))
    with pytest.raises(models.UserError) as error:
        call(model, _images(2))
    assert message in str(error.value)


PLACEMENT = """
import models, tensorflow as tf
cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
import keras, numpy as np, saliency_gen
from faithfulness import Deletion
from roar import masking, road_outcomes
keras.utils.set_random_seed(0)
model = models.build("small_cnn", 10, (32, 32, 3), width=4)
images = np.random.default_rng(0).random((6, 32, 32, 3)).astype(np.float32)
labels = np.arange(6) % 10
found = []
for device in ("/cpu:0", "/cpu:1"):
    with tf.device(device):
        assert tf.zeros([1]).device.endswith(device[1:].upper()), tf.zeros([1]).device
        maps = saliency_gen.attribute(model, images, "smoothgrad_sq(integrated_gradients)",
                                      labels, nsamples=3, steps=4, seed=1, batch_size=5)
        deletion = Deletion(output_activation="softmax")(model, images, maps.sum(-1), labels)
        road = road_outcomes.outcomes(model, images, labels, np.arange(6), maps,
                                      masking.MaskConfig(fill="noisy_linear", ranking="pixel"),
                                      road_outcomes.settings(("morf",), (0.3,)), batch_size=4)
    found.append([maps, deletion["dauc"], *[v[0] for v in road.values()]])
assert all(np.array_equal(a, b) for a, b in zip(*found))
print("the same on both devices")
"""


def test_placement_on_another_device_does_not_change_values():
    """Two logical devices (the CPU split in two, as two accelerators would be): the engine's
    maps, the scorer's deletion curves and ROAD's outcomes computed under each are the same
    bytes, so nothing in them is tied to one device."""
    import subprocess
    import sys

    from tests import REPO

    done = subprocess.run([sys.executable, "-c", PLACEMENT], cwd=REPO, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0 and "the same on both devices" in done.stdout, done.stderr[-3000:]
