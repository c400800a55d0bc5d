"""The random control (docs/saliency.md, "Random"): U(0, 1) per element, keyed on (seed, image
id), so the same image gets the same map wherever it appears."""
from typing import Any

import tensorflow as tf

from models.foundation import keyed_random
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
            return keyed_random.rows_uniform(keys, shape)

        return Plan(1, draw)
