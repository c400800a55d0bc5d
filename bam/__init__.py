"""BAM (Yang & Kim 2019): how much of an attribution falls on an object that a model does or does
not use, on objects pasted into scenes (docs/bam.md).

    import bam
    val_set = bam.load_val_set(data_dir, "obj")
    predictions, g, constant = bam.score_pair(model, val_set, indices, ["GC", "VG"])
    bam.metric_value("MCS", g_obj, g_scene)
    result = bam.run_tcav(bam.TcavModel(keras_model), "block_layer4", target, klass, concept,
                          randoms, counterpart)

The binaries are `python -m bam.metrics` (MCS, IDR, IIR, RMCS), `bam.train` and `bam.run_tcav`;
each has an importable `run(Config(...))`, and `bam.metrics.compute(Config(...))` gives the
metrics without printing.
"""
from typing import TYPE_CHECKING

from models.foundation.lazy import lazy_names

_EXPORTS = {  # name -> the module that defines it
    "METHODS": "bam.metric_definitions", "METRICS": "bam.metric_definitions",
    "PAIRS": "bam.metric_definitions", "correct_set": "bam.metric_definitions",
    "metric_value": "bam.metric_definitions", "sample_indices": "bam.metric_definitions",
    "model_tcav": "bam.tcav_experiment",
    "object_masks": "bam.region", "region_scores": "bam.region",
    "TcavModel": "bam.tcav", "TcavResult": "bam.tcav", "run_tcav": "bam.tcav",
    "ValSet": "bam.val_set_scores", "load_val_set": "bam.val_set_scores",
    "score_pair": "bam.val_set_scores",
}

__all__ = sorted(_EXPORTS)
__getattr__ = lazy_names(__name__, _EXPORTS)

if TYPE_CHECKING:  # the same names as the type checker sees them (tests/test_types.py)
    from bam.metric_definitions import (  # noqa: F401
        METHODS,
        METRICS,
        PAIRS,
        correct_set,
        metric_value,
        sample_indices,
    )
    from bam.region import object_masks, region_scores  # noqa: F401
    from bam.tcav import TcavModel, TcavResult, run_tcav  # noqa: F401
    from bam.tcav_experiment import model_tcav  # noqa: F401
    from bam.val_set_scores import ValSet, load_val_set, score_pair  # noqa: F401
