"""Model zoo, SavedModel export/load and preprocessing shared by BAM, ROAR and faithfulness.

    import models
    model = models.build("small_cnn", num_classes=10, input_shape=(64, 64, 3))
    models.export(model, "/tmp/small_cnn")
    loaded = models.load("/tmp/small_cnn")   # loaded(images) -> logits, differentiable

Importing the package (or a light module of it: errors, files, provenance, cli, uncertainty)
does not load TensorFlow; the names below load their modules on first use (docs/architecture.md,
"Light imports").
"""
import importlib

from models import cli as _cli

_cli.answer_help_early()  # --help: the binary's flags, without loading TensorFlow
_cli.quiet_startup()  # TensorFlow's C++ start-up lines stay hidden whenever it loads

_EXPORTS = {  # name -> the module that defines it
    "adapt": "models.adapter",
    "MissingPathError": "models.errors", "RecordError": "models.errors",
    "ShapeError": "models.errors", "UserError": "models.errors",
    "LoadedModel": "models.exporting", "export": "models.exporting",
    "rebuild": "models.exporting",
    "weights_digest": "models.exporting",
    "load": "models.loading", "read_info": "models.loading",
    "FEATURE_LAYER": "models.zoo", "REGISTRY": "models.zoo", "build": "models.zoo",
    "feature_layer_name": "models.zoo", "features_and_logits_model": "models.zoo",
    "spec": "models.zoo",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    """The package's names, and its submodules, loaded on first use."""
    if name in _EXPORTS:
        value = getattr(importlib.import_module(_EXPORTS[name]), name)
    elif not name.startswith("__"):
        try:
            value = importlib.import_module(f"models.{name}")
        except ModuleNotFoundError as error:
            if error.name != f"models.{name}":
                raise
            raise AttributeError(f"module 'models' has no attribute {name!r}") from None
    else:
        raise AttributeError(f"module 'models' has no attribute {name!r}")
    globals()[name] = value
    return value
