"""The class-activation-map family: Grad-CAM, Grad-CAM++, XGrad-CAM, Layer-CAM and guided
Grad-CAM (docs/saliency.md, "CAM methods").

Each map is computed at the model's Grad-CAM feature layer from its activations A and the
target logit's gradients G, optionally normalised per map, upsampled to the image and repeated
over its channels. The helpers here are shared with SmoothGrad-CAM++ (`smooth_cam`).
"""
from typing import Any, Sequence

import tensorflow as tf

from saliency_gen.attribution.units import (
    Context,
    Method,
    Param,
    Plan,
    gradient_of,
    register,
    tile_channels,
)

NORMALISATIONS = ("none", "max", "minmax")
UPSAMPLINGS = ("bilinear", "tf1_bilinear", "nearest")
NORMALISE = Param("none", choices=NORMALISATIONS, label="cam_normalise",
                  doc="per-map normalisation before upsampling")
UPSAMPLE = Param("bilinear", choices=UPSAMPLINGS, label="cam_upsample",
                 doc="how the map reaches the image size")


def normalise_cam(cam: tf.Tensor, how: str) -> tf.Tensor:
    """Per-map normalisation: none, max (a zero map stays zero) or minmax (torchcam)."""
    if how == "none":
        return cam
    peak = tf.reduce_max(cam, axis=[1, 2], keepdims=True)
    if how == "max":
        return tf.math.divide_no_nan(cam, peak)
    low = tf.reduce_min(cam, axis=[1, 2], keepdims=True)
    return (cam - low) / (peak - low + 1e-8)


def upsample_cam(cam: tf.Tensor, height: int, width: int, how: str) -> tf.Tensor:
    """[B, h, w] -> [B, H, W]: bilinear (half-pixel), TF1 bilinear (legacy corners) or nearest."""
    maps = cam[..., tf.newaxis]
    if how == "tf1_bilinear":
        resized = tf.raw_ops.ResizeBilinear(images=maps, size=[height, width],
                                            align_corners=False, half_pixel_centers=False)
    elif how == "nearest":
        resized = tf.image.resize(maps, [height, width], method="nearest")
    else:
        resized = tf.image.resize(maps, [height, width], method="bilinear")
    return resized[..., 0]


class _Cam(Method):
    """A CAM method: `combine(features, gradients, options)` -> [B, h, w], then normalise,
    upsample and repeat over channels."""

    views = ("cam",)
    params = {"cam_normalise": NORMALISE, "cam_upsample": UPSAMPLE}

    def combine(self, features: tf.Tensor, gradients: tf.Tensor, options: dict) -> tf.Tensor:
        raise NotImplementedError

    def plan(self, options: dict, context: Context) -> Any:
        height, width, channels = context.shape
        cam_view = context.model.cam

        def cam_map(items):
            features, _, gradients = cam_view(items.x, items.targets)
            cam = self.combine(features, gradients, options)
            cam = normalise_cam(cam, options["cam_normalise"])
            return tile_channels(upsample_cam(cam, height, width, options["cam_upsample"]),
                                 channels)

        return Plan(1, cam_map)


def grad_cam(features: tf.Tensor, gradients: tf.Tensor) -> tf.Tensor:
    """ReLU(sum_k mean_ij(G_k) A_k)."""
    weights = tf.reduce_mean(gradients, axis=[1, 2], keepdims=True)
    return tf.nn.relu(tf.reduce_sum(weights * features, axis=-1))


@register
class GradCam(_Cam):
    name = "grad_cam"
    summary = "ReLU of the feature maps weighted by their mean gradient"

    def combine(self, features: tf.Tensor, gradients: tf.Tensor, options: dict) -> tf.Tensor:
        return grad_cam(features, gradients)


@register
class GradCamPlusPlus(_Cam):
    name = "grad_cam_pp"
    summary = "Grad-CAM++: weights from positive gradients with alpha coefficients"
    params = dict(_Cam.params, alpha=Param("paper", choices=("paper", "torchcam"),
                                           label="grad_cam_pp alpha",
                                           doc="the paper's alpha, or torchcam's G^2"))

    def combine(self, features: tf.Tensor, gradients: tf.Tensor, options: dict) -> tf.Tensor:
        squared = tf.square(gradients)
        if options["alpha"] == "torchcam":
            coefficients = squared
        else:
            cubed = squared * gradients
            denominator = 2 * squared + tf.reduce_sum(features, axis=[1, 2],
                                                      keepdims=True) * cubed
            coefficients = tf.where(gradients != 0, squared / (denominator + 1e-8),
                                    tf.zeros_like(squared))
        weights = tf.reduce_sum(coefficients * tf.nn.relu(gradients), axis=[1, 2],
                                keepdims=True)
        return tf.nn.relu(tf.reduce_sum(weights * features, axis=-1))


@register
class XGradCam(_Cam):
    name = "xgrad_cam"
    summary = "XGrad-CAM: weights sum(G A) / sum(A)"

    def combine(self, features: tf.Tensor, gradients: tf.Tensor, options: dict) -> tf.Tensor:
        weights = tf.reduce_sum(gradients * features, axis=[1, 2], keepdims=True) / (
            tf.reduce_sum(features, axis=[1, 2], keepdims=True) + 1e-8)
        return tf.nn.relu(tf.reduce_sum(weights * features, axis=-1))


@register
class LayerCam(_Cam):
    name = "layer_cam"
    summary = "Layer-CAM: element-wise ReLU(G) A"

    def combine(self, features: tf.Tensor, gradients: tf.Tensor, options: dict) -> tf.Tensor:
        return tf.nn.relu(tf.reduce_sum(tf.nn.relu(gradients) * features, axis=-1))


@register
class GuidedGradCam(Method):
    name = "guided_grad_cam"
    summary = "guided backprop times the max-normalised Grad-CAM"
    views = ("guided", "cam")
    params = {"cam_upsample": UPSAMPLE}

    def evaluations(self, options: dict, shape: Sequence[int]) -> int:
        return 2

    def plan(self, options: dict, context: Context) -> Any:
        height, width, _ = context.shape
        model = context.model

        def guided_cam(items):
            guided = gradient_of(model.guided_logits, items.x, items.targets)
            features, _, gradients = model.cam(items.x, items.targets)
            cam = upsample_cam(normalise_cam(grad_cam(features, gradients), "max"), height,
                               width, options["cam_upsample"])
            return guided * cam[..., tf.newaxis]

        return Plan(1, guided_cam)
