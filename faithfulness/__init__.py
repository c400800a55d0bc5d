"""Deletion-style faithfulness metrics as batched TF ops (docs/faithfulness.md).

    from faithfulness import IIC_AD, ADD, Deletion, Insertion, RiseDeletion, RiseInsertion
    from faithfulness import single_deletion, incremental_deletion, random_cell_deletion

Every metric scores all perturbed images of all curves in fixed-size chunks inside one traced
function (`faithfulness.scorer`); the classes mirror `saliency_maps_metrics`' API.
"""
import models  # noqa: F401, I001  (first: TensorFlow loads quietly)
from faithfulness.curves import CurveResult, Deletion, Insertion, RiseDeletion, RiseInsertion
from faithfulness.single_step import ADD, IIC_AD
from models.errors import UserError
from faithfulness.idsds import incremental_deletion, random_cell_deletion, single_deletion
from faithfulness.substrates import box_blur, idsds_blur, rise_blur

__all__ = ["ADD", "IIC_AD", "CurveResult", "Deletion", "Insertion", "RiseDeletion",
           "RiseInsertion", "UserError", "box_blur", "idsds_blur", "incremental_deletion",
           "random_cell_deletion", "rise_blur", "single_deletion"]
