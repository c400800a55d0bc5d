"""Model zoo, SavedModel export/load and preprocessing shared by BAM, ROAR and faithfulness.

    import models
    model = models.build("small_cnn", num_classes=10, input_shape=(64, 64, 3))
    models.export(model, "/tmp/small_cnn")
    loaded = models.load("/tmp/small_cnn")   # loaded(images) -> logits, differentiable

Importing the package (or a light module of it: errors, files, provenance, cli, uncertainty)
does not load TensorFlow and has no side effect; the names below load their modules on first use
(docs/architecture.md, "Light imports"). A program's start-up settings (TensorFlow quiet, oneDNN
on) come from `models.foundation.cli.start_process`, which every binary calls.
"""
from typing import TYPE_CHECKING

from models.foundation import lazy as _lazy

_EXPORTS = {  # name -> the module that defines it
    "adapt": "models.formats.adapter",
    "MissingPathError": "models.foundation.errors", "RecordError": "models.foundation.errors",
    "ShapeError": "models.foundation.errors", "UserError": "models.foundation.errors",
    "LoadedModel": "models.formats.exporting", "export": "models.formats.exporting",
    "rebuild": "models.formats.exporting",
    "weights_digest": "models.formats.exporting",
    "load": "models.formats.loading", "read_info": "models.formats.loading",
    "FEATURE_LAYER": "models.architectures.zoo", "REGISTRY": "models.architectures.zoo",
    "build": "models.architectures.zoo", "feature_layer_name": "models.architectures.zoo",
    "features_and_logits_model": "models.architectures.zoo", "spec": "models.architectures.zoo",
}

__all__ = sorted(_EXPORTS)


__getattr__ = _lazy.lazy_names(__name__, _EXPORTS)

if TYPE_CHECKING:  # the same names as the type checker sees them (tests/test_types.py)
    from models.architectures.zoo import (  # noqa: F401
        FEATURE_LAYER,
        REGISTRY,
        build,
        feature_layer_name,
        features_and_logits_model,
        spec,
    )
    from models.formats.adapter import adapt  # noqa: F401
    from models.formats.exporting import LoadedModel, export, rebuild, weights_digest  # noqa: F401
    from models.formats.loading import load, read_info  # noqa: F401
    from models.foundation.errors import MissingPathError, RecordError, ShapeError, UserError  # noqa: F401
