"""Native explainers' known answers: BagNet patch evidence and B-cos contributions sum to the
logit (minus the bias), Rollout of identity attention gives the patches nothing and of uniform
attention gives them equal shares; a model without the explainer is a one-line error. Exported
models explain as the live ones: tests/models/test_torch_conversion.py checks it on the export of
each converted checkpoint (BagNet, B-cos, Chefer's LRP)."""
import keras
import numpy as np
import pytest
import tensorflow as tf

import models
import saliency_gen
from models.architectures import bcos, native_explainers
from models.foundation.errors import UserError

SIDE = 64
TARGETS = np.array([1, 3, 0])


def _build(name, classes=5):
    """The small variant with seeded weights (not whatever the tests before left the global
    random state at)."""
    keras.utils.set_random_seed(0)
    return models.build(name, classes, (SIDE, SIDE, 3), **dict(models.spec(name).small))


def _images(count=3):
    return np.random.default_rng(0).uniform(size=(count, SIDE, SIDE, 3)).astype(np.float32)


def test_bagnet_patch_evidence_sums_to_the_logit():
    model = _build("bagnet33")
    images = _images()
    logits = model(images).numpy()[np.arange(3), TARGETS]
    bias = model.get_layer("fc").bias.numpy()[TARGETS]
    patches = native_explainers.bagnet_evidence(model, tf.constant(images),
                                                tf.constant(TARGETS)).numpy()
    assert patches.shape == (3, 4, 4)  # 64 px: 4 x 4 patches of 33 px (stride 8)
    np.testing.assert_allclose(patches.sum(axis=(1, 2)) + bias, logits, rtol=1e-5, atol=1e-4)
    maps = native_explainers.explain("BagNet", model, images, TARGETS).numpy()
    np.testing.assert_allclose(maps.sum(axis=(1, 2)) + bias, logits, rtol=1e-4, atol=1e-3)
    assert np.std(patches) > 1e-3  # not a constant map


def test_bcos_contributions_sum_to_the_logit_minus_its_bias():
    model = _build("bcos_resnet50")
    images = _images()
    for layer in model.layers:  # gains of 4: features of order 10 instead of 1e-4
        if isinstance(layer, bcos.UncenteredBatchNorm):
            layer.gamma.assign(np.full(layer.gamma.shape, 4.0, np.float32))
    # Align the classifier with the features so that the logits are far from the bias (random
    # B-cos weights give |cos| ~ 1/16 and logits within 1e-3 of it: a vacuous check).
    features = models.features_and_logits_model(model)(images)[0].numpy().mean(axis=(0, 1, 2))
    rng = np.random.default_rng(1)
    kernel = features[:, None] + rng.normal(0, 0.3 * np.abs(features).mean(), (len(features), 5))
    model.get_layer("fc").kernel.assign(kernel[None, None].astype(np.float32))
    logits = model(images).numpy()[np.arange(3), TARGETS]
    maps = native_explainers.explain("Bcos", model, images, TARGETS).numpy()
    assert np.abs(logits - bcos.logit_bias(5)).min() > 0.1
    np.testing.assert_allclose(maps.sum(axis=(1, 2)), logits - bcos.logit_bias(5), rtol=1e-5,
                               atol=1e-4)
    # The plain input gradient is not the contribution map: explanation mode matters.
    with tf.GradientTape() as tape:
        x = tf.constant(images)
        tape.watch(x)
        score = tf.reduce_sum(tf.gather(model(x), TARGETS, batch_dims=1))
    plain = (tape.gradient(score, x) * x).numpy().sum(axis=(1, 2, 3))
    assert np.abs(plain - maps.sum(axis=(1, 2))).max() > 1e-3


def test_rollout_of_identity_and_uniform_attention():
    tokens = 5
    identity = [tf.eye(tokens, batch_shape=[1, 2]) for _ in range(3)]
    joint = native_explainers.attention_rollout(identity).numpy()
    np.testing.assert_allclose(joint[0], np.eye(tokens), atol=1e-7)  # patches get nothing
    uniform = [tf.fill([1, 2, tokens, tokens], 1.0 / tokens) for _ in range(3)]
    row = native_explainers.attention_rollout(uniform).numpy()[0, 0, 1:]
    np.testing.assert_allclose(row, np.full(tokens - 1, row[0]), rtol=1e-6)
    assert row[0] > 0


def test_vit_with_constant_attention_has_a_constant_rollout_map(tmp_path):
    model = _build("vit_b_16")
    for index in range(2):  # zero queries and keys: every attention row is uniform
        layer = model.get_layer(f"blocks_{index}_attn_qkv")
        layer.kernel.assign(np.zeros(layer.kernel.shape, np.float32))
    maps = native_explainers.explain("Rollout", model, _images(), TARGETS).numpy()
    np.testing.assert_allclose(maps, np.full_like(maps, maps[0, 0, 0]), rtol=1e-5)
    trained_like = _build("vit_b_16")
    varied = native_explainers.explain("Rollout", trained_like, _images(), TARGETS).numpy()
    assert varied.std() > 0 and varied.shape == (3, SIDE, SIDE)


def test_a_model_without_the_explainer_is_a_one_line_error():
    model = models.build("small_cnn", 5, (SIDE, SIDE, 3), width=4)
    with pytest.raises(UserError, match="no native Bcos explainer; it offers none"):
        saliency_gen.attribute(model, _images(), "idsds:Bcos", targets=TARGETS)


def test_chefer_lrp_conserves_relevance_through_every_block():
    from models.architectures import chefer_lrp

    model = models.build("vit_b_16", 5, (32, 32, 3), patch=8, dim=32, depth=3, heads=2)
    images = np.random.default_rng(0).normal(size=(3, 32, 32, 3)).astype(np.float32)
    _, _, totals, _ = chefer_lrp.relevance(model, tf.constant(images), tf.constant(TARGETS))
    for total in totals:  # the one-hot target's relevance 1 reaches every block's input
        np.testing.assert_allclose(total.numpy(), 1.0, atol=5e-4)  # float32 over 3 blocks
    maps = native_explainers.explain("CheferLRP", model, images, TARGETS).numpy()
    other = native_explainers.explain("CheferLRP", model, images, (TARGETS + 1) % 5).numpy()
    assert maps.min() >= 0 and np.abs(maps - other).max() > 1e-6  # class-dependent


def test_applicable_explainers_follow_the_architecture():
    from faithfulness import evaluate

    vit_names = evaluate.explainers_for("vit_b_16")
    assert {"idsds:Rollout", "idsds:CheferLRP"} <= set(vit_names)
    assert not any("CAM" in name for name in vit_names)
    assert {"idsds:Bcos", "idsds:Grad-CAM"} <= set(evaluate.explainers_for("bcos_resnet50"))
    assert evaluate.explainers_for("resnet18")[-1] == "idsds:Layer-CAM"  # no native explainer
    images = _images(4)
    results = evaluate.evaluate(_build("bagnet33"), images, np.array([0, 1, 2, 3]), np.arange(4),
                                ["idsds:BagNet", "idsds:Grad-CAM"], "single_deletion",
                                evaluate.Options(batch_size=16))
    for name in ("idsds:BagNet", "idsds:Grad-CAM"):
        (summary,) = results[name].values()
        assert -1 <= summary["mean"] <= 1 and len(summary["per_image"]) == 4
