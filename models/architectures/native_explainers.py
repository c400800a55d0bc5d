"""Explanations an architecture defines for itself ("native" explainers; docs/model_zoo.md).

`explain(name, model, images, targets)` -> float32 [N, H, W] for a live Keras zoo model; the
zoo records which of them a model offers (`ModelSpec.native`), and `models.export` writes one
endpoint per offered explainer, so exported models explain the same way.

* `BagNet`: the class evidence of every patch (the linear classifier on each position's
  features) minus the class bias, divided by the number of positions, so the patch values sum
  to the logit minus the bias; bilinearly resized to the image, scaled to keep that sum.
* `Bcos`: the B-cos contribution map: in explanation mode the model is the linear map W(x) of
  its 6-channel input [x, 1 - x], and the map is sum over the 6 channels of
  (d logit / d input) * input; it sums to the logit minus B-cos' constant logit bias.
* `Rollout` (Abnar & Zuidema 2020, as IDSDS runs it: from the second block): each block's
  attention averaged over heads, plus the identity, rows normalised, multiplied from the
  first block used to the last; the class token's row over the patches, nearest-resized to the
  image. Class-independent.
* `CheferLRP`: Chefer et al. (2021)'s transformer attribution (`models.architectures.chefer_lrp`).
"""
import dataclasses
from typing import Any, Callable, Sequence

import keras
import tensorflow as tf

from models.architectures import bagnet, bcos, chefer_lrp, vit
from models.foundation.errors import UserError, look_up

ROLLOUT_START = 1  # IDSDS: generate_rollout(start_layer=1)


@dataclasses.dataclass(frozen=True)
class NativeExplainer:
    """A native explainer: its name, a one-line summary and its function."""

    name: str
    summary: str
    explain: Callable  # (model, images [N, H, W, C], targets [N]) -> [N, H, W]


def _cached(model, key, make):
    """A helper model built once per model object."""
    cache = model.__dict__.setdefault("_native_models", {})
    if key not in cache:
        cache[key] = make()
    return cache[key]


def bagnet_evidence(model: Any, images: Any, targets: Any) -> tf.Tensor:
    """Per-patch evidence of the target, [N, h, w], summing to logit - bias."""
    layer = model.get_layer(bagnet.EVIDENCE_LAYER)
    evidence_model = _cached(model, "bagnet", lambda: keras.Model(model.inputs, layer.output))
    evidence = evidence_model(images, training=False)  # [N, h, w, classes]
    chosen = tf.gather(evidence, targets, axis=-1, batch_dims=1)  # [N, h, w]
    bias = tf.gather(layer.bias, targets)[:, None, None]
    positions = tf.cast(tf.shape(chosen)[1] * tf.shape(chosen)[2], tf.float32)
    return (chosen - bias) / positions


def _bagnet(model, images, targets):
    patches = bagnet_evidence(model, images, targets)
    height, width = int(images.shape[1]), int(images.shape[2])
    resized = tf.image.resize(patches[..., None], [height, width], method="bilinear")[..., 0]
    share = tf.cast(tf.shape(patches)[1] * tf.shape(patches)[2], tf.float32) / (height * width)
    return resized * share


def bcos_contributions(model: Any, images: Any, targets: Any) -> tf.Tensor:
    """[N, H, W]: the B-cos contribution map (see the module docstring)."""
    inverse = model.get_layer(bcos.INVERSE_LAYER)
    rest = _cached(model, "bcos", lambda: keras.Model(inverse.output, model.outputs[0]))
    six = inverse(images)
    with bcos.explanation_mode(rest), tf.GradientTape() as tape:
        tape.watch(six)
        score = tf.reduce_sum(tf.gather(rest(six, training=False), targets, batch_dims=1))
    return tf.reduce_sum(tape.gradient(score, six) * six, axis=-1)


def attention_rollout(attentions: Sequence, start: int = ROLLOUT_START) -> tf.Tensor:
    """[N, T, T] rollout of per-block attention [N, heads, T, T] (a list), from block `start`."""
    joint = None
    for attention in attentions[start:]:
        mean = tf.reduce_mean(attention, axis=1)
        mean = mean + tf.eye(tf.shape(mean)[-1], dtype=mean.dtype)
        mean = mean / tf.reduce_sum(mean, axis=-1, keepdims=True)
        joint = mean if joint is None else tf.matmul(mean, joint)
    return joint


def _rollout(model, images, targets):
    del targets  # rollout does not depend on the class
    cores = vit.attention_layers(model)
    if len(cores) <= ROLLOUT_START:
        raise UserError(f"model {model.name!r} has {len(cores)} attention blocks; Rollout "
                        f"starts at block {ROLLOUT_START + 1}")
    attention_model = _cached(model, "rollout", lambda: keras.Model(
        model.inputs, [layer.output[1] for layer in cores]))
    joint = attention_rollout(list(attention_model(images, training=False)))
    patches = joint[:, 0, 1:]
    side = int(round(int(patches.shape[-1]) ** 0.5))
    grid = tf.reshape(patches, [-1, side, side, 1])
    height, width = int(images.shape[1]), int(images.shape[2])
    return tf.image.resize(grid, [height, width], method="nearest")[..., 0]


EXPLAINERS = {explainer.name: explainer for explainer in (
    NativeExplainer("BagNet", "per-patch class evidence of a BagNet", _bagnet),
    NativeExplainer("Bcos", "contribution map W(x) x of a B-cos network", bcos_contributions),
    NativeExplainer("Rollout", "attention rollout of a ViT (from the second block)", _rollout),
    NativeExplainer("CheferLRP", "Chefer et al.'s transformer attribution (LRP x gradient, "
                    "rolled out) of a ViT", chefer_lrp.transformer_attribution),
)}


def explainer(name: str) -> NativeExplainer:
    """The native explainer `name`, or a one-line error listing them."""
    return look_up(EXPLAINERS, name, "native explainer")


def explain(name: str, model: Any, images: Any, targets: Any) -> tf.Tensor:
    """float32 [N, H, W]: the native explanation `name` of `model` for `targets`."""
    images = tf.convert_to_tensor(images, tf.float32)
    return tf.cast(explainer(name).explain(model, images, tf.cast(targets, tf.int32)),
                   tf.float32)
