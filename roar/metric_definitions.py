"""ROAD's and ROAR / KAR's metrics, declared once (docs/architecture.md, "One metric
protocol"), light (no TensorFlow): `roar.road` and `roar.report` summarise their rows with them,
the report card (`roar.card`) shows the same names, directions and words.

ROAD (docs/roar.md, "ROAD without retraining"): the clean model's true-class probability on an
imputed image, averaged over the fractions p; MoRF imputes the top p of the ranked pixels
(lower is better), LeRF all but the top p (higher is better). The average over the fractions of
the per-fraction means over images, which `roar.road` reports, equals the mean over images of
the per-image averages, which the card compares image by image.

ROAR / KAR: test top-1 after retraining on images whose top fraction was replaced (ROAR, lower is
better) or whose top fraction alone was kept (KAR, higher is better); one value per training
seed.
"""
from typing import Iterable

import numpy as np

from models.foundation.errors import check_one_of
from models.foundation.metric_spec import MetricSpec

ROAD = (MetricSpec("MoRF", False, about="true-class probability when the most relevant pixels "
                                        "are imputed, averaged over the fractions"),
        MetricSpec("LeRF", True, about="true-class probability when the least relevant pixels "
                                       "are imputed, averaged over the fractions"))
ROAD_ORDERS = {"morf": "MoRF", "lerf": "LeRF"}  # roar.road's --orders -> metric name


def fraction_removed(order: str, p: float) -> float:
    """The fraction of pixels ROAD imputes at (`order`, p): MoRF removes the top p (ROAR at p),
    LeRF keeps it (KAR at 1 - p)."""
    check_one_of("order", order, tuple(ROAD_ORDERS))
    return p if order == "morf" else round(1.0 - p, 2)


RETRAINING = (
    MetricSpec("ROAR top-1", False, unit="seed", about="test top-1 after retraining on images "
                                                       "with the top fraction replaced"),
    MetricSpec("KAR top-1", True, unit="seed", about="test top-1 after retraining on images "
                                                     "with only the top fraction kept"))
RETRAINING_MODES = {"ROAR": "ROAR top-1", "KAR": "KAR top-1"}  # a run's mode -> metric name


def road_summary(rows: Iterable[dict]) -> dict:
    """{method: {"MoRF" / "LeRF": the true-class probability averaged over the fractions}} of
    `roar.road` result rows (each {method, order, true_class_probability}), for the orders the
    rows hold."""
    values: dict = {}
    for row in rows:
        name = ROAD_ORDERS[row["order"]]
        values.setdefault(row["method"], {}).setdefault(name, []).append(
            float(row["true_class_probability"]))
    return {method: {spec.name: float(np.mean(by_name[spec.name]))
                     for spec in ROAD if spec.name in by_name}
            for method, by_name in values.items()}
