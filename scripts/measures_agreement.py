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


def differences(stored: dict) -> dict:
    """{measure: (cases, images, largest |ours - Quantus|, largest relative difference)},
    both NaN-aware (a NaN on one side only counts as infinite)."""
    from faithfulness import measures

    arrays = {key: np.asarray(value, np.float32) for key, value in stored["inputs"].items()}
    rows: dict[str, Any] = {}
    for case in stored["cases"]:
        name = case["measure"]
        masks = arrays["s"] if measures.family_of(name) == "localisation" else None
        ours = np.asarray(getattr(measures, name)(
            None, arrays["x"], np.zeros(len(arrays["x"]), np.int64), arrays[case["maps"]],
            masks, **case["settings"]), np.float64)
        theirs = np.array([np.nan if v is None else v for v in case["values"]], np.float64)
        same_nan = np.isnan(ours) & np.isnan(theirs)
        gap = np.where(same_nan, 0.0, np.abs(ours - theirs))
        gap = np.where(np.isnan(gap), np.inf, gap)
        with np.errstate(divide="ignore", invalid="ignore"):
            relative = np.where(gap == 0, 0.0, gap / np.abs(theirs))
        cases, images, absolute, worst = rows.get(name, (0, 0, 0.0, 0.0))
        rows[name] = (cases + 1, images + len(ours), max(absolute, float(gap.max())),
                      max(worst, float(relative.max())))
    return rows


def run(config: Config) -> dict:
    with open(config.reference) as handle:
        stored = json.load(handle)
    rows = differences(stored)
    print(f"{datetime.date.today().isoformat()}, {platform.processor() or platform.machine()}; "
          f"Quantus {stored['quantus']} (NumPy {stored['numpy']}), stored {stored['date']}")
    print("| measure | cases | images | largest abs. difference | largest rel. difference |")
    print("|---|---|---|---|---|")
    for name, (cases, images, absolute, relative) in rows.items():
        print(f"| {name} | {cases} | {images} | {absolute:.1e} | {relative:.1e} |")
    return rows


if __name__ == "__main__":
    run_binary(Config, run)
