"""Chefer et al. (2021)'s transformer attribution for the zoo's ViT (docs/model_zoo.md,
"CheferLRP"), as IDSDS runs it (`generate_LRP(method="transformer_attribution",
start_layer=1)`).

The forward pass is re-run with the model's own layers, keeping every intermediate; relevance
starts as the one-hot target at the logits and flows back with the rules of Chefer's code:

* linear layers: the LRP alpha = 1, beta = 0 rule (positive and negative parts of inputs and
  weights paired, biases ignored);
* residual additions: each summand's share x * R / (a + b), rescaled so the two parts keep the
  proportion of their absolute totals and sum to the incoming total (per image);
* the two attention products (q k^T and attention x v): each factor's x * grad share, halved;
* a tensor used twice (before a residual branch): the sum of its users' relevances;
* LayerNorm, GELU and softmax pass relevance through unchanged, and the class token's
  relevance enters at token 0.

Per block, the relevance of the attention probabilities R_A and the gradient of the target
logit with respect to them G give cam = mean over heads of max(G * R_A, 0); the map is the class
token's row over the patches of prod (cam_b + I) from the second block on, nearest-resized to
the image. With these rules the total relevance of each block's input stays the target's 1
(tested as conservation).
"""
from typing import Any

import tensorflow as tf

from models.architectures import vit
from models.architectures.layers import FEATURE_LAYER

START_LAYER = 1


def safe_divide(a: tf.Tensor, b: tf.Tensor) -> tf.Tensor:
    """a / b where b != 0 (Chefer's stabiliser: b + 1e-9), else 0."""
    denominator = b + 1e-9
    denominator = tf.where(denominator == 0, tf.fill(tf.shape(denominator), 1e-9), denominator)
    return a / denominator * tf.cast(b != 0, a.dtype)


def linear_relevance(x: tf.Tensor, kernel: tf.Tensor, relevance: tf.Tensor) -> tf.Tensor:
    """Alpha-1-beta-0 relevance of the input x [..., in] of x @ kernel [in, out]."""
    positive_w, negative_w = tf.nn.relu(kernel), tf.minimum(kernel, 0.0)
    positive_x, negative_x = tf.nn.relu(x), tf.minimum(x, 0.0)
    share = safe_divide(relevance, tf.matmul(positive_x, positive_w)
                        + tf.matmul(negative_x, negative_w))
    return (positive_x * tf.matmul(share, positive_w, transpose_b=True)
            + negative_x * tf.matmul(share, negative_w, transpose_b=True))


def _totals(tensor):
    return tf.reduce_sum(tensor, axis=list(range(1, len(tensor.shape))), keepdims=True)


def add_relevance(a: tf.Tensor, b: tf.Tensor, relevance: tf.Tensor) -> list:
    """(relevance of a, of b) for a + b, rescaled per image as Chefer's Add."""
    share = safe_divide(relevance, a + b)
    parts = [a * share, b * share]
    sums = [_totals(part) for part in parts]
    total = _totals(relevance)
    scale = tf.abs(sums[0]) + tf.abs(sums[1])
    return [part * safe_divide(safe_divide(tf.abs(s), scale) * total, s)
            for part, s in zip(parts, sums)]


def clone_relevance(x: tf.Tensor, relevances: list) -> tf.Tensor:
    """Relevance of x from the relevances of its users."""
    return x * tf.add_n([safe_divide(r, x) for r in relevances])


def product_relevance(a: tf.Tensor, b: tf.Tensor, relevance: tf.Tensor,
                      transpose_b: bool = False) -> tuple:
    """(relevance of a, of b) for a @ b (or a @ b^T), each halved."""
    z = tf.matmul(a, b, transpose_b=transpose_b)
    share = safe_divide(relevance, z)
    if transpose_b:  # z = a b^T: dz/da = share b, dz/db = share^T a
        return a * tf.matmul(share, b) / 2, b * tf.matmul(share, a, transpose_a=True) / 2
    return (a * tf.matmul(share, b, transpose_b=True) / 2,
            b * tf.matmul(a, share, transpose_a=True) / 2)


def _forward(model, images):
    """The ViT's forward pass keeping what the relevance rules need, per block."""
    layer = model.get_layer
    tokens = layer("embedding")(layer("patch_tokens")(
        layer(FEATURE_LAYER)(layer("patch_embed_proj")(images))))
    blocks = []
    for index, core in enumerate(vit.attention_layers(model)):
        name = f"blocks_{index}"
        h1 = layer(f"{name}_norm1")(tokens)
        qkv = layer(f"{name}_attn_qkv")(h1)
        context, attention = core(qkv)
        out = layer(f"{name}_attn_proj")(context)
        middle = tokens + out
        h2 = layer(f"{name}_norm2")(middle)
        f1 = layer(f"{name}_mlp_fc1")(h2)
        f2 = layer(f"{name}_mlp_fc2")(f1)
        blocks.append(dict(x_in=tokens, h1=h1, qkv=qkv, context=context, attention=attention,
                           out=out, middle=middle, h2=h2, f1=f1, f2=f2, core=core, name=name))
        tokens = middle + f2
    cls = layer("norm")(tokens)[:, 0]
    return blocks, cls, layer("head")(cls)


def relevance(model: Any, images: tf.Tensor, targets: tf.Tensor) -> tuple:
    """(per-block attention relevance [N, heads, T, T], per-block attention gradients, the
    total relevance at each block's input [N] in block order, logits)."""
    layer = model.get_layer
    with tf.GradientTape() as tape:
        blocks, cls, logits = _forward(model, images)
        score = tf.reduce_sum(tf.gather(logits, targets, batch_dims=1))
    gradients = tape.gradient(score, [block["attention"] for block in blocks])
    current = tf.one_hot(targets, tf.shape(logits)[-1], dtype=logits.dtype)
    current = linear_relevance(cls, layer("head").kernel, current)
    current = tf.concat([current[:, None], tf.zeros_like(blocks[-1]["middle"][:, 1:])], axis=1)
    attention_relevance, totals = [None] * len(blocks), [None] * len(blocks)
    for index in reversed(range(len(blocks))):
        b = blocks[index]
        r_middle, r_f2 = add_relevance(b["middle"], b["f2"], current)
        r_f1 = linear_relevance(b["f1"], layer(f"{b['name']}_mlp_fc2").kernel, r_f2)
        r_h2 = linear_relevance(b["h2"], layer(f"{b['name']}_mlp_fc1").kernel, r_f1)
        r_middle = clone_relevance(b["middle"], [r_middle, r_h2])
        r_in, r_out = add_relevance(b["x_in"], b["out"], r_middle)
        r_context = linear_relevance(b["context"], layer(f"{b['name']}_attn_proj").kernel, r_out)
        heads = b["core"].heads
        count, width = int(b["qkv"].shape[1]), int(b["qkv"].shape[2])
        head_dim = width // 3 // heads
        parts = tf.transpose(tf.reshape(b["qkv"], [-1, count, 3, heads, head_dim]),
                             [2, 0, 3, 1, 4])
        query, key, value = parts[0], parts[1], parts[2]
        r_context = tf.transpose(tf.reshape(r_context, [-1, count, heads, head_dim]),
                                 [0, 2, 1, 3])
        r_attention, r_value = product_relevance(b["attention"], value, r_context)
        attention_relevance[index] = r_attention
        r_query, r_key = product_relevance(query, key, r_attention, transpose_b=True)
        r_qkv = tf.reshape(tf.transpose(tf.stack([r_query, r_key, r_value]), [1, 3, 0, 2, 4]),
                           [-1, count, width])
        r_h1 = linear_relevance(b["h1"], layer(f"{b['name']}_attn_qkv").kernel, r_qkv)
        current = clone_relevance(b["x_in"], [r_in, r_h1])
        totals[index] = tf.reduce_sum(current, axis=[1, 2])
    return attention_relevance, gradients, totals, logits


def transformer_attribution(model: Any, images: tf.Tensor, targets: tf.Tensor,
                            start: int = START_LAYER) -> tf.Tensor:
    """[N, H, W]: Chefer's transformer attribution (see the module docstring)."""
    relevances, gradients, _, _ = relevance(model, images, targets)
    joint = None
    for r, g in list(zip(relevances, gradients))[start:]:
        cam = tf.reduce_mean(tf.nn.relu(g * r), axis=1)
        cam = cam + tf.eye(tf.shape(cam)[-1], dtype=cam.dtype)
        joint = cam if joint is None else tf.matmul(cam, joint)
    if joint is None:
        raise ValueError(f"no transformer block from layer {start} on")
    patches = joint[:, 0, 1:]
    side = int(round(int(patches.shape[-1]) ** 0.5))
    grid = tf.reshape(patches, [-1, side, side, 1])
    height, width = int(images.shape[1]), int(images.shape[2])
    return tf.image.resize(grid, [height, width], method="nearest")[..., 0]
