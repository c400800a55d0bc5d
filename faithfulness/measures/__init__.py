"""The measures of the evaluation libraries researchers use, under Quantus's names, one call
each (docs/measures.md):

    from faithfulness import measures
    measures.sparseness(model, x_batch, y_batch, a_batch)             # [N], one per image
    measures.pointing_game(model, x_batch, y_batch, a_batch, s_batch)  # needs masks

`x_batch` NHWC images in the model's input space, `y_batch` the classes explained, `a_batch`
maps (N, H, W) or (N, H, W, C), `s_batch` ground-truth masks (N, H, W) for the localisation
family; settings under Quantus's names with Quantus's defaults. `FAMILIES` lists them by
Quantus's families, `SPECS` declares each one (its direction and a line about it).
"""
from models.foundation.lazy import lazy_names

FAMILIES = {  # family -> its measures' modules and names (Quantus 0.6's order)
    "faithfulness": ("faithfulness.measures.faithfulness_family",
                     ("faithfulness_correlation", "faithfulness_estimate", "monotonicity",
                      "pixel_flipping", "region_perturbation", "selectivity", "sufficiency")),
    "complexity": ("faithfulness.measures.complexity_family",
                   ("sparseness", "complexity", "effective_complexity")),
    "axiomatic": ("faithfulness.measures.axiomatic_family",
                  ("completeness", "input_invariance", "non_sensitivity")),
    "robustness": ("faithfulness.measures.robustness_family",
                   ("avg_sensitivity", "consistency", "continuity", "local_lipschitz_estimate",
                    "max_sensitivity",
                    "relative_input_stability", "relative_output_stability")),
    "randomisation": ("faithfulness.measures.randomisation_family", ("mprt", "random_logit")),
    "localisation": ("faithfulness.measures.localisation_family",
                     ("pointing_game", "attribution_localisation", "top_k_intersection",
                      "relevance_mass_accuracy", "relevance_rank_accuracy", "auc")),
    # Xplique's metrics, beside Quantus's families
    "xplique": ("faithfulness.measures.xplique_family", ("average_stability", "mu_fidelity")),
}

_EXPORTS = {name: module for module, names in FAMILIES.values() for name in names}

__all__ = sorted(_EXPORTS)
__getattr__ = lazy_names(__name__, _EXPORTS)


def family_of(name: str) -> str:
    """The Quantus family of the measure `name`."""
    return next(family for family, (_, names) in FAMILIES.items() if name in names)
