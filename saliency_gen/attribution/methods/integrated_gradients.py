"""Integrated gradients with every quadrature rule the references use (docs/saliency.md,
"Integrated gradients").

One work item per path point: `w_i (x - x') * grad f(x' + a_i (x - x'))`, summed over the
points by the engine.
"""
from typing import Any, Sequence

import numpy as np
import tensorflow as tf

from models.foundation.errors import UserError
from saliency_gen.attribution.baselines import baseline_image
from saliency_gen.attribution.units import Context, Method, Param, Plan, gradient_of, register

RULES = ("pair_linspace", "riemann_left", "riemann_right", "riemann_middle", "trapezoid",
         "captum_trapezoid", "gausslegendre")


def alphas_and_weights(rule: str, steps: int) -> tuple:
    """(alphas, weights) of an IG quadrature rule."""
    m = int(steps)
    if rule == "pair_linspace":
        return np.linspace(0, 1, m), np.full(m, 1.0 / m)
    if rule == "riemann_left":
        return np.arange(m) / m, np.full(m, 1.0 / m)
    if rule == "riemann_right":
        return np.arange(1, m + 1) / m, np.full(m, 1.0 / m)
    if rule == "riemann_middle":
        return (np.arange(m) + 0.5) / m, np.full(m, 1.0 / m)
    if rule in ("trapezoid", "captum_trapezoid"):
        if m < 2:
            raise UserError(f"the {rule} rule needs at least 2 steps")
        weights = np.full(m, 1.0 / (m - 1) if rule == "trapezoid" else 1.0 / m)
        weights[[0, -1]] /= 2
        return np.linspace(0, 1, m), weights
    nodes, weights = np.polynomial.legendre.leggauss(m)
    return (nodes + 1) / 2, weights / 2


@register
class IntegratedGradients(Method):
    name = "integrated_gradients"
    summary = "(x - x') times the path integral of the gradient"
    params = {
        "steps": Param(25, minimum=1, doc="path points"),
        "rule": Param("pair_linspace", choices=RULES, label="IG rule", doc="quadrature rule"),
        "baseline": Param("zeros", doc="zeros, mean, black, uniform or an array"),
        "baseline_range": Param((-1.0, 1.0), doc="(low, high) of the uniform baseline"),
    }

    def steps(self, options: dict, shape: Sequence[int]) -> int:
        return int(options["steps"])

    def seeded(self, options: dict) -> bool:
        return options["baseline"] == "uniform"

    def plan(self, options: dict, context: Context) -> Any:
        alphas, weights = alphas_and_weights(options["rule"], options["steps"])
        alphas = tf.constant(alphas, tf.float32)
        weights = tf.constant(weights, tf.float32)
        logits = context.model.logits

        def integrated(items):
            alpha = tf.gather(alphas, items.step)[:, None, None, None]
            weight = tf.gather(weights, items.step)[:, None, None, None]
            difference = items.x - items.aux
            gradient = gradient_of(logits, items.aux + alpha * difference, items.targets)
            return weight * difference * gradient

        baseline = baseline_image(options["baseline"], context.shape, context.preprocessing,
                                  context.seed, options["baseline_range"])
        return Plan(int(alphas.shape[0]), integrated, aux=baseline)
