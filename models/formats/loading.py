"""`models.load` and `models.read_info` for every model folder the project reads: exports of
`models.export`, and TF1 SavedModels addressed by tensor names such as BAM's released models
(`models.formats.tf1_models`)."""
import os
from typing import Any

from models.formats import exporting, tf1_models


def _is_export(path: Any) -> bool:
    return os.path.isfile(os.path.join(os.fspath(path), exporting.INFO_PATH))


def load(path: Any) -> exporting.LoadedModel:
    """The model in `path`: an export (`models.formats.exporting.LoadedModel`) or a TF1 SavedModel
    with BAM's tensor names (`models.formats.tf1_models.Tf1Model`); anything else is a one-line
    error."""
    if not _is_export(path) and os.path.isdir(os.fspath(path)) and tf1_models.is_tf1(path):
        return tf1_models.Tf1Model(path)
    return exporting.LoadedModel(path)


def read_info(path: Any) -> dict:
    """The recorded identity of the model in `path` (see `load`), without loading it."""
    if not _is_export(path) and os.path.isdir(os.fspath(path)) and tf1_models.is_tf1(path):
        return tf1_models.read_info(path)
    return exporting.read_info(path)
