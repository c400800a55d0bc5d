"""A researcher's own attribution method in the plain-function form every benchmark accepts
(docs/report_card.md, "Your method on the card"): put this folder on PYTHONPATH and name it
`my_methods:gradient_times_input`, e.g.

    PYTHONPATH=examples python scripts/report_card.py --methods=bam:GC,random,oracle,my_methods:gradient_times_input
"""
import tensorflow as tf


def gradient_times_input(model, images, targets):
    """Gradient x input of the target logit: model, [N, H, W, C] images, [N] targets -> maps."""
    with tf.GradientTape() as tape:
        tape.watch(images)
        score = tf.reduce_sum(tf.gather(model(images), targets, batch_dims=1))
    return tape.gradient(score, images) * images
