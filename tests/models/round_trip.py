"""The export round trip, checked one way wherever a test exports a model: the loaded export
gives the live Keras model's logits, features and input gradients."""
import numpy as np
import tensorflow as tf

import models
from models.architectures import folding


def input_gradient(call, images, labels) -> np.ndarray:
    """d(logit of each image's label)/d(image) through `call`."""
    images = tf.convert_to_tensor(images)
    with tf.GradientTape() as tape:
        tape.watch(images)
        score = tf.reduce_sum(tf.gather(call(images), labels, batch_dims=1))
    return tape.gradient(score, images).numpy()


def _close(found, expected, tolerance: float, floor: float) -> None:
    found, expected = np.asarray(found), np.asarray(expected)
    np.testing.assert_allclose(found, expected, rtol=tolerance,
                               atol=floor * float(np.abs(expected).max()))


def assert_export_matches(live, loaded, images, labels, tolerance: float = 1e-5) -> None:
    """`loaded` (models.load of the export of `live`) agrees with `live`'s inference pass (its
    batch norms folded, as the export computes: docs/models.md, "Folded inference") on `images`
    within `tolerance` relative, and within `tolerance` (input gradients: a tenth of it) of each
    quantity's largest magnitude: logits, the Grad-CAM layer's features, and input gradients
    (non-zero: not a vacuous comparison)."""
    features, logits = loaded.features_and_logits(images)
    live_features, live_logits = folding.folded_call(models.features_and_logits_model(live))(
        tf.convert_to_tensor(images))
    _close(logits, live_logits, tolerance, tolerance)
    _close(features, live_features, tolerance, tolerance)
    _close(loaded(images), live_logits, tolerance, tolerance)
    labels = np.asarray(labels, np.int64)
    exported = input_gradient(loaded, images, labels)
    rebuilt = input_gradient(folding.folded_call(live), images, labels)
    assert np.abs(rebuilt).max() > 0, "a zero gradient would make the comparison vacuous"
    _close(exported, rebuilt, tolerance, tolerance / 10)
