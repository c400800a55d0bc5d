"""A method whose first call in a test fails once (then works): the scale-out tests use it to
check that a retried Beam bundle neither drops nor duplicates an example. The marker file named
by $FLAKY_MARKER is created by the failing call; later calls (any process) succeed."""
import os

import tensorflow as tf


def gradient_failing_once(model, images, targets):
    """The input gradient of the target logit; raises once per marker file."""
    marker = os.environ.get("FLAKY_MARKER")
    if marker and not os.path.exists(marker):
        open(marker, "w").close()
        raise RuntimeError("injected failure of a bundle's first attempt")
    with tf.GradientTape() as tape:
        tape.watch(images)
        score = tf.reduce_sum(tf.gather(model(images), targets, batch_dims=1))
    return tape.gradient(score, images)
