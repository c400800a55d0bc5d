"""The constant map, a model- and image-free control of the metrics (docs/saliency.md,
"Methods"): ones everywhere, so it ranks no pixel above another. Metrics that order pixels break
its ties their own way; metrics that correlate the map with something are undefined on it."""
from typing import Any

import tensorflow as tf

from saliency_gen.attribution.units import Context, Method, Plan, register


@register
class Constant(Method):
    name = "constant"
    summary = "ones everywhere (model-free control: no pixel ranks above another)"
    views = ()

    def plan(self, options: dict, context: Context) -> Any:
        return Plan(1, lambda items: tf.ones_like(items.x))
