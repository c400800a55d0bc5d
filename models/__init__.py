"""Model zoo, SavedModel export/load and preprocessing shared by BAM, ROAR and faithfulness.

    import models
    model = models.build("small_cnn", num_classes=10, input_shape=(64, 64, 3))
    models.export(model, "/tmp/small_cnn")
    loaded = models.load("/tmp/small_cnn")   # loaded(images) -> logits, differentiable

Importing the package (or a light module of it: errors, files, provenance, cli, uncertainty)
does not load TensorFlow; the names below load their modules on first use (docs/architecture.md,
"Light imports").
"""
from models import cli as _cli
from models import lazy as _lazy

_cli.answer_help_early()  # --help: the binary's flags, without loading TensorFlow
_cli.quiet_startup()  # TensorFlow's C++ start-up lines stay hidden whenever it loads
_cli.fast_kernels()  # oneDNN on, unless the user chose

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


__getattr__ = _lazy.lazy_names(__name__, _EXPORTS)
