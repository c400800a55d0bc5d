"""Vision Transformers in timm's layout (ViT-B/16 as IDSDS uses it; docs/model_zoo.md).

Patch embedding (a strided convolution), a class token and learned position embeddings, pre-norm
blocks (LayerNorm eps 1e-6, multi-head self-attention with a joint qkv projection, an exact-GELU
MLP) and a linear head on the normalised class token. Layer names are timm's module paths with
"." -> "_" (`blocks.0.attn.qkv` -> `blocks_0_attn_qkv`), so timm / IDSDS checkpoints convert by
name (`models.formats.torch_checkpoints`). Each block's attention probabilities are a second output
of its `blocks_<i>_attn_core` layer, which the Rollout explainer reads
(`models.architectures.native_explainers`). Input: [0, 1] pixels normalised with mean 0.5 and
std 0.5 (`inception`).
"""
from typing import Any

import keras
import tensorflow as tf
from keras import layers

from models.architectures.layers import FEATURE_LAYER

PACKAGE = "models"
LN_EPSILON = 1e-6


@keras.saving.register_keras_serializable(package=PACKAGE)
class ClassTokenAndPositions(layers.Layer):
    """[N, T, D] patch tokens -> [N, 1 + T, D]: the class token prepended, positions added."""

    def build(self, input_shape: tuple) -> None:
        tokens, dim = int(input_shape[1]), int(input_shape[2])
        init = keras.initializers.TruncatedNormal(stddev=0.02)
        self.cls_token = self.add_weight(name="cls_token", shape=(1, 1, dim), initializer=init)
        self.pos_embed = self.add_weight(name="pos_embed", shape=(1, tokens + 1, dim),
                                         initializer=init)

    def call(self, inputs: tf.Tensor) -> tf.Tensor:
        batch = tf.shape(inputs)[0]
        cls = tf.tile(self.cls_token, [batch, 1, 1])
        return tf.concat([cls, inputs], axis=1) + self.pos_embed

    def compute_output_shape(self, input_shape: tuple) -> tuple:
        return (input_shape[0], input_shape[1] + 1, input_shape[2])

    def from_torch(self, state: dict, flat: dict) -> tuple:
        return [state["cls_token"], state["pos_embed"]], ["cls_token", "pos_embed"]


@keras.saving.register_keras_serializable(package=PACKAGE)
class AttentionCore(layers.Layer):
    """qkv [N, T, 3D] (timm's order: 3 x heads x head_dim) -> (context [N, T, D], attention
    probabilities [N, heads, T, T])."""

    def __init__(self, heads: int, **kwargs: Any):
        super().__init__(**kwargs)
        self.heads = int(heads)

    def call(self, qkv: tf.Tensor) -> tuple:
        tokens, width = int(qkv.shape[1]), int(qkv.shape[2])
        dim = width // 3
        head_dim = dim // self.heads
        parts = tf.reshape(qkv, [-1, tokens, 3, self.heads, head_dim])
        parts = tf.transpose(parts, [2, 0, 3, 1, 4])  # [3, N, heads, T, head_dim]
        query, key, value = parts[0], parts[1], parts[2]
        scores = tf.matmul(query, key, transpose_b=True) * head_dim ** -0.5
        attention = tf.nn.softmax(scores, axis=-1)
        context = tf.matmul(attention, value)  # [N, heads, T, head_dim]
        context = tf.reshape(tf.transpose(context, [0, 2, 1, 3]), [-1, tokens, dim])
        return context, attention

    def compute_output_shape(self, input_shape: tuple) -> tuple:
        tokens, dim = input_shape[1], input_shape[2] // 3
        return (input_shape[0], tokens, dim), (input_shape[0], self.heads, tokens, tokens)

    def get_config(self) -> dict:
        return {**super().get_config(), "heads": self.heads}


@keras.saving.register_keras_serializable(package=PACKAGE)
class ClassTokenOutput(layers.Layer):
    """[N, T, D] -> [N, D]: the class token."""

    def call(self, inputs: tf.Tensor) -> tf.Tensor:
        return inputs[:, 0]

    def compute_output_shape(self, input_shape: tuple) -> tuple:
        return (input_shape[0], input_shape[2])


def attention_layers(model: keras.Model) -> list:
    """The attention cores of a ViT built here, in block order."""
    return [layer for layer in model.layers if isinstance(layer, AttentionCore)]


def build_vit(num_classes: int, input_shape: tuple, patch: int = 16, dim: int = 768,
              depth: int = 12, heads: int = 12, mlp_ratio: float = 4) -> keras.Model:
    """A timm-layout ViT (ViT-B/16 at the defaults); logits."""
    if input_shape[0] % patch or input_shape[1] % patch:
        raise ValueError(f"the input side must be a multiple of the patch size {patch}")
    inputs = keras.Input(input_shape, name="images")
    x = layers.Conv2D(dim, patch, strides=patch, name="patch_embed_proj")(inputs)
    # The zoo's Grad-CAM layer convention; CAMs are not among a ViT's IDSDS explainers.
    x = layers.Identity(name=FEATURE_LAYER)(x)
    grid = (input_shape[0] // patch) * (input_shape[1] // patch)
    x = layers.Reshape((grid, dim), name="patch_tokens")(x)
    x = ClassTokenAndPositions(name="embedding")(x)
    for index in range(depth):
        name = f"blocks_{index}"
        h = layers.LayerNormalization(epsilon=LN_EPSILON, name=f"{name}_norm1")(x)
        h = layers.Dense(3 * dim, name=f"{name}_attn_qkv")(h)
        context, _ = AttentionCore(heads, name=f"{name}_attn_core")(h)
        x = layers.Add(name=f"{name}_attn_add")(
            [x, layers.Dense(dim, name=f"{name}_attn_proj")(context)])
        h = layers.LayerNormalization(epsilon=LN_EPSILON, name=f"{name}_norm2")(x)
        h = layers.Dense(int(dim * mlp_ratio), activation="gelu", name=f"{name}_mlp_fc1")(h)
        x = layers.Add(name=f"{name}_mlp_add")([x, layers.Dense(dim, name=f"{name}_mlp_fc2")(h)])
    x = layers.LayerNormalization(epsilon=LN_EPSILON, name="norm")(x)
    logits = layers.Dense(num_classes, dtype="float32", name="head")(
        ClassTokenOutput(name="class_token")(x))
    return keras.Model(inputs, logits, name="vit_b_16")
