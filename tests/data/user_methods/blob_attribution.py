"""A researcher's attribution method outside the package, in the plain-function form: the input
gradient times a fixed Gaussian blob centred on the image (tests put this folder on
PYTHONPATH and name it "blob_attribution:gradient_times_blob")."""
import tensorflow as tf


def blob(height, width, sigma=0.5):
    """[H, W] Gaussian bump exp(-r^2 / (2 sigma^2)) on a [-1, 1]^2 grid."""
    rows = tf.linspace(-1.0, 1.0, height)[:, None]
    cols = tf.linspace(-1.0, 1.0, width)[None, :]
    return tf.exp(-(rows ** 2 + cols ** 2) / (2.0 * sigma ** 2))


def gradient_times_blob(model, images, targets):
    """The input gradient of the target logit, weighted by a centred Gaussian blob."""
    with tf.GradientTape() as tape:
        tape.watch(images)
        score = tf.reduce_sum(tf.gather(model(images), targets, batch_dims=1))
    gradient = tape.gradient(score, images)
    return gradient * blob(images.shape[1], images.shape[2])[None, :, :, None]
