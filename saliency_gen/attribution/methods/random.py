"""The random control (docs/saliency.md, "Random"): U(0, 1) per element, keyed on (seed, image
id), so the same image gets the same map wherever it appears."""
from typing import Any

import tensorflow as tf

from saliency_gen.attribution.units import Context, Method, Plan, register

SALT = 0x5A17


@register
class Random(Method):
    name = "random"
    summary = "U(0, 1) per element, keyed on seed and image id (control)"
    views = ()
    wrappable = False  # a control

    def seeded(self, options: dict) -> bool:
        return True

    def plan(self, options: dict, context: Context) -> Any:
        shape = context.shape
        salt = tf.constant(int(context.seed) ^ SALT, tf.int64)

        def draw(items):
            keys = tf.stack([tf.fill(tf.shape(items.ids), salt), items.ids], axis=1)
            return tf.map_fn(lambda key: tf.random.stateless_uniform(shape, key), keys,
                             fn_output_signature=tf.float32)

        return Plan(1, draw)
