"""Deletion-style faithfulness metrics as batched TF ops (faithfulness.md).

    from faithfulness import IIC_AD, ADD, Deletion, Insertion, RiseDeletion, RiseInsertion
    from faithfulness import single_deletion, incremental_deletion, random_cell_deletion

Every metric scores all perturbed images of all curves in fixed-size chunks inside one traced
function (`faithfulness.engine`); the classes mirror `saliency_maps_metrics`' API.
"""
from faithfulness.gomez import (ADD, IIC_AD, CurveResult, Deletion, Insertion, RiseDeletion,
                                RiseInsertion)
from models.errors import UserError
from faithfulness.idsds import incremental_deletion, random_cell_deletion, single_deletion
from faithfulness.substrates import box_blur, idsds_blur, rise_blur

__all__ = ["ADD", "IIC_AD", "CurveResult", "Deletion", "Insertion", "RiseDeletion",
           "RiseInsertion", "UserError", "box_blur", "idsds_blur", "incremental_deletion",
           "random_cell_deletion", "rise_blur", "single_deletion"]
