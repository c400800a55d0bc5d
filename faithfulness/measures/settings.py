"""The settings of the peers' measures as flags (docs/measures.md, "In the binaries and on the
card"), declared once, light (no TensorFlow): `faithfulness.evaluate`'s Config is built on
them, and `faithfulness.measures.protocol` hands the ones given to the chosen measure.
"""
import dataclasses
from typing import Any, Optional

from models.foundation.cli import option
from models.foundation.rules import Checked, at_least


def _setting(help: str, rule: Any = None) -> Any:  # noqa: A002
    """A measure's setting: unset by default (the measure's own default), recorded in the
    origin under "measure_settings" where given (`MeasureSettings.measure_settings`)."""
    return option(None, help, origin=False, rule=rule)


@dataclasses.dataclass(frozen=True)
class MeasureSettings(Checked):
    """The settings of the peers' measures (`faithfulness.measures`), under Quantus's names;
    each left unset keeps the chosen measure's own default (docs/measures.md), and one the
    measure does not take is refused. The origin records the ones given, under
    "measure_settings", so an origin without them is the one it was."""

    abs: Optional[bool] = _setting("Measures: absolute values of the maps first.")
    normalise: Optional[bool] = _setting("Measures: divide the maps by their largest |a|.")
    softmax: Optional[bool] = _setting("Measures: score softmax probabilities, not logits.")
    perturb_baseline: Optional[str] = _setting("Measures: black, white or a number.")
    features_in_step: Optional[int] = _setting("Measures: values replaced per step.",
                                               at_least(1))
    patch_size: Optional[int] = _setting("Measures: side of a patch.", at_least(1))
    order: Optional[str] = _setting("region_perturbation: morf, lerf or random.")
    regions_evaluation: Optional[int] = _setting("region_perturbation: patches replaced.",
                                                 at_least(1))
    k: Optional[int] = _setting("top_k_intersection: the k highest features.", at_least(1))
    eps: Optional[float] = _setting("Measures: threshold of a negligible value.")
    weighted: Optional[bool] = _setting("Localisation: weight by the mask's share.")
    concept_influence: Optional[bool] = _setting("top_k_intersection: divide by the mask's "
                                                 "share.")
    positive_attributions: Optional[bool] = _setting("attribution_localisation: clip negative "
                                                     "values.")
    max_size: Optional[float] = _setting("attribution_localisation: largest mask share.")
    rtol: Optional[float] = _setting("completeness: relative tolerance.")
    nr_samples: Optional[int] = _setting("Robustness: noisy samples per image.", at_least(1))
    lower_bound: Optional[float] = _setting("Robustness: noise bound.")
    upper_bound: Optional[float] = _setting("Robustness: noise upper bound.")
    perturb_mean: Optional[float] = _setting("local_lipschitz_estimate: noise mean.")
    perturb_std: Optional[float] = _setting("local_lipschitz_estimate: noise deviation.")
    eps_min: Optional[float] = _setting("Relative stabilities: smallest denominator.")
    return_nan_when_prediction_changes: Optional[bool] = _setting(
        "Robustness: NaN when a sample changes the prediction.")
    nr_runs: Optional[int] = _setting("faithfulness_correlation: random subsets.",
                                      at_least(2))
    subset_size: Optional[int] = _setting("faithfulness_correlation: values per subset.",
                                          at_least(1))
    layer_order: Optional[str] = _setting("mprt: top_down, bottom_up or independent.")
    return_last_correlation: Optional[bool] = _setting("mprt: the last layer's correlation, "
                                                       "not the mean over the layers.")
    num_classes: Optional[int] = _setting("random_logit: classes to draw the other from.",
                                          at_least(2))
    threshold: Optional[float] = _setting("sufficiency: largest distance of a close map.")
    distance_func: Optional[str] = _setting("sufficiency: scipy's cdist metric.")
    input_shift: Optional[float] = _setting("input_invariance: the shift of the input.")
    discretise: Optional[str] = _setting("consistency: top_n_sign or first_n_sign.")
    n: Optional[int] = _setting("consistency: the values a discretised map keeps.",
                                at_least(1))
    nr_steps: Optional[int] = _setting("continuity: translations.", at_least(1))
    nb_samples: Optional[int] = _setting("average_stability: neighbours per image.",
                                         at_least(1))
    radius: Optional[float] = _setting("average_stability: the neighbours' largest offset.")
    distance: Optional[str] = _setting("average_stability: l2 or l1.")
    grid_size: Optional[int] = _setting("mu_fidelity: cells per side.", at_least(1))
    subset_percent: Optional[float] = _setting("mu_fidelity: chance a cell is removed.")
    baseline_mode: Optional[float] = _setting("mu_fidelity: the removed cells' value.")
    activation: Optional[str] = _setting("mu_fidelity: None (logits) or softmax.")
    perturb_patch_sizes: Optional[tuple] = _setting("infidelity: patch sides, each dividing "
                                                    "the image's sides.")
    n_perturb_samples: Optional[int] = _setting("infidelity: repetitions (fixed baselines "
                                                "repeat the same value).", at_least(1))
    n_max_percentage: Optional[float] = _setting("sensitivity_n: share of the pixels the "
                                                 "steps reach.")
    cumulative_sums: Optional[bool] = _setting("sensitivity_n: the removed set's sum (off: "
                                               "Quantus 0.6's last-step sum).")
    segmentation_method: Optional[str] = _setting("irof: slic or felzenszwalb.")
    percentages: Optional[tuple] = _setting("road: percentages of pixels imputed.")
    noise: Optional[float] = _setting("road: deviation of the imputation noise.")
    noise_magnitude: Optional[float] = _setting("smooth_mprt: noise deviation per image "
                                                "range.")
    n_bins: Optional[int] = _setting("efficient_mprt: histogram bins of the entropy.",
                                     at_least(2))
    layer_names: Optional[tuple] = _setting("relative_representation_stability: the layers "
                                            "read.")
    k_splits: Optional[int] = _setting("mege, reco: folds (each model trained without one).",
                                       at_least(2))
    fold_epochs: Optional[int] = _setting("mege, reco: epochs of each fold's model.",
                                          at_least(1))
    layer_indices: Optional[tuple] = _setting("relative_representation_stability: the layers "
                                              "read, by index.")

    def measure_settings(self) -> dict:
        """{name: value} of the settings given (what a report records)."""
        return {field.name: getattr(self, field.name)
                for field in dataclasses.fields(MeasureSettings)
                if getattr(self, field.name) is not None}
