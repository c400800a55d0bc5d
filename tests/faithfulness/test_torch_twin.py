"""The PyTorch twins, built from a Keras model's layer graph, compute the Keras model's logits:
the zoo's plain_cnn and small_resnet (the Captum peer of scripts/bench_saliency.py runs on
them) and a narrow EfficientNet-Lite0 (TensorFlow "same" padding, depthwise convolutions, ReLU6,
shortcuts: Quantus's side of scripts/bench_measures.py on the real network). Skipped without
torch (`pip install torch==2.13.0`)."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")

import keras  # noqa: E402

import models  # noqa: E402
from faithfulness import torch_twin  # noqa: E402


@pytest.mark.parametrize("name, options", [("plain_cnn", {}), ("small_resnet", {}),
                                           ("efficientnet_lite0", {"width": 0.25})])
def test_the_twin_gives_the_keras_logits(name, options):
    keras.utils.set_random_seed(3)
    model = models.build(name, 7, (32, 32, 3), **options)
    for layer in model.layers:  # batch norm statistics away from (0, 1), so that they count
        if isinstance(layer, keras.layers.BatchNormalization):
            channels = layer.moving_mean.shape[0]
            layer.moving_mean.assign(np.random.default_rng(0).normal(0, 0.5, channels))
            layer.moving_variance.assign(np.random.default_rng(1).uniform(0.5, 2.0, channels))
    images = np.random.default_rng(2).normal(0, 1, (3, 32, 32, 3)).astype(np.float32)
    twin = torch_twin.twin(model)
    with torch.no_grad():
        theirs = twin(torch.tensor(images.transpose(0, 3, 1, 2))).numpy()
    ours = np.asarray(model(images, training=False))
    assert np.abs(ours).max() > 1e-2  # a network that computes something
    np.testing.assert_allclose(theirs, ours, rtol=1e-4, atol=1e-4 * np.abs(ours).max())


def test_a_layer_the_twin_would_compute_otherwise_is_refused():
    """A channels-first layer and a dense layer on an image (Keras: its last axis; in NCHW the
    width) are refused by name, not twinned into other values."""
    channels_first = keras.Sequential([keras.Input((3, 8, 8)), keras.layers.Conv2D(
        4, 3, data_format="channels_first", name="first")])
    with pytest.raises(ValueError, match="'first' is channels first"):
        torch_twin.twin(channels_first)
    dense_on_image = keras.Sequential([keras.Input((8, 8, 3)), keras.layers.Conv2D(4, 3),
                                       keras.layers.Dense(5, name="head")])
    with pytest.raises(ValueError, match="dense layer 'head' takes"):
        torch_twin.twin(dense_on_image)(torch.zeros(1, 3, 8, 8))
