"""The measures of the evaluation libraries researchers use, under Quantus's names, one call
each (docs/measures.md):

    from faithfulness import measures
    measures.sparseness(model, x_batch, y_batch, a_batch)             # [N], one per image
    measures.pointing_game(model, x_batch, y_batch, a_batch, s_batch)  # needs masks

`x_batch` NHWC images in the model's input space, `y_batch` the classes explained, `a_batch`
maps (N, H, W) or (N, H, W, C), `s_batch` ground-truth masks (N, H, W) for the localisation
family; settings under Quantus's names with Quantus's defaults. `FAMILIES` lists them by
Quantus's families (`MODULES`: the modules that hold them), each module's `SPECS` declares its
measures (direction and a line about each).
"""
import sys
from typing import Any

from faithfulness.measures.quantus_call import accepting_quantus_call
from models.foundation import provenance
from models.foundation.lazy import lazy_names

MODULES: dict[str, dict[str, tuple[str, ...]]] = {  # family -> {module: its measures}
    "faithfulness": {
        "faithfulness.measures.faithfulness_family": (
            "faithfulness_correlation", "faithfulness_estimate", "monotonicity",
            "pixel_flipping", "region_perturbation", "selectivity", "sufficiency"),
        "faithfulness.measures.faithfulness_sums": (
            "infidelity", "monotonicity_correlation", "sensitivity_n"),
        "faithfulness.measures.faithfulness_removal": ("irof", "road")},
    "complexity": {"faithfulness.measures.complexity_family": (
        "sparseness", "complexity", "effective_complexity")},
    "axiomatic": {"faithfulness.measures.axiomatic_family": (
        "completeness", "input_invariance", "non_sensitivity")},
    "robustness": {"faithfulness.measures.robustness_family": (
        "avg_sensitivity", "consistency", "continuity", "local_lipschitz_estimate",
        "max_sensitivity", "relative_input_stability", "relative_output_stability",
        "relative_representation_stability")},
    "randomisation": {"faithfulness.measures.randomisation_family": (
        "mprt", "smooth_mprt", "efficient_mprt", "random_logit")},
    "localisation": {"faithfulness.measures.localisation_family": (
        "pointing_game", "attribution_localisation", "top_k_intersection",
        "relevance_mass_accuracy", "relevance_rank_accuracy", "auc", "focus")},
    # Xplique's metrics, beside Quantus's families
    "xplique": {"faithfulness.measures.xplique_family": ("average_stability", "mu_fidelity"),
                "faithfulness.measures.xplique_generalisation": ("mege", "reco")},
}
FAMILIES = {family: tuple(name for names in modules.values() for name in names)
            for family, modules in MODULES.items()}  # family -> its measures
_EXPORTS = {name: module for modules in MODULES.values()
            for module, names in modules.items() for name in names}

__all__ = sorted(_EXPORTS)
_imported = lazy_names(__name__, _EXPORTS)


def __getattr__(name: str) -> Any:
    """A measure, imported on first use and taking also a Quantus call's arguments
    (`quantus_call`: channel_first, return_aggregate, ...); a submodule as it is."""
    value = _imported(name)
    if name in _EXPORTS:
        value = accepting_quantus_call(value)
        setattr(sys.modules[__name__], name, value)
    return value


# The version of a measure's code where a change of it changed the values, named in the origins
# of its outputs (card cells, faithfulness.evaluate reports); rename it at every such change, so
# no output mixes two (docs/architecture.md, "Outputs and provenance").
CODE = {"faithfulness_correlation": "first distinct draws of integers, gathered sums"}


def code_settings(name: str) -> dict:
    """{provenance.MEASURE_CODE: its code's version} for a measure in `CODE`, else {}."""
    return {provenance.MEASURE_CODE: CODE[name]} if name in CODE else {}


# the measures that read a ground-truth mask per image (focus makes its own: mosaics)
MASKED = tuple(name for name in FAMILIES["localisation"] if name != "focus")


def module_of(name: str) -> str:
    """The module that holds the measure `name`."""
    return _EXPORTS[name]


def family_of(name: str) -> str:
    """The Quantus family of the measure `name`."""
    return next(family for family, names in FAMILIES.items() if name in names)
