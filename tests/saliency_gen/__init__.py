"""Tests of the `saliency_gen` package, and the model they share."""
import keras
import numpy as np


def linear_model(shape, classes=3, seed=0):
    """(model, weights [*shape, classes]): logits w_c . x + b_c, so that every gradient method
    has a closed-form answer."""
    rng = np.random.default_rng(seed)
    inputs = keras.Input(shape)
    outputs = keras.layers.Dense(classes, name="dense")(keras.layers.Flatten()(inputs))
    model = keras.Model(inputs, outputs)
    weights = rng.normal(size=(int(np.prod(shape)), classes)).astype(np.float32)
    model.get_layer("dense").set_weights([weights, rng.normal(size=classes).astype(np.float32)])
    return model, weights.reshape(*shape, classes)
