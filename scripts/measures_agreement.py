"""How closely the peers' measures (`faithfulness.measures`) agree with Quantus 0.6 on the
stored cases (`scripts/quantus_reference.py`, tests/data/quantus_reference.json): one row per
measure with its cases and the largest absolute and relative difference
(docs/measures.md, "Agreement with Quantus"). `python -m scripts.measures_agreement`.
"""
import dataclasses
import datetime
import json
import platform
from typing import Any

import numpy as np

from models.foundation.cli import option, run_binary
from models.foundation.rules import Checked


@dataclasses.dataclass(frozen=True)
class Config(Checked):
    reference: str = option("tests/data/quantus_reference.json",
                            "The stored Quantus values (JSON).")


MAP_ONLY_FAMILIES = ("complexity", "localisation")  # their measures read no model


def stored_models(arrays: dict) -> dict:
    """{image size: the stored model in Keras for images of that size; (8, 1): for the
    one-channel images}: 3x3 convolution (4 filters, same padding), ReLU, global average, dense
    to 3 classes (`scripts/quantus_reference.py`, `torch_model`)."""
    found: dict[Any, Any] = {int(arrays[key].shape[1]): stored_model(arrays, arrays[key].shape[1:])
                             for key in ("x", "x_small")}
    found[(8, 1)] = stored_model(arrays, arrays["x_gray"].shape[1:])  # one channel
    return found


def stored_model(arrays: dict, shape: tuple, dense_shift: Any = 0.0) -> Any:
    """The stored model in Keras for images of `shape` (the kernel's first input channels),
    its dense weights plus `dense_shift` (Xplique's fold models: scripts/xplique_reference.py)."""
    import keras

    model = keras.Sequential([keras.Input(shape),
                              keras.layers.Conv2D(4, 3, padding="same", activation="relu"),
                              keras.layers.GlobalAveragePooling2D(), keras.layers.Dense(3)])
    model.layers[0].set_weights([arrays["kernel"][:, :, :shape[-1]], arrays["kernel_bias"]])
    model.layers[2].set_weights([arrays["dense"] + np.asarray(dense_shift, np.float32),
                                 arrays["dense_bias"]])
    return model


def ours(case: dict, arrays: dict, models: dict) -> np.ndarray:
    """float64: the project's values of a stored case (`models`: `stored_models`')."""
    from faithfulness import measures

    name = case["measure"]
    if case.get("objective"):
        return objective_values(name, arrays)
    family = measures.family_of(name)
    masks = arrays["s"] if name in measures.MASKED else None
    images = arrays[case.get("images", "x")]
    settings = dict(case["settings"], **({"rtol": 0.0} if name == "completeness" else {}))
    if name == "focus":
        settings["custom_batch"] = arrays["quadrants"].astype(np.int64)
    return np.asarray(getattr(measures, name)(
        None if family in MAP_ONLY_FAMILIES else
        models[images.shape[1] if images.shape[3] == 3 else (images.shape[1], 1)], images,
        arrays["y"].astype(np.int64), arrays[case["maps"]], masks, **settings),
        np.float64)


def objective_values(name: str, arrays: dict) -> np.ndarray:
    """float64: a relative stability's per-sample objective on Quantus's noisy inputs."""
    from faithfulness.measures import robustness_family

    def flat(key):
        return arrays[key].reshape(len(arrays[key]), -1).astype(np.float64)

    if name == "relative_representation_stability":  # the logits as the representations
        return robustness_family.representation_stability(
            flat("logits"), flat("moved_logits"), flat("gradient"), flat("moved_gradient"))
    if name == "relative_input_stability":
        return robustness_family.input_stability(flat("x"), flat("moved"), flat("gradient"),
                                                 flat("moved_gradient"))
    return robustness_family.output_stability(None, None, flat("gradient"),
                                              flat("moved_gradient"), flat("logits"),
                                              flat("moved_logits"))


def quantus_values(case: dict) -> np.ndarray:
    """float64: Quantus's stored values of a case (None read as NaN)."""
    return np.array(case["values"], dtype=np.float64)


def differences(stored: dict) -> dict:
    """{measure: (cases, images, largest |ours - Quantus|, largest relative difference)},
    both NaN-aware (a NaN on one side only counts as infinite)."""
    arrays = {key: np.asarray(value, np.float32) for key, value in stored["inputs"].items()}
    models = stored_models(arrays)
    rows: dict[str, Any] = {}
    for case in stored["cases"]:
        found, theirs = ours(case, arrays, models), quantus_values(case)
        same_nan = np.isnan(found) & np.isnan(theirs)
        gap = np.where(same_nan, 0.0, np.abs(found - theirs))
        gap = np.where(np.isnan(gap), np.inf, gap)
        with np.errstate(divide="ignore", invalid="ignore"):
            relative = np.where(gap == 0, 0.0, gap / np.abs(theirs))
        name = case["measure"]
        cases, images, absolute, worst = rows.get(name, (0, 0, 0.0, 0.0))
        rows[name] = (cases + 1, images + len(found), max(absolute, float(gap.max())),
                      max(worst, float(relative.max())))
    return rows


def run(config: Config) -> dict:
    with open(config.reference) as handle:
        stored = json.load(handle)
    rows = differences(stored)
    print(f"{datetime.date.today().isoformat()}, {platform.processor() or platform.machine()}; "
          f"Quantus {stored['quantus']} (NumPy {stored['numpy']}), stored {stored['date']}")
    drawn = sorted({case["measure"] for case in stored["cases"] if case.get("drawn")})
    print(f"(random draws differ, so these agree in distribution only: {', '.join(drawn)})")
    print("| measure | cases | images | largest abs. difference | largest rel. difference |")
    print("|---|---|---|---|---|")
    for name, (cases, images, absolute, relative) in rows.items():
        print(f"| {name} | {cases} | {images} | {absolute:.1e} | {relative:.1e} |")
    return rows


if __name__ == "__main__":
    run_binary(Config, run)
