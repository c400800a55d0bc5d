"""Vanilla gradient and gradient x input (docs/saliency.md, "Methods")."""
from typing import Any

from saliency_gen.attribution.units import Context, Method, Plan, gradient_of, register


@register
class Gradient(Method):
    """d f_c(x) / dx, the target's pre-softmax logit differentiated at the input."""

    name = "gradient"
    summary = "the input gradient of the target logit"

    def plan(self, options: dict, context: Context) -> Any:
        logits = context.model.logits
        return Plan(1, lambda items: gradient_of(logits, items.x, items.targets))


@register
class GradientTimesInput(Method):
    """d f_c(x) / dx * x (under a noise wrapper: the noisy x, as Captum)."""

    name = "grad_x_input"
    summary = "the input gradient times the input"

    def plan(self, options: dict, context: Context) -> Any:
        logits = context.model.logits
        return Plan(1, lambda items: gradient_of(logits, items.x, items.targets) * items.x)
