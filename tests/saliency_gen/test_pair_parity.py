"""Cross-checks against PAIR `saliency.core` 0.2.1 on a small model (skipped if it is absent)."""
import keras
import numpy as np
import pytest

import models
import saliency_gen
from saliency_gen.attribution.methods import pair

core = pytest.importorskip("saliency.core")


@pytest.fixture(scope="module")
def setup():
    keras.utils.set_random_seed(11)
    model = models.build("small_cnn", 5, (16, 16, 3), width=4)
    images = np.random.default_rng(3).normal(0, 30, (3, 16, 16, 3)).astype(np.float32)
    targets = np.argmax(model.predict(images, verbose=0), axis=1)
    return model, images, targets, pair.as_call_model_function(model)


def _pair(explainer, images, targets, call, **kwargs):
    return np.stack([explainer.GetMask(image, call, {"class": int(t)}, **kwargs)
                     for image, t in zip(images, targets)])


def test_vanilla_gradient_and_grad_x_input_match_pair(setup):
    model, images, targets, call = setup
    reference = _pair(core.GradientSaliency(), images, targets, call)
    ours = saliency_gen.attribute(model, images, "gradient", targets)
    np.testing.assert_allclose(ours, reference, rtol=1e-4, atol=1e-6 * np.abs(reference).max())
    np.testing.assert_allclose(saliency_gen.attribute(model, images, "grad_x_input", targets),
                               reference * images, rtol=1e-4,
                               atol=1e-6 * np.abs(reference * images).max())


def test_integrated_gradients_match_pair(setup):
    model, images, targets, call = setup
    baseline = np.full(images.shape[1:], -20.0, np.float32)
    reference = _pair(core.IntegratedGradients(), images, targets, call, x_baseline=baseline,
                      x_steps=25, batch_size=5)
    ours = saliency_gen.attribute(model, images, "integrated_gradients", targets,
                                  baseline=baseline, steps=25)
    np.testing.assert_allclose(ours, reference, rtol=1e-4, atol=1e-5 * np.abs(reference).max())


def test_grad_cam_matches_pair_at_feature_resolution(setup):
    model, images, targets, call = setup
    reference = _pair(core.GradCam(), images, targets, call, should_resize=False,
                      three_dims=False)
    ours = saliency_gen.attribute(model, images, "grad_cam", targets, cam_upsample="nearest")
    np.testing.assert_allclose(ours[:, ::4, ::4, 0], reference, rtol=1e-4,
                               atol=1e-6 * np.abs(reference).max())


@pytest.mark.parametrize("wrapper, magnitude", [("smoothgrad", False), ("smoothgrad_sq", True)])
def test_smoothgrad_family_agrees_statistically(setup, wrapper, magnitude):
    model, images, targets, call = setup
    samples = 300
    np.random.seed(0)  # PAIR draws from the global numpy generator
    reference = np.stack([core.GradientSaliency().GetSmoothedMask(
        image, call, {"class": int(t)}, stdev_spread=0.15, nsamples=samples, magnitude=magnitude)
        for image, t in zip(images[:1], targets[:1])])
    ours = saliency_gen.attribute(model, images[:1], f"{wrapper}(gradient)", targets[:1],
                                  nsamples=samples, batch_size=100)
    relative = np.linalg.norm(ours - reference) / np.linalg.norm(reference)
    noise_floor = np.linalg.norm(ours - saliency_gen.attribute(
        model, images[:1], f"{wrapper}(gradient)", targets[:1], nsamples=samples, seed=1)) \
        / np.linalg.norm(reference)
    # Two independent Monte-Carlo estimates: PAIR vs ours differ no more than ours vs ours.
    assert relative < 2.0 * noise_floor + 0.02, (relative, noise_floor)
    assert np.corrcoef(ours.ravel(), reference.ravel())[0, 1] > 0.9


def test_pair_only_methods_run_through_the_bridge(setup):
    model, images, targets, _ = setup
    guided_ig = saliency_gen.attribute(model, images[:1], "guided_ig", targets[:1], x_steps=10)
    assert guided_ig.shape == (1, 16, 16, 3) and np.isfinite(guided_ig).all()
    blur_ig = saliency_gen.attribute(model, images[:1], "blur_ig", targets[:1], steps=10)
    assert blur_ig.shape == (1, 16, 16, 3) and np.abs(blur_ig).max() > 0
    xrai = saliency_gen.attribute(model, images[:1], "xrai", targets[:1], pair_batch_size=10,
                                  extra_parameters=core.XRAIParameters(steps=10))
    assert xrai.shape == (1, 16, 16, 3) and np.all(xrai[..., 0] == xrai[..., 2])
    with pytest.raises(models.UserError, match="BlurIG with sqrt=True is wrong"):
        saliency_gen.attribute(model, images[:1], "blur_ig", sqrt=True, pair_batch_size=4)
