"""Model zoo: gradient round trip through SavedModel export for every model, structure, errors."""
import json

import keras
import numpy as np
import pytest
import tensorflow as tf

import models
from models.architectures import folding, resnet_v15
from models.formats import exporting, torch_checkpoints
from tests.models import round_trip, test_torch_conversion

SIZE = 32


# Same builder as a tested family member with another depth or width (their layouts are checked
# by the parameter counts of tests/models/test_idsds_zoo.py): no second export round trip.
DEPTH_TWINS = {"resnet34", "resnet101", "resnet152", "wide_resnet50_2", "vgg13", "vgg16_tv",
               "vgg19"}
# Round-tripped with real weights instead: at 224 px (tests/models/test_real_network.py), and
# from PyTorch checkpoints (tests/models/test_torch_conversion.py), each export checked alike.
REAL_WEIGHTS = {"efficientnet_lite0", *(torch_checkpoints.zoo_name(name)
                                        for name in test_torch_conversion.FIXTURE_TABLE)}


@pytest.mark.parametrize("name", sorted(set(models.REGISTRY) - DEPTH_TWINS - REAL_WEIGHTS))
def test_gradient_round_trip_through_export(name, tmp_path):
    side = max(SIZE, models.spec(name).min_size)
    model = models.build(name, 5, (side, side, 3), **dict(models.spec(name).small))
    images = np.random.default_rng(0).normal(0, 40, (3, side, side, 3)).astype(np.float32)
    path = tmp_path / name
    info = models.export(model, path)
    loaded = models.load(path)

    round_trip.assert_export_matches(model, loaded, images, [2, 2, 2])

    assert loaded.name == name and info["name"] == name
    assert loaded.input_shape == (side, side, 3) and loaded.num_classes == 5
    assert loaded.feature_layer == models.FEATURE_LAYER
    assert loaded.preprocessing == models.spec(name).preprocessing
    # a model whose batch norms the export folds has an id of its own (docs/models.md)
    folded = "-folded" if folding.folds(model) else ""
    assert loaded.model_id == f"{name}-{models.weights_digest(model)}{folded}"
    assert info["inference"] == ("folded batch norms" if folded else "keras")
    # (no batch norm and no explicit "same" pad: nothing to fold)
    assert bool(folded) == (name not in ("bcos_resnet50", "plain_cnn", "small_cnn", "vgg16",
                                         "vit_b_16"))


def test_default_signature_maps_images_to_logits(tmp_path):
    model = models.build("small_cnn", 4, (SIZE, SIZE, 3))
    models.export(model, tmp_path / "m")
    raw = tf.saved_model.load(str(tmp_path / "m"))
    images = np.ones((2, SIZE, SIZE, 3), np.float32)
    (output,) = raw.signatures["serving_default"](images=tf.constant(images)).values()
    np.testing.assert_allclose(output.numpy(), model(images).numpy(), rtol=1e-5, atol=1e-6)


def test_a_researchers_keras_model_ending_in_a_softmax_exports_its_logits(tmp_path):
    """A functional Keras model whose last Dense has a softmax activation (most classifiers):
    the export gives the pre-softmax logits (it had failed with 'not connected to inputs', its
    feature layer read from the graph of the model rather than of its softmax-free view); the
    export rebuilds its Keras layers (a Lambda's code is refused); a `.keras` file given as the
    model is one line saying to export it."""
    import keras

    keras.utils.set_random_seed(0)
    inputs = keras.Input((SIZE, SIZE, 3))
    pooled = keras.layers.GlobalAveragePooling2D()(
        keras.layers.Conv2D(4, 3, activation="relu")(inputs))
    head = keras.layers.Dense(3, activation="softmax")
    model = keras.Model(inputs, head(pooled))
    models.export(model, tmp_path / "m")
    images = np.random.default_rng(0).random((2, SIZE, SIZE, 3)).astype(np.float32)
    kernel, bias = head.get_weights()
    logits = keras.Model(inputs, pooled)(images).numpy() @ kernel + bias
    np.testing.assert_allclose(models.load(tmp_path / "m")(images), logits, rtol=1e-5,
                               atol=1e-6)
    # MPRT, the card's randomisation check and the meta-evaluation's weight noise rebuild an
    # export as Keras layers: one outside the zoo keeps its architecture (configuration only)
    # and weights for it (they had said "re-export it", and the card left those checks out)
    rebuilt = models.rebuild(tmp_path / "m")
    np.testing.assert_array_equal(rebuilt(images), model(images))
    assert rebuilt is not model and len(rebuilt.layers) == len(model.layers)
    coded = keras.Sequential([keras.Input((SIZE, SIZE, 3)), keras.layers.Lambda(lambda t: 2 * t),
                              keras.layers.Flatten(), keras.layers.Dense(3)])
    models.export(coded, tmp_path / "coded")
    with pytest.raises(models.UserError, match=r"^cannot rebuild the Keras layers of .*coded "
                                               r"\(ValueError: Requested the deserialization of "
                                               r"a `Lambda` layer"):
        models.rebuild(tmp_path / "coded")  # Keras's safe loading: no code from the file
    class Subclassed(keras.Model):  # no graph to read a feature layer from: one line
        def call(self, images):
            return head(keras.layers.GlobalAveragePooling2D()(images))

    with pytest.raises(models.UserError, match=r"^models.export takes a functional or "
                                               r"Sequential Keras model; Subclassed is "
                                               r"subclassed \(it has no inputs\): wrap it"):
        models.export(Subclassed(), tmp_path / "subclassed")
    model.save(tmp_path / "model.keras")
    with pytest.raises(models.UserError, match=r"model\.keras is a saved Keras model, not an "
                                               r"export folder: export it once"):
        models.load(tmp_path / "model.keras")


def test_resnet50_is_v1_5_as_roar_trained_it():
    model = models.build("resnet50", 1000, (224, 224, 3))
    trainable = sum(int(np.prod(w.shape)) for w in model.trainable_weights)
    assert trainable == 25_557_032  # TF official ResNet-50 v1.5 (no conv biases)
    # The stride sits on the 3x3 convolution, not the first 1x1 (v1.5).
    assert model.get_layer("conv3_block1_1_conv").strides == (1, 1)
    assert model.get_layer("conv3_block1_2_conv").strides == (2, 2)
    assert model.get_layer("conv3_block1_0_conv").strides == (2, 2)
    assert all(not layer.use_bias for layer in model.layers
               if isinstance(layer, keras.layers.Conv2D))
    last_bn = model.get_layer("conv4_block2_3_bn")
    assert np.all(keras.ops.convert_to_numpy(last_bn.gamma) == 0)
    assert np.all(keras.ops.convert_to_numpy(model.get_layer("conv4_block2_2_bn").gamma) == 1)
    assert last_bn.epsilon == 1e-5 and last_bn.momentum == 0.9
    assert model.get_layer("pool1_pool").padding == "same"
    for name in ("conv2_block3_out", "conv3_block4_out", "conv4_block6_out", "conv5_block3_out"):
        model.get_layer(name)  # BAM's block_layer1..4
    assert model.get_layer("predictions").activation.__name__ == "linear"


def test_resnet50_fixed_padding_matches_explicit_computation():
    inputs = keras.Input((9, 9, 1))
    outputs = resnet_v15._conv(inputs, 1, 3, 2, "probe", None)
    layer = keras.Model(inputs, outputs)
    layer.get_layer("probe_conv").set_weights([np.ones((3, 3, 1, 1), np.float32)])
    image = np.arange(81, dtype=np.float32).reshape(1, 9, 9, 1)
    padded = np.pad(image[0, :, :, 0], ((1, 1), (1, 1)))  # (k-1)//2 = 1 before, 1 after
    expected = np.array([[padded[r:r + 3, c:c + 3].sum() for c in range(0, 9, 2)]
                         for r in range(0, 9, 2)])
    np.testing.assert_allclose(layer(image)[0, :, :, 0], expected)


def test_keras_applications_flip_rgb_to_bgr_inside_the_model():
    model = models.build("keras_resnet50", 3, (SIZE, SIZE, 3))
    flip = model.get_layer("rgb_to_bgr")
    x = np.arange(2 * SIZE * SIZE * 3, dtype=np.float32).reshape(2, SIZE, SIZE, 3)
    np.testing.assert_array_equal(flip(x).numpy(), x[..., ::-1])


def test_keras_resnet50_loads_local_weights_file(tmp_path):
    reference = keras.applications.ResNet50(include_top=False, weights=None,
                                            input_shape=(SIZE, SIZE, 3))
    path = str(tmp_path / "resnet50_notop.weights.h5")
    reference.save_weights(path)
    model = models.build("keras_resnet50", 7, (SIZE, SIZE, 3), weights=path)
    for name in ("conv1_conv", "conv4_block3_2_conv", "conv5_block3_3_bn"):
        for ours, theirs in zip(model.get_layer(name).get_weights(),
                                reference.get_layer(name).get_weights()):
            np.testing.assert_array_equal(ours, theirs)
    assert model.output_shape == (None, 7)


def test_pretrained_1000_class_head_is_kept(tmp_path):
    reference = keras.applications.ResNet50(weights=None, input_shape=(SIZE, SIZE, 3),
                                            classifier_activation=None)
    path = str(tmp_path / "resnet50_full.weights.h5")
    reference.save_weights(path)
    model = models.build("keras_resnet50", 1000, (SIZE, SIZE, 3), weights=path)
    images = np.random.default_rng(1).normal(0, 30, (2, SIZE, SIZE, 3)).astype(np.float32)
    np.testing.assert_allclose(model(images).numpy(), reference(images[..., ::-1]).numpy(),
                               rtol=1e-4, atol=1e-4)


def test_feature_layer_falls_back_to_last_4d_layer():
    inputs = keras.Input((16, 16, 3))
    x = keras.layers.Conv2D(4, 3, name="first")(inputs)
    x = keras.layers.Conv2D(4, 3, name="last_conv")(x)
    outputs = keras.layers.Dense(2)(keras.layers.Flatten()(x))
    model = keras.Model(inputs, outputs)
    assert models.feature_layer_name(model) == "last_conv"
    assert models.feature_layer_name(models.build("small_cnn", 2, (SIZE, SIZE, 3))) == \
        "gradcam_features"


def test_weights_digest_tracks_weights():
    first = models.build("small_cnn", 3, (SIZE, SIZE, 3))
    second = models.build("small_cnn", 3, (SIZE, SIZE, 3))
    second.set_weights(first.get_weights())
    assert models.weights_digest(first) == models.weights_digest(second)
    weights = second.get_weights()
    weights[0] = weights[0] + 1.0
    second.set_weights(weights)
    assert models.weights_digest(first) != models.weights_digest(second)


@pytest.mark.parametrize("call, message", [
    (lambda: models.build("resnet51", 10, (32, 32, 3)), "unknown model 'resnet51'; choose one of"),
    (lambda: models.build("small_cnn", 10, (32, 32)), "input_shape must be (height, width, channels)"),
    (lambda: models.build("vgg16", 10, (16, 16, 3)), "vgg16 needs inputs of at least 32x32"),
    (lambda: models.build("vgg16", 10, (32, 32, 1)), "vgg16 takes 3-channel input; got 1"),
    (lambda: models.build("small_cnn", 1, (32, 32, 3)), "num_classes must be an int >= 2"),
    (lambda: models.build("small_cnn", 3, (32, 32, 3), weights="imagenet"),
     "small_cnn has no option weights; its options are width"),
    (lambda: models.load("/nonexistent/model"), "model directory /nonexistent/model does not exist"),
])
def test_clear_one_line_errors(call, message):
    with pytest.raises(models.UserError) as error:
        call()
    assert message in str(error.value)
    assert "\n" not in str(error.value)


def test_load_rejects_foreign_directory_and_wrong_shapes(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(models.UserError, match="is not a model exported by models.export"):
        models.load(tmp_path / "empty")
    model = models.build("small_cnn", 3, (SIZE, SIZE, 3))
    models.export(model, tmp_path / "m")
    with pytest.raises(models.UserError, match="already exists"):
        models.export(model, tmp_path / "m")
    loaded = models.load(tmp_path / "m")
    with pytest.raises(models.ShapeError, match=r"have shape \(2, 16, 16, 3\); expected \[N, 32, 32, 3\]"):
        loaded(np.zeros((2, 16, 16, 3), np.float32))


def test_export_is_atomic(tmp_path, monkeypatch):
    model = models.build("small_cnn", 3, (SIZE, SIZE, 3))

    def killed(*args, **kwargs):  # dies after the SavedModel is written, before the info file
        raise KeyboardInterrupt

    monkeypatch.setattr(json, "dump", killed)
    with pytest.raises(KeyboardInterrupt):
        models.export(model, tmp_path / "m")
    assert list(tmp_path.iterdir()) == []


def test_paths_come_both_or_neither():
    from models.foundation.errors import UserError, require_both_or_neither

    require_both_or_neither(("data_dir", None), ("model_dir", None))  # the synthetic world
    require_both_or_neither(("data_dir", "d"), ("model_dir", "m"))
    with pytest.raises(UserError, match=r"pass both --model_path and --input_pattern, or neither"):
        require_both_or_neither(("model_path", "m"), ("input_pattern", None))


def test_a_loaded_model_holding_another_exports_weights_computes_as_that_export(tmp_path):
    from faithfulness.measures import explaining
    from saliency_gen.attribution import engine

    # small_resnet: batch norms the export folds, read from the variables at each call
    model = models.build("small_resnet", 3, (16, 16, 3))
    models.export(model, tmp_path / "trained")
    model.set_weights([w * 1.5 + 0.01 for w in model.get_weights()])
    models.export(model, tmp_path / "noisy")
    trained, noisy = models.load(tmp_path / "trained"), models.load(tmp_path / "noisy")
    images = np.random.default_rng(0).normal(0, 40, (4, 16, 16, 3)).astype(np.float32)
    labels = np.array([0, 1, 2, 0])

    def outputs(loaded):
        return (np.asarray(loaded(images)),
                *(engine.attribute(loaded, images, method, labels, batch_size=4)
                  for method in ("gradient", "bam:GB", "bam:GC")))

    own, theirs = outputs(trained), outputs(noisy)
    assert not np.array_equal(own[0], theirs[0])
    traces = set(vars(trained)["_kept_builds"])
    with trained.holding(noisy):
        assert trained.held is noisy
        with trained.holding(noisy):  # holding it again: a no-op
            held = outputs(trained)
        rebuilt = explaining.keras_of(trained, "test")  # the noisy export's Keras model
    # no method traced again: only the exchange of weights and that Keras model are new
    assert set(vars(trained)["_kept_builds"]) - traces == {
        ("weights of", noisy), ("rebuilt Keras model", noisy.path)}
    for found, expected in zip(held, theirs):  # the same bytes as the noisy export's own
        np.testing.assert_array_equal(found, expected)
    np.testing.assert_array_equal(rebuilt(images), model(images))
    assert trained.held is None
    for found, expected in zip(outputs(trained), own):  # its own weights back
        np.testing.assert_array_equal(found, expected)
    # a Keras model of the network (the noisy weights, not exported): the same as its export
    assert trained.can_hold(model)
    computing, within = exporting.stand_in(trained, model)
    assert computing is trained
    held = within(lambda: (explaining.keras_of(trained, "test"), *outputs(trained)))()
    assert held[0] is model and trained.held is None
    held = held[1:]
    assert set(vars(trained)["_kept_builds"]) - traces == {
        ("weights of", noisy), ("rebuilt Keras model", noisy.path), ("weights of", model)}
    for found, expected in zip(held, theirs):
        np.testing.assert_array_equal(found, expected)
    assert exporting.content_id(model) == noisy.model_id
    models.export(models.build("small_resnet", 4, (16, 16, 3)), tmp_path / "other")
    other = models.load(tmp_path / "other")  # other classes: not the same network
    assert not trained.can_hold(other)
    wider = models.build("small_resnet", 4, (16, 16, 3))
    assert not trained.can_hold(wider)
    computing, within = exporting.stand_in(trained, wider)  # the source computes itself
    assert computing is wider and within(outputs) is outputs
    with pytest.raises(ValueError, match="cannot hold the weights"):
        with trained.holding(other):
            pass
