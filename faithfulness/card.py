"""The faithfulness protocols as report-card benchmarks (docs/report_card.md, "Benchmarks"):
Deletion / Insertion (DAUC, DC, IAUC, IC), IIC / AD, ADD, IDSDS single and (by flag) incremental
deletion, each
scoring one method on the same images with `faithfulness.evaluate.per_image`, the computation
the binary and Beam call too."""
import dataclasses
from typing import Any, Callable, Optional, Sequence

import numpy as np

from faithfulness import evaluate, protocols
from models.report.card_engine import Benchmark

PROTOCOLS = {  # card name -> protocol (its metrics: faithfulness.protocols.METRICS)
    "Deletion": "deletion", "Insertion": "insertion", "IIC/AD": "iic_ad", "ADD": "add",
    "IDSDS": "single_deletion", "IDSDS incremental": "incremental_deletion",
}
DEFAULT = ("Deletion", "Insertion", "IIC/AD", "ADD", "IDSDS")  # incremental: by flag


def benchmarks(loaded: Any, images: np.ndarray, labels: np.ndarray, ids: np.ndarray, *,
               data: dict, names: Sequence[str] = DEFAULT,
               options: Optional[evaluate.Options] = None, group_size: int = 256,
               maps_of: Optional[Callable] = None, methods: Optional[dict] = None) -> list:
    """One `Benchmark` per protocol of `names`, scoring `images` ([N, H, W, C] in the model's
    input space, explaining `labels`) with `loaded`. `data` fingerprints the images (their
    origin in the cells); `maps_of(method)`, when given, supplies the method's maps of all
    `images` (computed once and shared by the benchmarks of one card); `methods` ({name:
    `saliency_gen.attribution.names.Resolved`}, the run's resolved methods) explain where maps are
    not shared (IDSDS re-explains the perturbed images)."""
    options = options or evaluate.Options()
    found = []
    for name in names:
        protocol = PROTOCOLS[name]
        measure = evaluate.measure_for(loaded, protocol, options)

        def score(method, protocol=protocol, measure=measure):
            shared = None if maps_of is None or protocol == "incremental_deletion" \
                else maps_of(method)
            return evaluate.per_image(loaded, images, labels, ids,
                                      (methods or {}).get(method, method), protocol, options,
                                      measure, shared, group_size)

        found.append(Benchmark(
            name=name, metrics=protocols.METRICS[protocol], score=score,
            settings={"protocol": protocol, "model_id": loaded.model_id,
                      "n_images": len(images), **data, **dataclasses.asdict(options)},
            cost=float(options.max_step_nb if protocol in ("deletion", "insertion") else
                       options.id_steps if protocol == "incremental_deletion" else
                       options.grid_rows_and_cols ** 2 if protocol == "single_deletion" else 2)))
    return found
