"""Quantus 0.6's values of the measures on fixed inputs, stored for the cross-checks
(docs/measures.md, "Agreement with Quantus"): `python -m scripts.quantus_reference`.

Runs in Quantus's own environment, not the project's (Quantus 0.6 calls `np.trapz`, gone in
NumPy 2.4): a Python with quantus==0.6.0, numpy<2.4, torch==2.13.0 (CPU) and absl-py, started
in the repository's root, e.g.

    python3 -m venv /tmp/qenv && /tmp/qenv/bin/pip install quantus==0.6.0 'numpy<2.4' \\
        torch==2.13.0 absl-py
    /tmp/qenv/bin/python -m scripts.quantus_reference

It draws the inputs from --seed (NHWC images, tie-free maps with one and three channels,
rectangular masks), hands them to Quantus channel first, and writes the inputs and every
value to --output (JSON); tests/faithfulness/test_measures.py compares the project's measures
with them, so the tests need neither Quantus nor its NumPy.
"""
import dataclasses
import datetime
import os
import warnings
from typing import Any

import numpy as np

from models.foundation.cli import option, run_binary
from models.foundation.files import write_json
from models.foundation.rules import Checked

# measure -> (Quantus's class, the settings of each case beyond its defaults, maps)
CASES: dict[str, tuple[str, list[dict], tuple[str, ...]]] = {
    "sparseness": ("Sparseness", [{}, {"normalise": False}], ("one", "three")),
    "complexity": ("Complexity", [{}, {"normalise": False}], ("one", "three")),
    "effective_complexity": ("EffectiveComplexity", [{}, {"eps": 0.3}], ("one", "three")),
    "pointing_game": ("PointingGame", [{}, {"abs": True}], ("one",)),
    "attribution_localisation": ("AttributionLocalisation",
                                 [{}, {"abs": False, "positive_attributions": True}], ("one",)),
    "top_k_intersection": ("TopKIntersection", [{"k": 10}, {"k": 20, "concept_influence": True}],
                           ("one",)),
    "relevance_mass_accuracy": ("RelevanceMassAccuracy", [{}, {"abs": True}], ("one",)),
    "relevance_rank_accuracy": ("RelevanceRankAccuracy", [{}, {"abs": True}], ("one",)),
    "auc": ("AUC", [{}, {"abs": True}], ("one",)),
    # tie-free: three-channel maps, or one-channel maps whose steps take whole pixels (the
    # channels of a pixel tie, and Quantus's sort leaves their order unspecified)
    "pixel_flipping": ("PixelFlipping",
                       [{"features_in_step": 4}, {"features_in_step": 8, "softmax": False},
                        {"features_in_step": 16, "return_auc_per_sample": True},
                        {"features_in_step": 4, "perturb_baseline": "white"}], ("three",)),
    "faithfulness_estimate": ("FaithfulnessEstimate",
                              [{"features_in_step": 4}, {"features_in_step": 16, "softmax": True,
                                                         "abs": True}], ("three",)),
    "selectivity": ("Selectivity", [{"patch_size": 4}, {"patch_size": 2, "softmax": False}],
                    ("three", "one")),
    "region_perturbation": ("RegionPerturbation",
                            [{"patch_size": 4}, {"patch_size": 2, "order": "lerf",
                                                 "regions_evaluation": 5}], ("three", "one")),
    "completeness": ("Completeness", [{}, {"normalise": False}], ("three",)),
    "non_sensitivity": ("NonSensitivity", [{}, {"eps": 1e-3}], ("three", "one")),
    "consistency": ("Consistency", [{"discretise": "first_n_sign"}], ("three", "one")),
    "sufficiency": ("Sufficiency", [{}, {"threshold": 0.95}],
                    ("three", "one")),
}
# cases through an explainer (the stored model's gradients) with the tolerances the test
# allows: random draws (Quantus's np.random, keyed draws here) agree in distribution only
RANDOM_CASES: dict[str, tuple[str, dict, float, float]] = {  # class, settings, rtol, atol
    "avg_sensitivity": ("AvgSensitivity", {"nr_samples": 1000, "lower_bound": 0.1}, 0.05, 0),
    "max_sensitivity": ("MaxSensitivity", {"nr_samples": 1000, "lower_bound": 0.1}, 0.15, 0),
    "local_lipschitz_estimate": ("LocalLipschitzEstimate", {"nr_samples": 1000}, 0.15, 0),
    # deterministic (translations), through the explainer: exact
    "continuity": ("Continuity", {"nr_steps": 3}, 1e-4, 1e-6),  # no translation by 0
    # a correlation over 400 random subsets: its sampling error is about 0.05
    "faithfulness_correlation": ("FaithfulnessCorrelation",
                                 {"nr_runs": 400, "subset_size": 16,
                                  "return_aggregate": False}, 0, 0.15),
}
EXPLAINED = ("avg_sensitivity", "max_sensitivity", "local_lipschitz_estimate", "continuity")
# the relative stabilities' maxima are too heavy-tailed to compare in distribution (a ratio
# with 1 / x and 1 / a inside): their objectives are compared on Quantus's own noisy inputs
OBJECTIVES = {"relative_input_stability": "relative_input_stability_objective",
              "relative_output_stability": "relative_output_stability_objective",
              # its formula, on the logits as the representations (the frameworks list a
              # model's layers differently: docs/measures.md)
              "relative_representation_stability":
                  "relative_representation_stability_objective"}


def objective_cases(arrays: dict) -> list:
    """Quantus's per-sample objectives of the relative stabilities on three noisy copies of
    the images (its own noise, U(0.02, 0.2)), with the inputs they were given."""
    import quantus
    import torch

    rng = np.random.default_rng(1)
    x = np.transpose(arrays["x"], (0, 3, 1, 2))
    moved = (x + rng.uniform(0.02, 0.2, x.shape)).astype(np.float32)
    model = torch_model(arrays)
    a, a_moved = (torch_gradient(model, images, arrays["y"]) for images in (x, moved))
    with torch.no_grad():
        logits, moved_logits = (model(torch.tensor(images)).numpy() for images in (x, moved))
    arrays.update(moved=np.transpose(moved, (0, 2, 3, 1)),
                  moved_gradient=np.transpose(a_moved, (0, 2, 3, 1)), logits=logits,
                  moved_logits=moved_logits)
    cases = []
    for name, method in OBJECTIVES.items():
        metric = getattr(quantus, CASES_OBJECTIVE_CLASSES[name])(disable_warnings=True)
        values = getattr(metric, method)(*((x, moved) if "input" in name else
                                           (logits, moved_logits)), a, a_moved)
        if name == "relative_representation_stability":  # (representations, then maps)
            values = getattr(metric, method)(logits, moved_logits, a, a_moved)
        cases.append({"measure": name, "objective": True, "values": _plain(values)})
    return cases


CASES_OBJECTIVE_CLASSES = {"relative_input_stability": "RelativeInputStability",
                           "relative_output_stability": "RelativeOutputStability",
                           "relative_representation_stability":
                               "RelativeRepresentationStability"}
# measure -> the cases on 6 x 6 images with one-channel maps (steps of 12 = 4 whole pixels)
SMALL_CASES = {
    "pixel_flipping": [{"features_in_step": 12}, {"features_in_step": 12,
                                                   "return_auc_per_sample": True}],
    "faithfulness_estimate": [{"features_in_step": 12}],
    "selectivity": [{"patch_size": 4}],  # a grid padded by one on each side
    "region_perturbation": [{"patch_size": 4, "regions_evaluation": 3}],
}


# measures added later, run after the others: Quantus draws from NumPy's global generator even
# where a fixed baseline is asked (`get_baseline_dict` draws its "uniform" entry every call),
# so cases run before the random ones would change those ones' stored draws
LATER_CASES: dict[str, tuple[str, list[dict], tuple[str, ...]]] = {
    "focus": ("Focus", [{}, {"abs": True}], ("one", "three")),
    "infidelity": ("Infidelity", [{}, {"perturb_patch_sizes": [2, 4], "n_perturb_samples": 1,
                                       "normalise": True}], ("three",)),
    # Quantus's own sums (the last step's values only: docs/measures.md)
    "sensitivity_n": ("SensitivityN", [{"features_in_step": 4, "cumulative_sums": False},
                                       {"features_in_step": 8, "cumulative_sums": False,
                                        "softmax": False}], ("three",)),
    # a fixed baseline: deterministic
    "monotonicity_correlation": ("MonotonicityCorrelation",
                                 [{"features_in_step": 4, "perturb_baseline": "black",
                                   "nr_samples": 2},
                                  {"features_in_step": 8, "perturb_baseline": "white",
                                   "nr_samples": 1, "softmax": False}], ("three",)),
}
NOT_QUANTUS = ("discretise", "cumulative_sums")  # the project's settings Quantus lacks
# Quantus 0.6 runs IROF and ROAD on one-channel images only (docs/measures.md): the first
# channel of the images, the stored model's first input channel, one image per batch (its
# baselines are taken over the batch)
GRAY_CASES: dict[str, tuple[str, list[dict]]] = {
    "irof": ("IROF", [{"perturb_baseline": "black"},
                      {"perturb_baseline": "white", "softmax": False}]),
    "road": ("ROAD", [{"noise": 0.0, "percentages": [10, 30, 50, 70, 90]}]),
}


@dataclasses.dataclass(frozen=True)
class Config(Checked):
    output: str = option("tests/data/quantus_reference.json", "Where the values go (JSON).")
    seed: int = option(0, "Seed of the inputs.")


def inputs(seed: int) -> dict:
    """NHWC images [5, 8, 8, 3], maps [5, 8, 8] and [5, 8, 8, 3] (normal draws: no ties) and
    masks [5, 8, 8] (a rectangle per image, of different sizes)."""
    rng = np.random.default_rng(seed)
    masks = np.zeros((5, 8, 8), np.float32)
    for index, (top, left, height, width) in enumerate(
            [(2, 2, 3, 4), (0, 0, 4, 4), (1, 3, 6, 2), (5, 5, 3, 3), (3, 1, 1, 6)]):
        masks[index, top:top + height, left:left + width] = 1
    arrays: dict[str, np.ndarray] = {"x": rng.normal(size=(5, 8, 8, 3)).astype(np.float32),
            "one": rng.normal(size=(5, 8, 8)).astype(np.float32),
            "three": rng.normal(size=(5, 8, 8, 3)).astype(np.float32),
            "s": masks,
            "y": rng.integers(0, 3, size=5),
            "x_small": rng.normal(size=(5, 6, 6, 3)).astype(np.float32),
            "one_small": rng.normal(size=(5, 6, 6)).astype(np.float32),
            # the model: 3x3 convolution (4 filters, same padding), ReLU, global average,
            # dense to 3 classes; Keras layouts
            "kernel": 0.5 * rng.normal(size=(3, 3, 3, 4)).astype(np.float32),
            "kernel_bias": 0.1 * rng.normal(size=4).astype(np.float32),
            "dense": rng.normal(size=(4, 3)).astype(np.float32),
            "dense_bias": 0.1 * rng.normal(size=3).astype(np.float32),
            # focus's quadrants of the explained class per image (drawn last: the draws above
            # stay as they were)
            "quadrants": rng.integers(0, 2, size=(5, 4)).astype(np.float32)}
    arrays["x_gray"] = arrays["x"][..., :1]
    return arrays


def torch_gradient(model, inputs, targets, **kwargs):
    """Quantus's explain_func: the gradient of the target's output, NCHW (as "gradient")."""
    import torch

    images = torch.tensor(np.asarray(inputs), dtype=torch.float32, requires_grad=True)
    outputs = model(images)
    outputs[torch.arange(len(images)), torch.as_tensor(np.asarray(targets))].sum().backward()
    return images.grad.numpy()


def torch_model(arrays: dict, channels: int = 3):
    """The stored model in PyTorch (NCHW): the Keras kernels transposed (with one channel:
    the kernel's first input channel, for the one-channel images)."""
    import torch

    model = torch.nn.Sequential(torch.nn.Conv2d(channels, 4, 3, padding=1), torch.nn.ReLU(),
                                torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(),
                                torch.nn.Linear(4, 3))
    kernel = arrays["kernel"][:, :, :channels]
    with torch.no_grad():
        model[0].weight.copy_(torch.tensor(np.transpose(kernel, (3, 2, 0, 1))))
        model[0].bias.copy_(torch.tensor(arrays["kernel_bias"]))
        model[4].weight.copy_(torch.tensor(arrays["dense"].T))
        model[4].bias.copy_(torch.tensor(arrays["dense_bias"]))
    return model.eval()


def quantus_values(name: str, settings: dict, arrays: dict, maps: str,
                   small: bool = False) -> list:
    """Quantus's per-image values of the measure `name` (channel-first arrays; the model's
    measures with the stored model)."""
    import quantus

    class_name = str({**CASES, **LATER_CASES, **GRAY_CASES}.get(name, ("",))[0])
    gray = name in GRAY_CASES
    x = np.transpose(arrays["x_small" if small else "x"], (0, 3, 1, 2))
    x = x[:, :1] if gray else x
    a = arrays[maps][:, None] if arrays[maps].ndim == 3 else \
        np.transpose(arrays[maps], (0, 3, 1, 2))
    s = arrays["s"][:, None] if name in MASKED else None
    model = None if name in MAP_ONLY else torch_model(arrays, 1 if gray else 3)
    call_settings = {key: settings[key] for key in settings if key == "softmax"}
    settings = {key: value for key, value in settings.items() if key not in NOT_QUANTUS}
    if name == "focus":
        call_settings["custom_batch"] = arrays["quadrants"].astype(int)
    if name in ("sensitivity_n", "irof"):  # per step / per image, not their mean
        settings["return_aggregate"] = False
    if gray:
        call_settings["batch_size"] = 1
    if name == "road":  # {percentage: the mean over the images}: one image at a time
        return [list(quantus.ROAD(disable_warnings=True, **settings)(
            model=model, x_batch=x[index:index + 1], y_batch=arrays["y"][index:index + 1],
            a_batch=a[index:index + 1], channel_first=True, device="cpu").values())
            for index in range(len(x))]
    if name in RANDOM_CASES:
        class_name = RANDOM_CASES[name][0]
        if name in EXPLAINED:
            call_settings["explain_func"] = torch_gradient
    metric = getattr(quantus, class_name)(
        disable_warnings=True, **{k: v for k, v in settings.items() if k != "softmax"})
    values = metric(model=model, x_batch=x, y_batch=arrays["y"], a_batch=a, s_batch=s,
                    channel_first=True, device="cpu", **call_settings)
    return _plain(np.asarray(values, np.float64))


def _plain(values: np.ndarray) -> Any:
    """Nested lists of floats, None for NaN (JSON has no NaN)."""
    if values.ndim == 0:
        return float(values) if np.isfinite(values) else None
    return [_plain(value) for value in values]


MAP_ONLY = ("sparseness", "complexity", "effective_complexity", "pointing_game",
            "attribution_localisation", "top_k_intersection", "relevance_mass_accuracy",
            "relevance_rank_accuracy", "auc")
MASKED = MAP_ONLY[3:]


def run(config: Config) -> dict:
    import quantus

    warnings.filterwarnings("ignore")
    np.random.seed(config.seed)  # Quantus draws from NumPy's global generator
    arrays = inputs(config.seed)
    cases: list[dict[str, Any]] = [
             {"measure": name, "settings": settings, "maps": maps, "images": "x",
              "values": quantus_values(name, settings, arrays, maps)}
             for name, (_, variants, map_kinds) in CASES.items()
             for settings in variants for maps in map_kinds]
    arrays["gradient"] = np.transpose(torch_gradient(
        torch_model(arrays), np.transpose(arrays["x"], (0, 3, 1, 2)), arrays["y"]), (0, 2, 3, 1))
    cases += [{"measure": name, "settings": dict({key: value for key, value in settings.items()
                                                  if key != "return_aggregate"}, **(
                   {"explain_func": "gradient"} if name in EXPLAINED else {})),
               "maps": "gradient", "images": "x", "rtol": rtol, "atol": atol,
               "drawn": name != "continuity",  # random draws: agreement in distribution
               "values": quantus_values(name, settings, arrays, "gradient")}
              for name, (_, settings, rtol, atol) in RANDOM_CASES.items()]
    cases += objective_cases(arrays)
    cases += [{"measure": name, "settings": settings, "maps": "one_small", "images": "x_small",
               "values": quantus_values(name, settings, arrays, "one_small", small=True)}
              for name, variants in SMALL_CASES.items() for settings in variants]
    cases += [{"measure": name, "settings": settings, "maps": maps, "images": "x",
               "values": quantus_values(name, settings, arrays, maps)}
              for name, (_, variants, map_kinds) in LATER_CASES.items()
              for settings in variants for maps in map_kinds]
    # irof is an area over some 20 steps less their count: float32's cancellation, 1e-5
    cases += [{"measure": name, "settings": settings, "maps": "one", "images": "x_gray",
               "values": quantus_values(name, settings, arrays, "one"),
               **({"rtol": 1e-5, "atol": 1e-5} if name == "irof" else {})}
              for name, (_, variants) in GRAY_CASES.items() for settings in variants]
    result = {"quantus": quantus.__version__, "numpy": np.__version__, "seed": config.seed,
              "date": datetime.date.today().isoformat(),
              "inputs": {key: value.tolist() for key, value in arrays.items()},
              "cases": cases}
    os.makedirs(os.path.dirname(os.path.abspath(config.output)), exist_ok=True)
    write_json(config.output, result)
    print(f"{len(cases)} cases of {len({case['measure'] for case in cases})} measures -> "
          f"{config.output}")
    return result


if __name__ == "__main__":
    run_binary(Config, run)
