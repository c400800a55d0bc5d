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
    return {"x": rng.normal(size=(5, 8, 8, 3)).astype(np.float32),
            "one": rng.normal(size=(5, 8, 8)).astype(np.float32),
            "three": rng.normal(size=(5, 8, 8, 3)).astype(np.float32),
            "s": masks}


def quantus_values(name: str, settings: dict, arrays: dict, maps: str) -> list:
    """Quantus's per-image values of the measure `name` (channel-first arrays)."""
    import quantus

    class_name = CASES[name][0]
    x = np.transpose(arrays["x"], (0, 3, 1, 2))
    a = arrays[maps][:, None] if maps == "one" else np.transpose(arrays[maps], (0, 3, 1, 2))
    s = arrays["s"][:, None] if name not in ("sparseness", "complexity",
                                             "effective_complexity") else None
    metric = getattr(quantus, class_name)(disable_warnings=True, **settings)
    values = metric(model=None, x_batch=x, y_batch=np.zeros(len(x), np.int64), a_batch=a,
                    s_batch=s)
    return [None if not np.isfinite(float(v)) else float(v) for v in values]


def run(config: Config) -> dict:
    import quantus

    warnings.filterwarnings("ignore")
    arrays = inputs(config.seed)
    cases = [{"measure": name, "settings": settings, "maps": maps,
              "values": quantus_values(name, settings, arrays, maps)}
             for name, (_, variants, map_kinds) in CASES.items()
             for settings in variants for maps in map_kinds]
    result = {"quantus": quantus.__version__, "numpy": np.__version__, "seed": config.seed,
              "date": datetime.date.today().isoformat(),
              "inputs": {key: value.tolist() for key, value in arrays.items()},
              "cases": cases}
    os.makedirs(os.path.dirname(os.path.abspath(config.output)), exist_ok=True)
    write_json(config.output, result)
    print(f"{len(cases)} cases of {len(CASES)} measures -> {config.output}")
    return result


if __name__ == "__main__":
    run_binary(Config, run)
