"""Export a Keras model as a SavedModel that a notebook can load and differentiate.

`export(model, path)` writes a SavedModel whose endpoints take float32 NHWC images of the model's
input size and any batch size:

* `serve` (also the `serving_default` signature): images -> logits `[N, classes]`;
* `features_and_logits`: images -> `{"features": [N, h, w, k], "logits": [N, classes]}`, the
  Grad-CAM feature map (`models.feature_layer_name`) and the logits of the same forward pass;
* `cam`: (images, int32 targets `[N]`) -> features, logits and `gradients`, the gradient of each
  image's target logit with respect to its feature map (what every CAM method needs);
* `guided`: images -> logits through guided ReLUs (`models.architectures.guided`), so input
  gradients of it are guided-backprop maps; absent (`has_guided` False) when the model has a
  ReLU it cannot gate.

A model whose last layer applies a softmax is exported without it: endpoints give logits.

Every endpoint computes with the model's batch norms folded into its convolutions where it has
any (`models.architectures.folding`, docs/models.md, "Folded inference"). Beside it,
`assets.extra/model_info.json` records the model's name, input shape, classes, feature layer,
input space (`preprocessing`), `inference` ("folded batch norms" or "keras") and a
content-derived `model_id` (`<name>-<weights digest>`, `-folded` added when the endpoints fold).
The SavedModel is written under a temporary name and renamed when complete, so an interrupted
export never looks finished.

`load(path)` returns a `LoadedModel`: call it on images for logits (differentiable under
`tf.GradientTape`), or use `.features_and_logits(images)`.
"""
import contextlib
import dataclasses
import hashlib
import json
import os
import warnings
from typing import Any, Callable, Iterator, Optional, Union

import keras
import numpy as np
import tensorflow as tf

from models.architectures import folding, native_explainers, zoo
from models.architectures import guided as guided_views
from models.formats.preprocessing import check_images, input_space
from models.foundation.errors import MissingPathError, UserError, check_one_of
from models.foundation.files import atomic_output, build_lock, project_cache_dir, read_json
from models.foundation.rules import PRECISIONS
from models.foundation.tracing import assigner, set_aside
from models.foundation.tracing import kept as kept_builds

INFO_PATH = os.path.join("assets.extra", "model_info.json")
WEIGHTS_PATH = os.path.join("assets.extra", "model.weights.h5")
# a model outside the zoo: its Keras architecture (configuration only, no code), beside its
# weights, so that `rebuild` can give its layers to the measures that re-initialise or read them
KERAS_CONFIG_PATH = os.path.join("assets.extra", "keras_model.json")
MAX_CONFIG_BYTES = 64 << 20  # a configuration file read back is bounded by this size
FORMAT = "attribution-benchmarks/savedmodel/v1"


def weights_digest(model: Any) -> str:
    """A short SHA-256 digest of all of `model`'s weights, in order: equal weights, equal digest."""
    digest = hashlib.sha256()
    for weight in model.get_weights():
        digest.update(np.ascontiguousarray(weight).tobytes())
    return digest.hexdigest()[:12]


def content_id(model: keras.Model) -> str:
    """The `model_id` an export of the Keras `model` records by default: `<name>-<weights
    digest>` of its logits view, `-folded` added when its endpoints fold its batch norms."""
    return _logits_id(guided_views.logits_model(model))


def _logits_id(model: keras.Model) -> str:
    """`content_id` of a logits view."""
    # a model whose endpoints fold its batch norms (docs/models.md, "Folded inference") has an
    # id of its own: an export made before they did computed otherwise with the same weights
    return f"{model.name}-{weights_digest(model)}" + ("-folded" if folding.folds(model) else "")


def _endpoint_variables(variables: list) -> list:
    """The TensorFlow variables under Keras's, as an export lists what its endpoints read."""
    return [variable.value if hasattr(variable, "value") else variable for variable in variables]


def _model_info(model, preprocessing, feature_layer, model_id, extra):
    if len(model.inputs) != 1 or len(model.inputs[0].shape) != 4:
        raise UserError(f"model {model.name!r} must take one NHWC image input to be exported")
    if len(model.outputs[0].shape) != 2:
        raise UserError(f"model {model.name!r} must output [N, classes] logits to be exported")
    if preprocessing is None:
        preprocessing = zoo.REGISTRY[model.name].preprocessing if model.name in zoo.REGISTRY \
            else "pixels01"
    input_space(preprocessing)  # validates the name
    feature_layer = feature_layer or zoo.feature_layer_name(model)
    features_model = zoo.features_and_logits_model(model, feature_layer)
    return features_model, {
        "format": FORMAT,
        "name": model.name,
        "model_id": model_id or _logits_id(model),
        "inference": "folded batch norms" if folding.folds(model) else "keras",
        "input_shape": [int(d) for d in model.inputs[0].shape[1:]],
        "num_classes": int(model.outputs[0].shape[-1]),
        "feature_layer": feature_layer,
        "feature_shape": [int(d) for d in features_model.outputs[0].shape[1:]],
        "preprocessing": preprocessing,
        "build_options": {key: value for key, value in
                          getattr(model, "build_options", {}).items()
                          if key != "weights" and isinstance(value, (int, float, str, bool))},
        "tensorflow_version": tf.__version__,
        "keras_version": keras.__version__,
        "extra": dict(extra or {}),
    }


def export(model: Any, path: Union[str, os.PathLike], *, preprocessing: Optional[str] = None,
           feature_layer: Optional[str] = None, model_id: Optional[str] = None,
           extra: Optional[dict] = None, overwrite: bool = False) -> dict:
    """Writes `model` as a SavedModel at `path` (see the module docstring); returns the info dict.

    `preprocessing` names the model's input space (default: the registry's for zoo models, else
    "pixels01"); `extra` is any JSON-serialisable metadata (e.g. training accuracy).
    """
    path = os.fspath(path)
    if os.path.exists(path) and not overwrite:
        raise UserError(f"{path} already exists; pass overwrite=True or choose another path")
    if isinstance(model, keras.Model) and getattr(model, "inputs", None) is None:
        raise UserError(f"models.export takes a functional or Sequential Keras model; "
                        f"{type(model).__name__} is subclassed (it has no inputs): wrap it, "
                        "inputs = keras.Input(shape); keras.Model(inputs, model(inputs))")
    given = model
    model = guided_views.logits_model(model)
    features_model, info = _model_info(model, preprocessing, feature_layer, model_id, extra)
    image_spec = tf.TensorSpec([None, *info["input_shape"]], tf.float32, name="images")
    target_spec = tf.TensorSpec([None], tf.int32, name="targets")

    # every endpoint with the batch norms folded (docs/models.md, "Folded inference")
    features_and_logits = folding.folded_call(features_model)

    def cam(images, targets):
        return dict(zip(("features", "logits", "gradients"),
                        zoo.cam_outputs(features_and_logits, images, targets)))

    # A plain tf.Module holding the endpoints and the variables they read: saving it traces
    # each endpoint once, where Keras' ExportArchive also traced every layer's functions
    # (about 2x the time for a ResNet-50: scripts/bench_export.py, docs/models.md).
    endpoints = {
        "serve": (folding.folded_call(model), [image_spec]),
        "features_and_logits": (lambda images: dict(zip(
            ("features", "logits"), features_and_logits(images))), [image_spec]),
        "cam": (cam, [image_spec, target_spec]),
    }
    variables = list(model.variables)
    try:
        guided = guided_views.guided_model(model)
    except UserError as error:
        info["guided_unavailable"] = str(error)
    else:
        variables += guided.variables
        endpoints["guided"] = (folding.folded_call(guided), [image_spec])
    info["has_guided"] = "guided_unavailable" not in info
    offered = zoo.REGISTRY[model.name].native if model.name in zoo.REGISTRY else ()
    for name in offered:
        endpoints[native_endpoint(name)] = (
            lambda images, targets, name=name: native_explainers.explain(name, model, images,
                                                                         targets),
            [image_spec, target_spec])
    info["native"] = list(offered)
    archive = tf.Module()
    archive.model_variables = _endpoint_variables(variables)
    signatures = {}
    for name, (function, signature) in endpoints.items():
        # traced once, inside the save (a trace made before it would be made again there)
        signatures[name] = tf.function(function, input_signature=signature)
        setattr(archive, name, signatures[name])
    signatures["serving_default"] = signatures["serve"]

    with atomic_output(path) as temporary:
        tf.saved_model.save(archive, temporary, signatures=signatures)
        os.makedirs(os.path.join(temporary, "assets.extra"), exist_ok=True)
        with open(os.path.join(temporary, INFO_PATH), "w", encoding="utf-8") as handle:
            json.dump(info, handle, indent=2, sort_keys=True)
        if info["name"] in zoo.REGISTRY:  # a zoo model can be rebuilt for further training
            model.save_weights(os.path.join(temporary, WEIGHTS_PATH))
        elif isinstance(given, keras.Model):  # a researcher's own: its architecture and weights
            architecture = _architecture(given)
            if architecture is not None:
                with open(os.path.join(temporary, KERAS_CONFIG_PATH), "w",
                          encoding="utf-8") as handle:
                    handle.write(architecture)
                given.save_weights(os.path.join(temporary, WEIGHTS_PATH))
    return info


def _architecture(model: keras.Model) -> Optional[str]:
    """`model`'s Keras architecture as JSON, or None where Keras cannot write one (a subclassed
    model without `get_config`: its export then keeps no architecture, and `rebuild` says so)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return model.to_json()
    except Exception:  # whatever Keras raises for a model it cannot describe
        return None


_INT = {"type": "integer", "minimum": 1}
# The fields of model_info.json every reader relies on (written by `export` above).
INFO_SCHEMA = {
    "type": "object",
    "required": ["name", "model_id", "input_shape", "num_classes", "feature_layer",
                 "preprocessing"],
    "properties": {
        "name": {"type": "string"}, "model_id": {"type": "string"},
        "input_shape": {"type": "array", "items": _INT, "minItems": 3, "maxItems": 3},
        "num_classes": _INT, "feature_layer": {"type": "string"},
        "preprocessing": {"type": "string"},
        "feature_shape": {"type": "array", "items": _INT},
        "build_options": {"type": "object"}, "extra": {"type": "object"},
        "native": {"type": "array", "items": {"type": "string"}},
        "inference": {"type": "string"},
    },
}


def native_endpoint(name: str) -> str:
    """The SavedModel endpoint of the native explainer `name`."""
    return "native_" + name.lower()


def read_info(path: Union[str, os.PathLike]) -> dict:
    """The `model_info.json` of an export at `path` (checked to be one), without loading it."""
    path = os.fspath(path)
    if os.path.isfile(path) and path.endswith((".keras", ".h5")):
        raise UserError(f"model {path} is a saved Keras model, not an export folder: export it "
                        "once, models.export(keras.models.load_model(path), folder, "
                        "preprocessing=...), and pass the folder (docs/models.md)")
    if not os.path.isdir(path):
        raise MissingPathError(f"model directory {path} does not exist; export a model there "
                               "with models.export or pass the right --model_path")
    info_file = os.path.join(path, INFO_PATH)
    if not os.path.isfile(os.path.join(path, "saved_model.pb")) or not os.path.isfile(info_file):
        raise UserError(f"{path} is not a model exported by models.export (no saved_model.pb "
                        f"or {INFO_PATH}); re-export it")
    return read_json(info_file, "model info file", INFO_SCHEMA)


def rebuild(path: Union[str, os.PathLike], **options: Any) -> Any:
    """The trainable Keras model of an export of a zoo model: `models.build` of the recorded
    name, shape, classes and builder options (`options` override them), with the exported
    weights. Reads only the info and weights files, not the SavedModel."""
    info = read_info(path)
    weights = os.path.join(os.fspath(path), WEIGHTS_PATH)
    if info["name"] not in zoo.REGISTRY:  # a researcher's own architecture
        config = os.path.join(os.fspath(path), KERAS_CONFIG_PATH)
        if os.path.isfile(config) and os.path.isfile(weights) and not options:
            return _rebuild_own(config, weights, os.fspath(path))
        raise UserError(f"{path} holds a model outside the zoo ({info['name']}), which its "
                        "export cannot rebuild as Keras layers to re-initialise or read (an "
                        "export made before this version keeps no architecture: re-export it); "
                        "in Python, the measures also take the Keras model itself")
    if not os.path.isfile(weights):
        raise UserError(f"{path} holds no Keras weights of a zoo model (exports of zoo models "
                        "made before this version lack them); re-export it")
    return build_with_weights(info, weights, os.fspath(path), **options)


def _rebuild_own(config: str, weights: str, what: str) -> Any:
    """The Keras model of an export outside the zoo, from its architecture file (Keras's safe
    deserialisation: standard layers and registered ones, never code from the file, so a
    Lambda layer is refused) and its weights."""
    if os.path.getsize(config) > MAX_CONFIG_BYTES:
        raise UserError(f"the Keras architecture of {what} is over {MAX_CONFIG_BYTES} bytes; "
                        "re-export the model")
    with open(config, encoding="utf-8") as handle:
        text = handle.read()
    try:
        model = keras.models.model_from_json(text)
        with warnings.catch_warnings():  # Keras notes an empty tracking container; harmless
            warnings.filterwarnings("ignore", message="Skipping nested container")
            model.load_weights(weights)
    except Exception as error:  # a custom or unsafe layer, a damaged file: one line
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise UserError(f"cannot rebuild the Keras layers of {what} ({type(error).__name__}: "
                        f"{first[:200]}); in Python, the measures also take the Keras model "
                        "itself") from None
    return model


def build_with_weights(info: dict, weights: str, what: str, **options: Any) -> Any:
    """`models.build` of the name, shape, classes and builder options recorded in an export's
    `info` (`options` override them), loaded with the Keras weights file `weights`."""
    options = {**info.get("build_options", {}), **options}
    model = zoo.build(info["name"], info["num_classes"], tuple(info["input_shape"]), **options)
    try:
        with warnings.catch_warnings():  # Keras notes an empty tracking container; harmless
            warnings.filterwarnings("ignore", message="Skipping nested container")
            model.load_weights(weights)
    except ValueError as error:
        raise UserError(f"the weights of {what} do not fit a default {info['name']} "
                        f"({str(error).splitlines()[0]}); pass its builder options") from None
    return model


def export_in_precision(path: Union[str, os.PathLike], precision: str,
                        folder: Optional[str] = None) -> str:
    """The path of an export of the zoo model in `path` that computes in `precision`
    (`models.foundation.rules.PRECISIONS`; float32 gives `path` itself): the same weights in a
    Keras model built under that mixed precision (`zoo.in_precision`), exported once into
    `folder` (default: the project cache's `precision/`) as `<model_id>-<precision>`, its
    model id `<model_id>@<precision>`, so that everything computed with it has an origin of its
    own (docs/models.md, "Precision"). A folder made from other weights is refused."""
    check_one_of("precision", precision, PRECISIONS)
    if precision == "float32":
        return os.fspath(path)
    info = read_info(path)
    target = os.path.join(folder or project_cache_dir("precision"),
                          f"{info['model_id']}-{precision}")
    wanted = {"precision": precision, "float32_model_id": info["model_id"]}
    with build_lock(target, f"the {precision} export of {path}"):  # one writer at a time
        if os.path.isdir(target):
            found = {key: read_info(target).get("extra", {}).get(key) for key in wanted}
            if found != wanted:
                raise UserError(f"{target} holds another model ({found}); delete it")
            return target
        model = zoo.in_precision(lambda: rebuild(path), precision)
        export(model, target, preprocessing=info["preprocessing"],
               feature_layer=info["feature_layer"], model_id=f"{info['model_id']}@{precision}",
               extra=wanted, overwrite=True)
    return target


def _exchange(own: list, theirs: list) -> tuple:
    """(take, give back): take copies the `own` variables' values aside, then `theirs` into
    them; give back puts the copied values back; each a traced call (`tracing.set_aside`,
    `tracing.assigner`), where a variable at a time cost about 0.15 s for a network of 250
    variables (a card's cell). A variable listed twice (an export lists the guided view's shared
    ones again) is copied once."""
    pairs = list({variable.ref(): (variable, source) for variable, source in zip(own, theirs)}
                 .values())
    keep, give_back = set_aside([variable for variable, _ in pairs])
    put = assigner([variable for variable, _ in pairs], [source for _, source in pairs])

    def take():
        keep()
        put()

    return take, give_back


def _variables_of(source: Any) -> Optional[list]:
    """The variables a holder takes from `source`: an export's (`LoadedModel._variables`), a
    Keras model's logits view's in the order its export lists them, or None."""
    if isinstance(source, LoadedModel):
        return source._variables()
    if isinstance(source, keras.Model):
        return _endpoint_variables(guided_views.logits_model(source).variables)
    return None


@dataclasses.dataclass(frozen=True)
class _Description:
    """What `can_hold` compares of a Keras model (as its export would record it)."""

    name: str
    input_shape: tuple
    num_classes: int


def _described(source: Any) -> Any:
    """`source` itself (an export), or a Keras model's `_Description`."""
    if isinstance(source, LoadedModel):
        return source
    logits = guided_views.logits_model(source)
    return _Description(logits.name, tuple(int(d) for d in logits.inputs[0].shape[1:]),
                        int(logits.outputs[0].shape[-1]))


class LoadedModel:
    """A model exported by `export`, reloaded: images -> logits, plus the Grad-CAM feature map.

    Attributes: `name`, `model_id`, `input_shape` (H, W, C), `num_classes`, `feature_layer`,
    `preprocessing`, `info` (the whole model_info.json), `path`, and `held`: the export or Keras
    model whose weights it computes with inside `holding` (None outside).
    """

    held: Any = None

    def __init__(self, path: Union[str, os.PathLike]):
        self.info = read_info(path)
        path = self.path = os.fspath(path)
        self.name = self.info["name"]
        self.model_id = self.info["model_id"]
        self.input_shape = tuple(self.info["input_shape"])
        self.num_classes = self.info["num_classes"]
        self.feature_layer = self.info["feature_layer"]
        self.preprocessing = self.info["preprocessing"]
        try:
            self._saved = tf.saved_model.load(path)
        except Exception as error:  # truncated saved_model.pb or variables: many error types
            detail = (str(error).strip().splitlines() or [type(error).__name__])[0][:200]
            raise UserError(f"cannot load the model in {path}: its saved_model.pb or variables "
                            f"are damaged ({detail}); re-export the model") from None

    def _check(self, images):
        images = tf.convert_to_tensor(images, tf.float32)
        check_images(images, self.input_shape, what=f"images for model {self.path}")
        return images

    def __call__(self, images, training=False):
        """Logits `[N, classes]` for preprocessed images `[N, H, W, C]` (always inference mode)."""
        del training  # An exported model always runs in inference mode.
        return self._checked_logits(self._saved.serve(self._check(images)))

    def _checked_logits(self, logits):
        """`logits` if the model gave a [N, classes] tensor, else one line naming the model."""
        if not isinstance(logits, tf.Tensor) or logits.shape.rank != 2 or \
                logits.shape[-1] not in (None, self.num_classes):
            shape = getattr(logits, "shape", None)
            kind = (f"tensor of shape {list(shape or ())}" if isinstance(logits, tf.Tensor)
                    else type(logits).__name__)
            raise UserError(f"model {self.path} returned a {kind}, not [N, {self.num_classes}] "
                            "logits; re-export it with models.export")
        return logits

    def features_and_logits(self, images: Any) -> tuple:
        """(feature map `[N, h, w, k]`, logits `[N, classes]`) from one forward pass."""
        outputs = self._outputs(self._saved.features_and_logits(self._check(images)),
                                ("features", "logits"))
        return outputs["features"], self._checked_logits(outputs["logits"])

    def cam(self, images: Any, targets: Any) -> tuple:
        """(features, logits, d logit[target] / d features) for CAM methods."""
        outputs = self._outputs(self._saved.cam(self._check(images), tf.cast(targets, tf.int32)),
                                ("features", "logits", "gradients"))
        return (outputs["features"], self._checked_logits(outputs["logits"]),
                outputs["gradients"])

    def _outputs(self, outputs, names):
        """`outputs` if it is a dict holding `names`, else one line naming the model."""
        if not isinstance(outputs, dict) or not set(names) <= set(outputs):
            raise UserError(f"model {self.path} returned {type(outputs).__name__} without "
                            f"{', '.join(names)}; re-export it with models.export")
        return outputs

    def guided(self, images: Any) -> tf.Tensor:
        """Logits through guided ReLUs: their input gradient is the guided-backprop map."""
        if not self.info.get("has_guided"):
            raise UserError(f"model {self.path} has no guided-backprop endpoint: "
                            f"{self.info.get('guided_unavailable', 're-export it')}")
        return self._saved.guided(self._check(images))

    def native(self, name: str, images: Any, targets: Any) -> tf.Tensor:
        """The native explanation `name` [N, H, W] (`models.architectures.native_explainers`),
        if the model offers it."""
        if name not in self.info.get("native", []):
            raise UserError(f"model {self.path} ({self.name}) has no native {name} explainer; "
                            f"it offers {', '.join(self.info.get('native', [])) or 'none'}")
        endpoint = getattr(self._saved, native_endpoint(name))
        return endpoint(self._check(images), tf.cast(targets, tf.int32))

    def _variables(self) -> Optional[list]:
        """The variables every endpoint reads (`export`'s `model_variables`), or None for an
        export without that list."""
        found = getattr(self._saved, "model_variables", None)
        return None if found is None else list(found)

    def can_hold(self, source: Any) -> bool:
        """Whether `source` is the same network as this export, so that `holding(source)`
        applies: another export of it (name, input, classes, input space and every variable's
        shape and dtype, in order), or a Keras model of it (a rebuilt copy: name, input,
        classes and the variables of its logits view, in the export's order)."""
        own, theirs = self._variables(), _variables_of(source)
        if own is None or theirs is None or len(theirs) > len(own):
            return False
        if isinstance(source, LoadedModel):
            same = len(own) == len(theirs) and self.preprocessing == source.preprocessing
        else:  # an export lists the guided view's variables again after the model's own
            same = {v.ref() for v in own[len(theirs):]} <= {v.ref() for v in own[:len(theirs)]}
        return same and all(getattr(self, key) == getattr(_described(source), key)
                            for key in ("name", "input_shape", "num_classes")) and all(
            a.shape == b.shape and a.dtype == b.dtype for a, b in zip(own, theirs))

    @contextlib.contextmanager
    def holding(self, source: Any) -> Iterator[None]:
        """Inside the block this model computes with `source`'s weights (`can_hold`: another
        export of the same network, or a Keras model of it), its own after: the traced
        functions kept with this model (the engine's methods, the scorers) serve `source`'s
        values too, where a second model was traced again for each (docs/report_card.md,
        "Where the card's time goes"). The weights are copied in when the block opens: a Keras
        source changed inside it is not followed. Holding the source it already holds is a
        no-op; holding another is an error."""
        if self.held is source:
            yield
            return
        if self.held is not None or not self.can_hold(source):
            raise ValueError(f"{self.path} cannot hold the weights of "
                             f"{getattr(source, 'path', None) or getattr(source, 'name', source)}")
        take, give_back = kept_builds(self, ("weights of", source),
                                      lambda: _exchange(self._variables() or [],
                                                        _variables_of(source) or []))
        take()
        self.held = source
        try:
            yield
        finally:
            give_back()
            self.held = None

    def __repr__(self):
        return (f"LoadedModel({self.path!r}, name={self.name!r}, input_shape={self.input_shape}, "
                f"num_classes={self.num_classes})")


def while_holding(loaded: LoadedModel, source: Any, function: Callable) -> Callable:
    """`function`, run while `loaded` holds `source`'s weights (`LoadedModel.holding`)."""
    def held(*args, **kwargs):
        with loaded.holding(source):
            return function(*args, **kwargs)
    return held


def stand_in(loaded: Optional[LoadedModel], source: Any) -> tuple[Any, Callable[[Callable],
                                                                                 Callable]]:
    """(model, within): the model that computes as `source` does, and `within(function)`, the
    `function` run so that it does: `loaded` holding `source`'s weights where it can hold them
    (its traced functions serve `source`: docs/report_card.md, "Sanity check"), else `source`
    itself with `within` leaving functions as they are."""
    if loaded is None or not loaded.can_hold(source):
        return source, lambda function: function
    return loaded, lambda function: while_holding(loaded, source, function)
