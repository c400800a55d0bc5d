"""Deletion-style faithfulness metrics as batched TF ops (docs/faithfulness.md).

    from faithfulness import IIC_AD, ADD, Deletion, Insertion, RiseDeletion, RiseInsertion
    from faithfulness import single_deletion, incremental_deletion, random_cell_deletion

Every metric scores all perturbed images of all curves in fixed-size chunks inside one traced
function (`faithfulness.scorer`); the classes mirror `saliency_maps_metrics`' API.
"""
from models.foundation.lazy import lazy_names

_EXPORTS = {  # name -> the module that defines it
    "CurveResult": "faithfulness.curves", "Deletion": "faithfulness.curves",
    "Insertion": "faithfulness.curves", "RiseDeletion": "faithfulness.curves",
    "RiseInsertion": "faithfulness.curves",
    "ADD": "faithfulness.single_step", "IIC_AD": "faithfulness.single_step",
    "UserError": "models.foundation.errors",
    "incremental_deletion": "faithfulness.idsds", "random_cell_deletion": "faithfulness.idsds",
    "single_deletion": "faithfulness.idsds",
    "box_blur": "faithfulness.substrates", "idsds_blur": "faithfulness.substrates",
    "rise_blur": "faithfulness.substrates",
}

__all__ = sorted(_EXPORTS)
__getattr__ = lazy_names(__name__, _EXPORTS)
