"""BAM (Yang & Kim 2019): how much of an attribution falls on an object that a model does or does
not use, on objects pasted into scenes (docs/bam.md).

    import bam
    val_set = bam.load_val_set(data_dir, "obj")
    predictions, g, constant = bam.score_pair(model, val_set, indices, ["GC", "VG"])
    bam.metric_value("MCS", g_obj, g_scene)
    result = bam.run_tcav(bam.TcavModel(keras_model), "block_layer4", target, klass, concept,
                          randoms, counterpart)

The binaries are `python -m bam.metrics` (MCS, IDR, IIR, RMCS), `bam.train` and `bam.run_tcav`;
each has an importable `run(Config(...))`, and `bam.metrics.compute` gives the metrics without
printing.
"""
import models  # noqa: F401, I001  (first: TensorFlow loads quietly)
from bam.metric_definitions import (METHODS, METRICS, PAIRS, correct_set, metric_value,
                                    sample_indices)
from bam.tcav_experiment import model_tcav
from bam.region import object_masks, region_scores
from bam.tcav import TcavModel, TcavResult, run_tcav
from bam.val_set_scores import ValSet, load_val_set, score_pair

__all__ = ["METHODS", "METRICS", "PAIRS", "TcavModel", "TcavResult", "ValSet", "correct_set",
           "load_val_set", "metric_value", "model_tcav", "object_masks", "region_scores",
           "run_tcav", "sample_indices", "score_pair"]
