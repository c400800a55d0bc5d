"""The one model adapter: what the attribution engine and the faithfulness scorer need of a model.

`adapt(model)` accepts a live Keras model, a `models.load` object, an exported model directory,
any other SavedModel directory or loaded SavedModel, or a plain callable, and returns an
adapter exposing tf-traceable callables on NHWC float32 batches (docs/architecture.md, "The
model adapter"):

* `outputs(x)`: the model's own output `[N, classes]` (a Keras model ending in a softmax keeps
  it: the faithfulness metrics score what the model outputs);
* `logits(x)`: pre-softmax logits (a Keras model ending in a softmax is cut before it);
* `guided_logits(x)`: logits through guided ReLUs (their input gradient is guided backprop);
* `cam(x, targets)`: (feature map A, logits, d logit[target] / dA) at the Grad-CAM layer;

plus `input_shape` (H, W, C), `num_classes`, `name` and `preprocessing` where they are known
(None otherwise), and `predict(images, batch_size)`: logits of many images through the chunked
executor. Models always run in inference mode.
"""
import os
from typing import Any, Callable, Optional

import numpy as np
import tensorflow as tf

from models.architectures import folding, zoo
from models.architectures import guided as guided_views
from models.architectures import native_explainers as native_views
from models.formats import tf1_models
from models.formats.exporting import INFO_PATH, LoadedModel
from models.formats.loading import load
from models.foundation import executor, workload
from models.foundation.errors import UserError
from models.foundation.tracing import kept, quiet_retracing


class Adapter:
    """The common part: traced batched prediction and the views a plain model lacks."""

    model: Any = None  # the object the caller passed (cache key)
    input_shape: Optional[tuple] = None
    num_classes: Optional[int] = None
    name: str = "model"
    preprocessing: Optional[str] = None

    def prepare(self, guided: bool = False, cam: bool = False) -> None:
        """Builds or checks the views a method needs, eagerly (never while a function traces)."""
        if guided or cam:
            raise UserError(f"model {self.name!r} is a plain callable or SavedModel: it has no "
                            f"{'guided-backprop' if guided else 'Grad-CAM'} view; pass a Keras "
                            "model or a model exported with models.export")

    def outputs(self, x: tf.Tensor) -> Any:
        return self.logits(x)

    def logits(self, x: tf.Tensor) -> tf.Tensor:
        raise NotImplementedError

    def guided_logits(self, x: tf.Tensor) -> tf.Tensor:
        self.prepare(guided=True)  # (stops with one line: no guided view here)
        raise NotImplementedError

    def cam(self, x: tf.Tensor, targets: tf.Tensor) -> tuple:
        self.prepare(cam=True)  # (stops with one line: no Grad-CAM view here)
        raise NotImplementedError

    def native_names(self) -> tuple:
        """The native explainers the model offers (`models.architectures.native_explainers`)."""
        return ()

    def require_native(self, name: str) -> None:
        """A one-line error unless the model offers the native explainer `name`."""
        if name not in self.native_names():
            raise UserError(f"model {self.name!r} has no native {name} explainer; it offers "
                            f"{', '.join(self.native_names()) or 'none'} (the {name} explainer "
                            "needs a zoo model of its architecture)")

    def native(self, name: str, x: tf.Tensor, targets: tf.Tensor) -> tf.Tensor:
        """The native explanation `name` [N, H, W] of the model."""
        self.require_native(name)
        return self._native(name, x, targets)

    def _native(self, name, x, targets):
        raise NotImplementedError

    def predict(self, images: Any, batch_size: int = 64) -> np.ndarray:
        """float32 [N, classes]: logits of `images` in chunks of `batch_size` (inference mode)."""
        images = tf.convert_to_tensor(np.asarray(images, np.float32))
        if images.shape[0] == 0:
            return np.zeros((0, self.num_classes or 0), np.float32)
        workload.count("forward", images.shape[0])
        chunk = executor.chunk_size(images.shape[0], batch_size)  # 16 images: no chunk of 64

        def build():
            def run(images):
                return executor.collect(tf.shape(images)[0], chunk, lambda items: tf.cast(
                    self.logits(tf.gather(images, items)), tf.float32), item_shape=[None])
            return quiet_retracing(tf.function(run, reduce_retracing=True, autograph=False))
        return self.traced(("predict", chunk), build)(images).numpy()

    def traced(self, key: tuple, build: Callable[[], Callable]) -> Callable:
        """The traced function `build()` makes of this model, built once per `key` and kept
        with the adapter (`models.foundation.tracing.kept`; a loaded model keeps one adapter),
        so every caller with the same key (a benchmark made again for a variant, say) reuses
        its trace."""
        return kept(self, key, build)


class KerasAdapter(Adapter):
    """A live Keras model."""

    def __init__(self, model: Any, feature_layer: Optional[str] = None):
        if len(model.inputs) != 1 or len(model.inputs[0].shape) != 4:
            raise UserError(f"model {model.name!r} must take one NHWC image input")
        self.model = model
        self.logits_model = guided_views.logits_model(model)
        # every pass runs with the batch norms folded (docs/models.md, "Folded inference"), as
        # an export of the model computes it
        self._outputs = folding.folded_call(model)
        self._logits = (self._outputs if self.logits_model is model
                        else folding.folded_call(self.logits_model))
        dims = tuple(model.inputs[0].shape[1:])  # None: a size the model leaves open
        self.input_shape = None if None in dims else tuple(int(d) for d in dims)
        self.num_classes = int(model.outputs[0].shape[-1])
        self.name = model.name
        registered = zoo.REGISTRY.get(model.name)
        self.preprocessing = registered.preprocessing if registered else None
        self._feature_layer = feature_layer
        self._features_and_logits: Any = None  # built on first use (prepare)
        self._guided: Any = None

    def prepare(self, guided: bool = False, cam: bool = False) -> None:
        if guided and self._guided is None:
            self._guided = folding.folded_call(guided_views.guided_model(self.logits_model))
        if cam and self._features_and_logits is None:
            self._features_and_logits = folding.folded_call(zoo.features_and_logits_model(
                self.logits_model, self._feature_layer))

    def outputs(self, x: tf.Tensor) -> Any:
        return self._outputs(x)

    def logits(self, x: tf.Tensor) -> tf.Tensor:
        return self._logits(x)

    def guided_logits(self, x: tf.Tensor) -> tf.Tensor:
        self.prepare(guided=True)
        return self._guided(x)

    def cam(self, x: tf.Tensor, targets: tf.Tensor) -> tuple:
        self.prepare(cam=True)
        return zoo.cam_outputs(self._features_and_logits, x, targets)

    def native_names(self) -> tuple:
        registered = zoo.REGISTRY.get(self.model.name)
        return registered.native if registered else ()

    def _native(self, name, x, targets):
        return native_views.explain(name, self.logits_model, x, targets)


class LoadedAdapter(Adapter):
    """A SavedModel reloaded with `models.load`."""

    def __init__(self, loaded: Any, feature_layer: Optional[str] = None):
        self.check_feature_layer(loaded, feature_layer)
        self.model = self.loaded = loaded
        self.input_shape = loaded.input_shape
        self.num_classes = loaded.num_classes
        self.name = loaded.name
        self.preprocessing = loaded.preprocessing

    @staticmethod
    def check_feature_layer(loaded: Any, feature_layer: Optional[str]) -> None:
        """A one-line error unless `feature_layer` is None or the one `loaded` was exported
        with (its Grad-CAM endpoint is fixed at export)."""
        if feature_layer not in (None, loaded.feature_layer):
            raise UserError(f"model {loaded.path} was exported with feature layer "
                            f"{loaded.feature_layer!r}; re-export it to use {feature_layer!r}")

    def prepare(self, guided: bool = False, cam: bool = False) -> None:
        """Nothing to build; fails early if guided backprop is asked of a model without it."""
        if guided and not self.loaded.info.get("has_guided"):
            raise UserError(f"model {self.loaded.path} has no guided-backprop endpoint: "
                            f"{self.loaded.info.get('guided_unavailable', 're-export it')}")

    def logits(self, x: tf.Tensor) -> tf.Tensor:
        return self.loaded(x)

    def guided_logits(self, x: tf.Tensor) -> tf.Tensor:
        return self.loaded.guided(x)

    def cam(self, x: tf.Tensor, targets: tf.Tensor) -> tuple:
        return self.loaded.cam(x, targets)

    def native_names(self) -> tuple:
        return tuple(self.loaded.info.get("native", ()))

    def _native(self, name, x, targets):
        return self.loaded.native(name, x, targets)


class CallableAdapter(Adapter):
    """A plain callable, or a SavedModel not written by `models.export` (`.serve`, else its
    `serving_default` signature; `output_key` picks one output of a dict)."""

    def __init__(self, model: Any, output_key: Optional[str] = None):
        self.model = model
        call = model
        if not callable(model):
            if hasattr(model, "serve"):
                call = model.serve
            elif "serving_default" in getattr(model, "signatures", {}):
                call = model.signatures["serving_default"]
            else:
                raise UserError(f"cannot use a {type(model).__name__} as a model: pass a Keras "
                                "model, a models.load object, a SavedModel or a callable")
        self._call = call
        self._output_key = output_key
        self.name = getattr(model, "__name__", type(model).__name__)

    def logits(self, x: tf.Tensor) -> tf.Tensor:
        output = self._call(x)
        if isinstance(output, dict):
            if self._output_key is None and len(output) != 1:
                raise UserError(f"the model returns {sorted(output)}; pass output_key")
            output = output[self._output_key] if self._output_key else next(iter(output.values()))
        return output


def adapt(model: Any, feature_layer: Optional[str] = None,
          output_key: Optional[str] = None) -> Adapter:
    """The adapter of `model` (see the module docstring); an adapter is returned as it is."""
    if isinstance(model, Adapter):
        return model
    if isinstance(model, (str, os.PathLike)):
        path = os.fspath(model)
        if os.path.isfile(os.path.join(path, INFO_PATH)) or tf1_models.is_tf1(path):
            model = load(path)
        elif os.path.isfile(os.path.join(path, "saved_model.pb")):
            return CallableAdapter(tf.saved_model.load(path), output_key)
        else:
            raise UserError(f"{path} is not a SavedModel directory (no saved_model.pb); pass an "
                            "exported model directory")
    if isinstance(model, LoadedModel):
        # One adapter per loaded model, kept on it: its traced predictors are reused by every
        # call (a fresh adapter per call retraced `predict` on every batch, 0.3-0.4 s each).
        LoadedAdapter.check_feature_layer(model, feature_layer)
        return kept(model, "adapter", lambda: LoadedAdapter(model))
    # Every other model keeps its adapter too, per feature layer or output key: a fresh adapter
    # per call traced its predictor again (85 ms a call of 24 images on a cheap CNN).
    if hasattr(model, "layers") and hasattr(model, "inputs"):
        return kept(model, ("adapter", feature_layer),
                    lambda: KerasAdapter(model, feature_layer))
    return kept(model, ("adapter", output_key), lambda: CallableAdapter(model, output_key))
