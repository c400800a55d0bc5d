"""One interface over the models the engine explains: a live Keras model or a `models.load` object.

An adapter exposes, as tf-traceable callables on NHWC float32 batches:

* `logits(x)`: pre-softmax logits (a Keras model ending in a softmax is differentiated before it);
* `guided_logits(x)`: logits through guided ReLUs (input gradient = guided backprop);
* `cam(x, targets)`: (feature map A, logits, dlogit[target]/dA) at the Grad-CAM layer.

Models are always called in inference mode.
"""
import models
from models import guided as guided_views
from models import zoo
from models.errors import UserError


class KerasAdapter:
    """Adapter for a live Keras model."""

    def __init__(self, model, feature_layer=None):
        if len(model.inputs) != 1 or len(model.inputs[0].shape) != 4:
            raise UserError(f"model {model.name!r} must take one NHWC image input")
        self.model = guided_views.logits_model(model)
        self.input_shape = tuple(int(d) for d in self.model.inputs[0].shape[1:])
        self.num_classes = int(self.model.outputs[0].shape[-1])
        self.name = model.name
        self._feature_layer = feature_layer
        self._features_model = None
        self._guided = None

    def prepare(self, guided=False, cam=False):
        """Builds the guided and CAM views eagerly (never while a tf.function traces)."""
        if guided and self._guided is None:
            self._guided = guided_views.guided_model(self.model)
        if cam and self._features_model is None:
            self._features_model = models.features_and_logits_model(self.model,
                                                                     self._feature_layer)

    def logits(self, x):
        return self.model(x, training=False)

    def guided_logits(self, x):
        self.prepare(guided=True)
        return self._guided(x, training=False)

    def cam(self, x, targets):
        self.prepare(cam=True)
        return zoo.cam_outputs(self._features_model, x, targets)


class LoadedAdapter:
    """Adapter for a SavedModel reloaded with `models.load`."""

    def __init__(self, loaded, feature_layer=None):
        if feature_layer not in (None, loaded.feature_layer):
            raise UserError(f"model {loaded.path} was exported with feature layer "
                            f"{loaded.feature_layer!r}; re-export it to use {feature_layer!r}")
        self.loaded = loaded
        self.input_shape = loaded.input_shape
        self.num_classes = loaded.num_classes
        self.name = loaded.name

    def prepare(self, guided=False, cam=False):
        """Nothing to build; fails early if guided backprop is asked of a model without it."""
        if guided and not self.loaded.info.get("has_guided"):
            raise UserError(f"model {self.loaded.path} has no guided-backprop endpoint: "
                            f"{self.loaded.info.get('guided_unavailable', 're-export it')}")

    def logits(self, x):
        return self.loaded(x)

    def guided_logits(self, x):
        return self.loaded.guided(x)

    def cam(self, x, targets):
        return self.loaded.cam(x, targets)


def adapt(model, feature_layer=None):
    """The adapter for `model` (a Keras model, a `models.LoadedModel` or a SavedModel path)."""
    if isinstance(model, (KerasAdapter, LoadedAdapter)):
        return model
    if isinstance(model, models.LoadedModel):
        return LoadedAdapter(model, feature_layer)
    if isinstance(model, str):
        return LoadedAdapter(models.load(model), feature_layer)
    if hasattr(model, "layers") and hasattr(model, "inputs"):
        return KerasAdapter(model, feature_layer)
    raise UserError(f"cannot explain a {type(model).__name__}: pass a Keras model, a "
                    "models.load(...) object or an exported model directory")
