"""The batched attribution engine: `attribute(model, images, method, targets=None, ...)`.

One work item is (image n, noise sample j, path step i). Items are flattened row-major into one
stream and cut into chunks of exactly `batch_size` (the last chunk is padded with a valid item
whose share is dropped). One `tf.function` per (model, method, input shape, batch size) runs a
`tf.while_loop` over the chunks of a group of images: per chunk it gathers the images, adds the
noise of each (image, sample), evaluates the method's per-item share (`methods.Plan`) and
scatter-adds it into the group's accumulators (see `_Runner`). The noise wrappers reduce over the
samples inside the function: SmoothGrad = mean, SmoothGrad^2 = mean of squares, VarGrad =
population variance (float64, clamped at 0).

Noise is stateless, keyed on (seed, base method, image id, sample), never on chunk position, and the
explained class is computed once per image on the clean input; so results do not depend on
`batch_size` and no image influences another. Images are processed in groups whose accumulators
fit in `memory_bytes`; that loop is over groups of many images, not over images.
"""
import weakref
import zlib

import numpy as np
import tensorflow as tf

from models.errors import ShapeError, UserError
from models.tracing import quiet_retracing
from saliency_gen import adapters, methods, names, smooth_cam

_RUNNERS = weakref.WeakKeyDictionary()  # model -> {key: compiled runner}


def _method_code(spec, seed):
    """The noise key of a method: seed and base method, so that SmoothGrad, SmoothGrad^2 and
    VarGrad of one base use the same samples (VarGrad = SG^2 - SG^2 exactly)."""
    return zlib.crc32(f"{seed}:{spec.base}".encode()) & 0x7FFFFFFF


def _group_noise(ids, samples, method_code, shape):
    """Standard normal noise [G, J, H, W, C]: one stateless stream per (method, image id), from
    which sample j is the j-th slice; so it never depends on chunking or batch mates."""
    seeds = tf.stack([ids, tf.fill(tf.shape(ids), tf.cast(method_code, tf.int64))], axis=1)
    return tf.map_fn(lambda seed: tf.random.stateless_normal([samples, *shape], seed), seeds,
                     fn_output_signature=tf.float32)


class _Runner:
    """The compiled stream for one (model, method, shape, chunk size).

    Accumulators: without a wrapper, one map per image. With a wrapper over a one-item method,
    per-image float64 sums of the sample maps and of their squares (the J sample maps are never
    stored). With a wrapper over a multi-step method (IG), one float32 map per (image, sample),
    reduced over samples at the end of the group. All reductions happen inside the function.
    """

    def __init__(self, adapter, spec, shape, batch_size, preprocessing, seed):
        self.spec = spec
        self.plan = methods.build_plan(spec, adapter, shape, preprocessing, seed)
        samples, steps = spec.nsamples, self.plan.steps
        wrapper = spec.wrapper
        per_sample_slots = wrapper is not None and steps > 1
        code = _method_code(spec, seed)
        contribution = self.plan.contribution
        height, width, channels = shape
        chunk = int(batch_size)

        @tf.function(input_signature=[
            tf.TensorSpec([None, height, width, channels], tf.float32),
            tf.TensorSpec([None], tf.int32), tf.TensorSpec([None], tf.int64),
            tf.TensorSpec([None], tf.float32),
            tf.TensorSpec([None, height, width, channels], tf.float32)])
        def run(images, targets, ids, sigmas, aux):
            group = tf.shape(images)[0]
            total = group * samples * steps
            chunks = (total + chunk - 1) // chunk
            if wrapper is not None:
                noise = _group_noise(ids, samples, code, [height, width, channels])
                noise = noise * sigmas[:, None, None, None, None]
            slots = group * samples if per_sample_slots else group
            dtype = tf.float64 if wrapper is not None and not per_sample_slots else tf.float32

            def body(index, total_sum, total_squares):
                item = index * chunk + tf.range(chunk)
                valid = item < total
                item = tf.where(valid, item, 0)
                image = item // (samples * steps)
                sample = (item // steps) % samples
                step = item % steps
                x = tf.gather(images, image)
                if wrapper is not None:
                    x = x + tf.gather_nd(noise, tf.stack([image, sample], axis=1))
                share = contribution(x, tf.gather(targets, image), step,
                                     tf.gather(aux, tf.minimum(image, tf.shape(aux)[0] - 1)))
                slot = image * samples + sample if per_sample_slots else image
                slot = tf.where(valid, slot, slots)[:, None]  # padding goes to a dropped slot
                share = tf.cast(share, dtype)
                total_sum = tf.tensor_scatter_nd_add(total_sum, slot, share)
                if dtype == tf.float64:
                    total_squares = tf.tensor_scatter_nd_add(total_squares, slot,
                                                             tf.square(share))
                return index + 1, total_sum, total_squares

            zeros = tf.zeros([slots + 1, height, width, channels], dtype)
            squares = zeros if dtype == tf.float64 else tf.zeros([1, 1, 1, 1], dtype)
            _, total_sum, total_squares = tf.while_loop(
                lambda index, *_: index < chunks, body, [tf.constant(0), zeros, squares])
            total_sum = total_sum[:slots]
            if wrapper is None:
                return total_sum
            if per_sample_slots:
                maps = tf.reshape(tf.cast(total_sum, tf.float64),
                                  [group, samples, height, width, channels])
                mean = tf.reduce_mean(maps, axis=1)
                mean_square = tf.reduce_mean(tf.square(maps), axis=1)
            else:
                mean = total_sum / samples
                mean_square = total_squares[:slots] / samples
            if wrapper == "smoothgrad":
                return tf.cast(mean, tf.float32)
            if wrapper == "smoothgrad_sq":
                return tf.cast(mean_square, tf.float32)
            return tf.cast(tf.maximum(mean_square - tf.square(mean), 0.0), tf.float32)

        # One runner (and one trace) per method and model is by design.
        self.run = quiet_retracing(run)


def _cached(model, key, build):
    try:
        cache = _RUNNERS.setdefault(model, {})
    except TypeError:  # not weak-referenceable: no caching
        cache = {}
    if key not in cache:
        cache[key] = build()
    return cache[key]


def _runner(adapter, model, spec, shape, batch_size, preprocessing, seed):
    key = (spec, shape, batch_size, preprocessing, seed if _seed_matters(spec) else None)
    return _cached(model, key,
                   lambda: _Runner(adapter, spec, shape, batch_size, preprocessing, seed))


def _seed_matters(spec):
    options = spec.options
    return (spec.wrapper is not None or spec.base in ("rise", "sg_grad_cam_pp")
            or options.get("baseline") == "uniform")


def _sigmas(images, spec):
    if spec.wrapper is None:
        return np.zeros(len(images), np.float32)
    options = spec.options
    if options["noise"] == "absolute":
        return np.full(len(images), options["stdev"], np.float32)
    spread = images.reshape(len(images), -1)
    return (options["stdev_spread"] * (spread.max(axis=1) - spread.min(axis=1))).astype(np.float32)


def postprocess(maps, transform="raw", reduce="none"):
    """The separate post-processing step: transform (raw/abs/relu/square), then channel sum."""
    maps = np.asarray(maps, np.float32)
    if transform == "abs":
        maps = np.abs(maps)
    elif transform == "relu":
        maps = np.maximum(maps, 0)
    elif transform == "square":
        maps = np.square(maps)
    if reduce == "sum":
        maps = maps.sum(axis=-1, keepdims=True)
    return maps


def predict(model, images, batch_size=64):
    """Logits [N, classes] of `model` on `images`, in batches (inference mode)."""
    adapter = adapters.adapt(model)
    images = np.asarray(images, np.float32)
    outputs = [np.asarray(adapter.logits(tf.constant(images[start:start + batch_size])))
               for start in range(0, len(images), batch_size)]
    return np.concatenate(outputs) if outputs else np.zeros((0, adapter.num_classes), np.float32)


def _random_maps(images, ids, seed):
    keys = tf.stack([tf.fill([len(ids)], tf.constant(int(seed) ^ 0x5A17, tf.int64)),
                     tf.constant(ids, tf.int64)], axis=1)
    shape = images.shape[1:]
    return tf.map_fn(lambda key: tf.random.stateless_uniform(shape, key), keys,
                     fn_output_signature=tf.float32).numpy()


def _model_preprocessing(adapter):
    from models import zoo

    if adapter is None:
        return None
    if isinstance(adapter, adapters.LoadedAdapter):
        return adapter.loaded.preprocessing
    spec = zoo.REGISTRY.get(adapter.name)
    return spec.preprocessing if spec else None


def attribute(model, images, method, targets=None, *, batch_size=64, seed=0, ids=None,
              preprocessing=None, feature_layer=None, memory_bytes=1 << 28, **params):
    """Attributions of `model` on `images` [N, H, W, C] (model input space): float32 maps.

    `method` is any name in `saliency_gen.METHODS`: a base method ("integrated_gradients"), a
    wrapped one ("smoothgrad_sq(integrated_gradients)") or a scheme name ("roar:IG_SG_2",
    "bam:GC", "idsds:IG-U"). `params` override the method's parameters (e.g. `steps=`,
    `nsamples=`, `baseline=`, `transform=`, `reduce=`). `targets=None` explains each image's
    predicted class. `ids` are int64 keys per image for the noise (default: positions).
    `preprocessing` names the input space for pixel-space baselines ("black"); it defaults to
    the model's. Output: [N, H, W, C] raw signed maps (CAM and RISE maps upsampled and repeated
    over C), or [N, H, W, 1] with `reduce="sum"`.
    """
    if method in names.PRODUCTS:
        first, second = (attribute(model, images, part, targets, batch_size=batch_size,
                                   seed=seed, ids=ids, preprocessing=preprocessing,
                                   feature_layer=feature_layer, memory_bytes=memory_bytes,
                                   **params) for part in names.PRODUCTS[method])
        return first * second
    spec = names.resolve(method, **params)
    images = np.asarray(images, np.float32)
    if images.ndim != 4:
        raise ShapeError(f"images have shape {images.shape}; expected [N, H, W, C]")
    count = len(images)
    finite = np.isfinite(images.reshape(count, -1)).all(axis=1)
    if not finite.all():
        raise UserError(f"image {int(np.flatnonzero(~finite)[0])} contains NaN or infinite "
                        "values; fix the input before explaining it")
    ids = np.arange(count, dtype=np.int64) if ids is None else np.asarray(ids, np.int64)
    if ids.shape != (count,):
        raise ShapeError(f"ids have shape {ids.shape}; expected [{count}]")
    if batch_size < 1:
        raise UserError(f"batch_size must be at least 1; got {batch_size}")
    if spec.base == "random":  # names.resolve refuses a noise wrapper on it
        maps = _random_maps(images, ids, seed)
        return _finish(maps, images, spec)
    needs_model = spec.base != "sobel"
    adapter = adapters.adapt(model, feature_layer) if needs_model else None
    if adapter is not None and images.shape[1:] != tuple(adapter.input_shape):
        raise ShapeError(f"images have shape {images.shape}; the model takes "
                         f"[N, {', '.join(map(str, adapter.input_shape))}]")
    if count == 0:
        return np.zeros(images.shape if spec.reduce == "none" else (*images.shape[:3], 1),
                        np.float32)
    preprocessing = (preprocessing or _model_preprocessing(adapter)
                     or names.scheme_preprocessing(method))
    if needs_model:
        if targets is None:
            targets = np.argmax(predict(adapter, images, batch_size), axis=1)
        targets = np.asarray(targets).astype(np.int64).reshape(-1)
        if targets.shape != (count,):
            raise ShapeError(f"targets have shape {targets.shape}; expected [{count}]")
        if targets.min() < 0 or targets.max() >= adapter.num_classes:
            raise UserError(f"a target class is outside [0, {adapter.num_classes}) for this model")
    else:
        targets = np.zeros(count, np.int64)
    samples = spec.nsamples
    per_image = samples * int(np.prod(images.shape[1:])) * 4
    group = max(1, min(count, memory_bytes // per_image))
    if spec.base == "sg_grad_cam_pp":
        chunk = int(min(batch_size, group * (samples + 1)))
        run = _cached(model, (spec, images.shape[1:], chunk, seed), lambda: smooth_cam.build_runner(
            adapter, spec, images.shape[1:], chunk, _group_noise, _method_code(spec, seed)))
        maps = [run(tf.constant(images[start:start + group]),
                    tf.constant(targets[start:start + group], tf.int32),
                    tf.constant(ids[start:start + group])).numpy()
                for start in range(0, count, group)]  # groups of many images
        return _finish(np.concatenate(maps), images, spec)
    sigmas = _sigmas(images, spec)
    # A chunk never exceeds the items of a group, so small jobs are not padded.
    plan_steps = methods.plan_steps(spec, images.shape[1:])
    chunk = int(min(batch_size, group * spec.nsamples * plan_steps))
    runner = _runner(adapter, model, spec, images.shape[1:], chunk, preprocessing, seed)
    aux = runner.plan.aux if runner.plan.aux is not None else np.zeros(images.shape[1:], np.float32)
    aux = aux[None] if aux.ndim == 3 else aux
    if aux.shape[0] not in (1, count):
        raise ShapeError(f"a per-image baseline needs {count} images; got {aux.shape[0]}")
    results = []
    for start in range(0, count, group):  # groups of many images, bounded by memory
        stop = min(start + group, count)
        batch_aux = aux if aux.shape[0] == 1 else aux[start:stop]
        accumulated = runner.run(tf.constant(images[start:stop]),
                                 tf.constant(targets[start:stop], tf.int32),
                                 tf.constant(ids[start:stop]),
                                 tf.constant(sigmas[start:stop]), tf.constant(batch_aux))
        results.append(accumulated.numpy())
    return _finish(np.concatenate(results), images, spec)


def _finish(maps, images, spec):
    maps = np.asarray(maps, np.float32)
    if spec.times_input:
        maps = maps * images
    return postprocess(maps, spec.transform, spec.reduce)
