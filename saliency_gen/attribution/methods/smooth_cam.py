"""SmoothGrad-CAM++ (torchcam `SmoothGradCAMpp`, IDSDS "SG-CAMpp"; docs/saliency.md,
"CAM methods").

J noisy copies x + N(0, stdev^2) (absolute, input space) of every image, plus the clean image:
g2 = mean_m G_m^2, g3 = mean_m G_m^3, alpha = g2 / (2 g2 + sum_ab A_ab g3 + 1e-8) with the clean
activations A in the sum. `variant="mean"`: w_k = sum_ij alpha ReLU(mean_m G_m) and
L = ReLU(sum_k w_k A_k(x)). `variant="torchcam"` reproduces torchcam's code as written: ReLU(G)
and A in the last two formulas come from the last noisy sample.

The means are sums over items, so the items (image, sample) join the engine's chunked stream;
six moments are accumulated per image at feature resolution and combined in `finish`.
"""
from typing import Any, Sequence

import tensorflow as tf

from saliency_gen.attribution.methods.cam import NORMALISE, UPSAMPLE, normalise_cam, upsample_cam
from saliency_gen.attribution.noise import group_noise, method_code
from saliency_gen.attribution.units import Context, Method, Param, Plan, register, tile_channels


class _SmoothCamPlan(Plan):
    additive = False

    def __init__(self, options, context):
        super().__init__(int(options["nsamples"]) + 1)  # the noisy samples, then the clean image
        self.options = options
        self.samples = int(options["nsamples"])
        self.model = context.model
        self.shape = context.shape
        self.code = method_code(context.seed, "sg_grad_cam_pp")

    def start(self, images, targets, ids, scales):
        noise = group_noise(ids, self.samples, self.code, self.shape) * float(
            self.options["stdev"])
        probe, _, _ = self.model.cam(images[:1], targets[:1])
        return noise, tf.shape(probe)[1:]

    sum_dtypes = (tf.float32,) * 6

    def zeros(self, state, slots, shape):
        _, feature_shape = state
        return tuple(tf.zeros(tf.concat([[slots + 1], feature_shape], 0), dtype)
                     for dtype in self.sum_dtypes)

    def shares(self, state, items):
        noise, _ = state
        sample = items.step
        noisy = sample < self.samples
        offsets = tf.gather_nd(noise, tf.stack([items.image,
                                                tf.minimum(sample, self.samples - 1)], 1))
        x = items.x + offsets * tf.cast(noisy, tf.float32)[:, None, None, None]
        features, _, gradients = self.model.cam(x, items.targets)
        is_noisy = tf.cast(noisy, tf.float32)[:, None, None, None]
        is_clean = 1.0 - is_noisy
        is_last = tf.cast(sample == self.samples - 1, tf.float32)[:, None, None, None]
        return (gradients * is_noisy, tf.square(gradients) * is_noisy,
                tf.pow(gradients, 3) * is_noisy, features * is_clean, features * is_last,
                gradients * is_last)

    def finish(self, state, sums):
        height, width, channels = self.shape
        mean_g, mean_g2, mean_g3, clean_a, last_a, last_g = sums
        mean_g, mean_g2, mean_g3 = (s / self.samples for s in (mean_g, mean_g2, mean_g3))
        alpha = mean_g2 / (2 * mean_g2 + tf.reduce_sum(clean_a, axis=[1, 2], keepdims=True)
                           * mean_g3 + 1e-8)
        torchcam = self.options["variant"] == "torchcam"
        gate, activations = (last_g, last_a) if torchcam else (mean_g, clean_a)
        weights = tf.reduce_sum(alpha * tf.nn.relu(gate), axis=[1, 2], keepdims=True)
        cam = tf.nn.relu(tf.reduce_sum(weights * activations, axis=-1))
        cam = normalise_cam(cam, self.options["cam_normalise"])
        upsampled = upsample_cam(cam, height, width, self.options["cam_upsample"])
        return tile_channels(upsampled, channels)


@register
class SmoothGradCamPlusPlus(Method):
    name = "sg_grad_cam_pp"
    summary = "SmoothGrad-CAM++ (torchcam): Grad-CAM++ moments over noisy copies"
    views = ("cam",)
    wrappable = False  # already smoothed
    params = {
        "nsamples": Param(4, minimum=1, doc="noisy copies per image"),
        "stdev": Param(0.3, doc="absolute noise sigma in input space"),
        "variant": Param("mean", choices=("mean", "torchcam"), label="sg_grad_cam_pp variant",
                         doc="the mean formula, or torchcam's last-sample code"),
        "cam_normalise": NORMALISE,
        "cam_upsample": UPSAMPLE,
    }

    def steps(self, options: dict, shape: Sequence[int]) -> int:
        return int(options["nsamples"]) + 1

    def seeded(self, options: dict) -> bool:
        return True

    def plan(self, options: dict, context: Context) -> Any:
        return _SmoothCamPlan(options, context)
