"""Model zoo, SavedModel export/load and preprocessing shared by BAM, ROAR and faithfulness.

    import models
    model = models.build("small_cnn", num_classes=10, input_shape=(64, 64, 3))
    models.export(model, "/tmp/small_cnn")
    loaded = models.load("/tmp/small_cnn")   # loaded(images) -> logits, differentiable
"""
from models import cli as _cli

_cli.answer_help_early()  # --help: the binary's flags, without loading TensorFlow
_cli.quiet_startup()  # before anything loads TensorFlow: its C++ start-up lines stay hidden

from models.adapter import adapt
from models.errors import MissingPathError, RecordError, ShapeError, UserError
from models.export import LoadedModel, export, rebuild, weights_digest
from models.loading import load, read_info
from models.zoo import (FEATURE_LAYER, REGISTRY, build, feature_layer_name,
                        features_and_logits_model, spec)

__all__ = [
    "FEATURE_LAYER", "REGISTRY", "LoadedModel", "MissingPathError", "RecordError", "ShapeError",
    "UserError", "adapt", "build", "export", "feature_layer_name", "features_and_logits_model",
    "load", "read_info", "rebuild", "spec", "weights_digest",
]
