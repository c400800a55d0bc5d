"""The faithfulness protocols as report-card benchmarks (docs/report_card.md, "Benchmarks"):
Deletion / Insertion (DAUC, DC, IAUC, IC), IIC / AD, ADD, IDSDS single and (by flag) incremental
deletion, each
scoring one method on the same images with `faithfulness.evaluate.score_group`."""
import dataclasses
from typing import Any, Callable, Optional, Sequence

import numpy as np

from faithfulness import evaluate
from models.report.engine import Benchmark, MetricSpec

PROTOCOLS = {  # card name -> (protocol, metrics)
    "Deletion": ("deletion", (MetricSpec("dauc", False, about="area under the deletion curve"),
                              MetricSpec("dc", True, about="deletion correlation"))),
    "Insertion": ("insertion", (MetricSpec("iauc", True, about="area under the insertion curve"),
                                MetricSpec("ic", True, about="insertion correlation"))),
    "IIC/AD": ("iic_ad", (MetricSpec("iic", True, about="share of images whose score rises",
                                 note="a share of images whose score rises when only the map's "
                                      "region is kept; such rises are rare, so several methods "
                                      "often share the same count (often 0) and tie."),
                          MetricSpec("ad", False, about="average relative drop"))),
    "ADD": ("add", (MetricSpec("add", True, about="average drop when the salient part is "
                                              "deleted",
                           note="the min-max scaled map is used as a soft mask, so a map that "
                                "is high everywhere removes more of the image: a random map "
                                "(about 0.5 everywhere) deletes half of every pixel and drops "
                                "the score more than a focused map, whatever it explains."),)),
    "IDSDS": ("single_deletion", (MetricSpec("sds", True, about="rank correlation of cell "
                                                            "attributions and output drops"),)),
    # Least relevant cells deleted first (id_order ascending): a faithful map keeps the
    # output up for longer, so the mean of the curve is higher.
    "IDSDS incremental": ("incremental_deletion", (MetricSpec("score", True, about="mean softmax "
                                                          "output as cells are deleted, least "
                                                          "relevant first"),)),
}
DEFAULT = ("Deletion", "Insertion", "IIC/AD", "ADD", "IDSDS")  # incremental: by flag


def benchmarks(loaded: Any, images: np.ndarray, labels: np.ndarray, ids: np.ndarray, *,
               data: dict, names: Sequence[str] = DEFAULT,
               options: Optional[evaluate.Options] = None, group_size: int = 256,
               maps_of: Optional[Callable] = None) -> list:
    """One `Benchmark` per protocol of `names`, scoring `images` ([N, H, W, C] in the model's
    input space, explaining `labels`) with `loaded`. `data` fingerprints the images (their
    origin in the cells); `maps_of(method)`, when given, supplies the method's maps of all
    `images` (computed once and shared by the benchmarks of one card)."""
    options = options or evaluate.Options()
    found = []
    for name in names:
        protocol, metrics = PROTOCOLS[name]
        scorer = evaluate.scorer_for(loaded, protocol, options)

        def score(method, protocol=protocol, scorer=scorer):
            shared = None if maps_of is None or protocol == "incremental_deletion" \
                else maps_of(method)
            parts = [evaluate.score_group(loaded, images[s:s + group_size],
                                          labels[s:s + group_size], ids[s:s + group_size],
                                          method, protocol, options, scorer,
                                          maps=None if shared is None else
                                          shared[s:s + group_size])
                     for s in range(0, len(images), group_size)]
            return {key: np.concatenate([part[key] for part in parts]) for key in parts[0]}

        found.append(Benchmark(
            name=name, metrics=metrics, score=score,
            settings={"protocol": protocol, "model_id": loaded.model_id,
                      "n_images": len(images), **data, **dataclasses.asdict(options)},
            cost=float(options.max_step_nb if protocol in ("deletion", "insertion") else
                       options.id_steps if protocol == "incremental_deletion" else
                       options.grid_rows_and_cols ** 2 if protocol == "single_deletion" else 2)))
    return found
