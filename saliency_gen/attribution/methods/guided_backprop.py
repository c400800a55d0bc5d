"""Guided backpropagation: the input gradient through guided ReLUs (docs/saliency.md,
"Methods"; the guided view of a model is `models.architectures.guided`)."""
from typing import Any

from saliency_gen.attribution.units import Context, Method, Plan, gradient_of, register


@register
class GuidedBackprop(Method):
    name = "guided_backprop"
    summary = "the input gradient through guided ReLUs"
    views = ("guided",)

    def plan(self, options: dict, context: Context) -> Any:
        guided = context.model.guided_logits
        return Plan(1, lambda items: gradient_of(guided, items.x, items.targets))
