"""SmoothGrad-CAM++ (torchcam `SmoothGradCAMpp`, IDSDS "SG-CAMpp"; saliency_methods.md §2.3).

J noisy copies x + N(0, stdev^2) (absolute, input space) of every image, plus the clean image:
g2 = mean_m G_m^2, g3 = mean_m G_m^3, alpha = g2 / (2 g2 + sum_ab A_ab g3 + 1e-8) with the clean
activations A in the sum. `variant="mean"`: w_k = sum_ij alpha ReLU(mean_m G_m) and
L = ReLU(sum_k w_k A_k(x)). `variant="torchcam"` reproduces torchcam's code as written: ReLU(G)
and A in the last two formulas come from the last noisy sample.

The means are sums over items of the feature-resolution gradients, so, like the engine, the items
(image, sample) are flattened into chunks of a fixed size inside one traced loop; noise is drawn
once per image from (seed, method, image id), so results do not depend on the chunk size.
"""
import tensorflow as tf

from saliency_gen import methods


def build_runner(adapter, spec, shape, chunk, noise_fn, code):
    """A traced function (images, targets, ids) -> maps [G, H, W, C] for one chunk size."""
    options = spec.options
    samples = int(options["nsamples"])
    stdev = float(options["stdev"])
    variant = options["variant"]
    height, width, channels = shape
    adapter.prepare(cam=True)

    @tf.function(input_signature=[tf.TensorSpec([None, height, width, channels], tf.float32),
                                  tf.TensorSpec([None], tf.int32),
                                  tf.TensorSpec([None], tf.int64)])
    def run(images, targets, ids):
        group = tf.shape(images)[0]
        per_image = samples + 1  # the noisy samples, then the clean image
        total = group * per_image
        noise = noise_fn(ids, samples, code, [height, width, channels]) * stdev
        probe, _, _ = adapter.cam(images[:1], targets[:1])
        feature_shape = tf.shape(probe)[1:]
        zeros = tf.zeros(tf.concat([[group + 1], feature_shape], 0))

        def body(index, sums):
            item = index * chunk + tf.range(chunk)
            valid = item < total
            item = tf.where(valid, item, 0)
            image = item // per_image
            sample = item % per_image
            noisy = sample < samples
            offsets = tf.gather_nd(noise, tf.stack([image, tf.minimum(sample, samples - 1)], 1))
            x = tf.gather(images, image) + offsets * tf.cast(noisy, tf.float32)[:, None, None,
                                                                                  None]
            features, _, gradients = adapter.cam(x, tf.gather(targets, image))
            is_noisy = tf.cast(noisy, tf.float32)[:, None, None, None]
            is_clean = 1.0 - is_noisy
            is_last = tf.cast(sample == samples - 1, tf.float32)[:, None, None, None]
            slot = tf.where(valid, image, group)[:, None]
            shares = (gradients * is_noisy, tf.square(gradients) * is_noisy,
                      tf.pow(gradients, 3) * is_noisy, features * is_clean,
                      features * is_last, gradients * is_last)
            return index + 1, tuple(tf.tensor_scatter_nd_add(total_sum, slot, share)
                                    for total_sum, share in zip(sums, shares))

        chunks = (total + chunk - 1) // chunk
        _, sums = tf.while_loop(lambda index, _: index < chunks, body,
                                [tf.constant(0), (zeros,) * 6])
        mean_g, mean_g2, mean_g3, clean_a, last_a, last_g = (s[:group] for s in sums)
        mean_g, mean_g2, mean_g3 = (s / samples for s in (mean_g, mean_g2, mean_g3))
        alpha = mean_g2 / (2 * mean_g2 + tf.reduce_sum(clean_a, axis=[1, 2], keepdims=True)
                           * mean_g3 + 1e-8)
        gate, activations = (last_g, last_a) if variant == "torchcam" else (mean_g, clean_a)
        weights = tf.reduce_sum(alpha * tf.nn.relu(gate), axis=[1, 2], keepdims=True)
        cam = tf.nn.relu(tf.reduce_sum(weights * activations, axis=-1))
        cam = methods.normalise_cam(cam, options["cam_normalise"])
        upsampled = methods.upsample_cam(cam, height, width, options["cam_upsample"])
        return tf.repeat(upsampled[..., tf.newaxis], channels, axis=-1)

    return run
