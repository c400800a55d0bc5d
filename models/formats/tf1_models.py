"""TF1 SavedModels read by tensor name, such as BAM's released models (docs/models.md,
"TF1 SavedModels").

BAM released its models (obj, scene, scene_only, scene1..scene10) as TF1 SavedModels (tag
`serve`) exported by the TF official ResNet code: input `input_tensor:0` [1, 224, 224, 3]
(float32 RGB minus the means 123.68 / 116.78 / 103.94: `caffe_rgb`), logits
`resnet_model/final_dense:0`, stage outputs `resnet_model/block_layer1..4:0`. The batch
dimension was fixed at 1 at export. `Tf1Model` re-imports the graph with a batch-free input
placeholder, restores the variables, and prunes functions
between named tensors: logits for a batch of any size, exact input gradients, the Grad-CAM
feature map (`block_layer4`) and the TCAV bottlenecks (`bottleneck`,
`bottleneck_log_softmax_gradient`), gradients built inside the TF1 graph. It offers the
interface of a `models.load` object, so every binary's --model_dir / --model_path takes such a
folder. The names are configurable (`Tf1Names`) for other TF1 exports.
"""
import dataclasses
import os
import shutil
import tempfile
from typing import Any

import tensorflow as tf

from models.formats.exporting import LoadedModel
from models.formats.preprocessing import check_images, input_space
from models.foundation.errors import UserError
from models.foundation.files import file_sha256

FORMAT = "tf1_savedmodel"


@dataclasses.dataclass(frozen=True)
class Tf1Names:
    """Where a TF1 export keeps what the project needs (defaults: BAM's released models)."""

    input: str = "input_tensor:0"
    logits: str = "resnet_model/final_dense:0"
    bottlenecks: tuple = tuple((f"block_layer{i}", f"resnet_model/block_layer{i}:0")
                               for i in range(1, 5))
    feature: str = "block_layer4"
    preprocessing: str = "caffe_rgb"
    tag: str = "serve"


def _meta_graph(path: str, tag: str):
    """The MetaGraphDef of `tag` in the SavedModel at `path`, or None."""
    from tensorflow.core.protobuf import saved_model_pb2

    file = os.path.join(path, "saved_model.pb")
    if not os.path.isfile(file):
        return None
    saved = saved_model_pb2.SavedModel()
    try:
        with open(file, "rb") as handle:
            saved.ParseFromString(handle.read())
    except Exception:  # a damaged file is not a TF1 model we can read
        return None
    for meta in saved.meta_graphs:
        if tag in meta.meta_info_def.tags:
            return meta
    return None


def is_tf1(path: "str | os.PathLike", names: Tf1Names = Tf1Names()) -> bool:
    """Is `path` a TF1 SavedModel holding the input and logits tensors of `names`?"""
    meta = _meta_graph(os.fspath(path), names.tag)
    if meta is None or not meta.graph_def.node:
        return False
    nodes = {node.name for node in meta.graph_def.node}
    return all(name.split(":")[0] in nodes for name in (names.input, names.logits))


def _weights_digest(path: str) -> str:
    """A short digest of the variables files: the model's identity."""
    folder = os.path.join(path, "variables")
    names = sorted(os.listdir(folder)) if os.path.isdir(folder) else []
    return file_sha256(*(os.path.join(folder, name) for name in names))[:12]


def _input_shape(meta, names: Tf1Names) -> list:
    """The [N, H, W, C] shape of the graph's input placeholder (N = -1 when free)."""
    node = next((node for node in meta.graph_def.node
                 if node.name == names.input.split(":")[0]), None)
    return [dim.size for dim in node.attr["shape"].shape.dim] if node is not None else []


def read_info(path: "str | os.PathLike", names: Tf1Names = Tf1Names(),
              meta: Any = None) -> dict:
    """The identity of a TF1 SavedModel without importing its graph: name, model id (a digest
    of its variables), format, input shape and input space (`meta`: its graph, if already
    read)."""
    path = os.fspath(path)
    shape = _input_shape(meta or _meta_graph(path, names.tag), names)
    return {"format": FORMAT, "name": f"tf1:{os.path.basename(os.path.normpath(path))}",
            "model_id": f"tf1-{_weights_digest(path)}", "preprocessing": names.preprocessing,
            "feature_layer": names.feature, "input_shape": shape[1:],
            "bottlenecks": [name for name, _ in names.bottlenecks]}


class Tf1Model(LoadedModel):
    """A TF1 SavedModel addressed by tensor names, with the `models.load` interface."""

    def __init__(self, path: "str | os.PathLike", names: Tf1Names = Tf1Names()):
        path = self.path = os.fspath(path)
        self.names = names
        meta = _meta_graph(path, names.tag)
        if meta is None:
            raise UserError(f"{path} is not a TF1 SavedModel with the tag {names.tag!r}")
        shape = _input_shape(meta, names)
        if not shape:
            raise UserError(f"{path}: the graph has no tensor {names.input}; pass its names")
        if len(shape) != 4 or min(shape[1:]) < 1:
            raise UserError(f"{path}: input {names.input} has shape {shape}; a [N, H, W, C] "
                            "image input is needed")
        self._import(meta, path, tuple(shape[1:]))
        logits_shape = self._graph.get_tensor_by_name(names.logits).shape
        self.info = {
            **read_info(path, names, meta), "num_classes": int(logits_shape[-1]),
            "has_guided": False, "native": [],
            "guided_unavailable": "a TF1 graph read by tensor names has no guided view",
            "extra": {}}
        input_space(names.preprocessing)
        self.name, self.model_id = self.info["name"], self.info["model_id"]
        self.input_shape = tuple(shape[1:])
        self.num_classes = self.info["num_classes"]
        self.feature_layer = names.feature
        self.preprocessing = names.preprocessing
        self._functions: dict = {}

    def _import(self, meta, path, image_shape):
        """Loads the graph with a batch-free input: a scratch copy of the SavedModel whose input
        placeholder has a free batch dimension and whose recorded shapes (which carry the
        export's batch of 1) are dropped, loaded with TensorFlow's TF1 loader (which restores
        the variables as resource variables, usable inside any tf.function)."""
        from tensorflow.core.protobuf import saved_model_pb2

        names = self.names
        meta = type(meta).FromString(meta.SerializeToString())
        for node in meta.graph_def.node:
            if "_output_shapes" in node.attr:
                del node.attr["_output_shapes"]
            if node.name == names.input.split(":")[0]:
                node.attr["shape"].shape.dim[0].size = -1
        scratch = tempfile.mkdtemp(prefix="tf1_model_")
        try:
            with open(os.path.join(scratch, "saved_model.pb"), "wb") as handle:
                handle.write(saved_model_pb2.SavedModel(
                    saved_model_schema_version=1, meta_graphs=[meta]).SerializeToString())
            os.symlink(os.path.abspath(os.path.join(path, "variables")),
                       os.path.join(scratch, "variables"))
            try:
                self._loaded = tf.saved_model.load(scratch, tags=[names.tag])
            except Exception as error:  # many TensorFlow error types
                detail = (str(error).strip().splitlines() or [type(error).__name__])[0][:160]
                raise UserError(f"{path}: the TF1 graph cannot be loaded ({detail})") from None
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        self._graph = self._loaded.graph
        self._images = self._tensor(names.input)

    def _tensor(self, name):
        try:
            return self._graph.get_tensor_by_name(name)
        except (KeyError, ValueError):
            raise UserError(f"{self.path}: the graph has no tensor {name}") from None

    def _pruned(self, feed, fetches):
        key = (feed, tuple(fetches))
        if key not in self._functions:
            source = self._images if feed == "images" else self._tensor(feed)
            self._functions[key] = self._loaded.prune(
                feeds=[source], fetches=[self._tensor(name) for name in fetches])
        return self._functions[key]

    def _bottleneck_tensor(self, name):
        table = dict(self.names.bottlenecks)
        if name not in table:
            raise UserError(f"{self.path}: no bottleneck {name!r}; it has "
                            f"{', '.join(table)} and logit")
        return table[name]

    def __call__(self, images, training=False):
        del training
        images = tf.convert_to_tensor(images, tf.float32)
        check_images(images, self.input_shape, what=f"images for model {self.path}")
        return self._pruned("images", [self.names.logits])(images)[0]

    def features_and_logits(self, images: Any) -> tuple:
        images = tf.convert_to_tensor(images, tf.float32)
        feature = self._bottleneck_tensor(self.names.feature)
        features, logits = self._pruned("images", [feature, self.names.logits])(images)
        return features, logits

    def _gradients(self, source: str, score: str):
        """A pruned function (images, targets [N]) -> (values at `source`, logits, d score /
        d values), the gradient built in the TF1 graph (`score`: "logit" or "log_softmax" of
        each row's target)."""
        key = ("gradient", source, score)
        if key not in self._functions:
            graph = self._graph
            tensor = self._images if source == "images" else self._tensor(source)
            logits = self._tensor(self.names.logits)
            with graph.as_default():
                targets = tf.compat.v1.placeholder(tf.int32, [None])
                values = logits if score == "logit" else tf.nn.log_softmax(logits)
                chosen = tf.reduce_sum(tf.gather(values, targets, batch_dims=1))
                gradient = tf.compat.v1.gradients(chosen, tensor)[0]
            self._functions[key] = self._loaded.prune(
                feeds=[self._images, targets], fetches=[tensor, logits, gradient])
        return self._functions[key]

    def cam(self, images: Any, targets: Any) -> tuple:
        images = tf.convert_to_tensor(images, tf.float32)
        function = self._gradients(self._bottleneck_tensor(self.names.feature), "logit")
        return tuple(function(images, tf.cast(targets, tf.int32)))

    def bottleneck(self, bottleneck: str, images: Any) -> tf.Tensor:
        """Activations [N, ...] at a named bottleneck (`block_layer1..4`)."""
        tensor = self._bottleneck_tensor(bottleneck)
        return self._pruned("images", [tensor])(tf.convert_to_tensor(images, tf.float32))[0]

    def bottleneck_log_softmax_gradient(self, bottleneck: str, images: Any,
                                        target: int) -> tf.Tensor:
        """d log softmax(logits)[target] / d activations at a named bottleneck."""
        images = tf.convert_to_tensor(images, tf.float32)
        targets = tf.fill([tf.shape(images)[0]], tf.cast(target, tf.int32))
        function = self._gradients(self._bottleneck_tensor(bottleneck), "log_softmax")
        return function(images, targets)[2]

    def native(self, name: str, images: Any, targets: Any) -> tf.Tensor:
        raise UserError(f"model {self.path} (TF1) has no native {name} explainer")

    def __repr__(self):
        return (f"Tf1Model({self.path!r}, input_shape={self.input_shape}, "
                f"num_classes={self.num_classes})")
