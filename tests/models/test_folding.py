"""models.architectures.folding: a functional model's inference pass with its conv + batch-norm
pairs folded and its "same" zero pads merged (docs/models.md, "Folded inference")."""
import keras
import numpy as np
import tensorflow as tf

from models.architectures import folding


def _network():
    """Every case once: a TensorFlow-"same" pad before a stride-2 convolution with a bias and a
    batch norm; a depthwise convolution (multiplier 2) and its batch norm; a 1x1 convolution
    whose batch norm has neither scale nor centre; a convolution read by its batch norm and by
    an addition (not folded); a symmetric pad where "same" would pad one side (not merged)."""
    layers = keras.layers
    images = keras.Input((16, 16, 3))
    x = layers.ZeroPadding2D(((0, 1), (0, 1)), name="same_pad")(images)
    x = layers.Conv2D(8, 3, strides=2, use_bias=True, name="stem")(x)
    x = layers.ReLU(max_value=6.0)(layers.BatchNormalization(name="stem_bn")(x))
    y = layers.DepthwiseConv2D(3, padding="same", depth_multiplier=2, use_bias=False,
                               name="depthwise")(x)
    y = layers.ReLU()(layers.BatchNormalization(epsilon=1e-3, name="depthwise_bn")(y))
    y = layers.Conv2D(8, 1, use_bias=False, name="project")(y)
    y = layers.BatchNormalization(scale=False, center=False, name="project_bn")(y)
    shared = layers.Conv2D(8, 1, name="shared")(y)
    y = layers.Add()([layers.BatchNormalization(name="shared_bn")(shared), shared])
    y = layers.ZeroPadding2D(((1, 1), (1, 1)), name="symmetric_pad")(y)
    y = layers.Conv2D(4, 3, strides=2, name="after_symmetric_pad")(y)
    y = layers.GlobalAveragePooling2D()(y)
    model = keras.Model(images, layers.Dense(5)(y))
    rng = np.random.default_rng(0)
    for layer in model.layers:
        if isinstance(layer, layers.BatchNormalization):  # statistics far from the identity
            layer.set_weights([
                rng.uniform(0.5, 2.0, w.shape) if "variance" in v.path or "gamma" in v.path
                else rng.normal(0.0, 0.5, w.shape) for w, v in zip(layer.get_weights(),
                                                                    layer.weights)])
    return model


def test_folded_pairs_are_exactly_the_foldable_ones():
    norms, pads = folding.foldable(_network())
    assert sorted((conv.name, norm.name) for conv, norm in norms.items()) == [
        ("depthwise", "depthwise_bn"), ("project", "project_bn"), ("stem", "stem_bn")]
    assert [(pad.name, conv.name) for pad, conv in pads.items()] == [("same_pad", "stem")]


def test_the_folded_pass_computes_the_models_logits_from_its_current_weights():
    model = _network()
    call = folding.folded_call(model)
    x = tf.constant(np.random.default_rng(1).normal(size=(4, 16, 16, 3)), tf.float32)
    expected = model(x, training=False).numpy()
    assert np.abs(expected).max() > 0.1 and call(x).shape == expected.shape == (4, 5)
    np.testing.assert_allclose(call(x).numpy(), expected, rtol=0,
                               atol=1e-5 * np.abs(expected).max())
    bn = model.get_layer("depthwise_bn")  # read at every call: a changed statistic is followed
    bn.moving_mean.assign(bn.moving_mean + 1.0)
    moved = model(x, training=False).numpy()
    assert np.abs(moved - expected).max() > 1e-2
    np.testing.assert_allclose(call(x).numpy(), moved, rtol=0, atol=1e-5 * np.abs(moved).max())


def test_a_model_with_nothing_to_fold_runs_as_keras_runs_it():
    images = keras.Input((8, 8, 3))
    model = keras.Model(images, keras.layers.Dense(3)(keras.layers.Flatten()(
        keras.layers.Conv2D(4, 3, activation="relu")(images))))
    x = tf.constant(np.random.default_rng(2).normal(size=(2, 8, 8, 3)), tf.float32)
    assert not folding.folds(model) and folding.folds(_network())
    np.testing.assert_array_equal(folding.folded_call(model)(x).numpy(),
                                  model(x, training=False).numpy())
