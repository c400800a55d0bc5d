"""The batched attribution engine: `attribute(model, images, method, targets=None, ...)`.

A method is a unit (`saliency_gen.attribution.units`) whose plan says how many work items each
(image, noise sample) needs and what each item adds to its image's map. The engine flattens image x
noise sample x step into one stream, cut into chunks of exactly `batch_size` items, and runs it with
the one chunked executor (`models.foundation.executor`: `accumulate`, or `collect` when each image's
map is its one item's share) inside one `tf.function` per (model, method, input shape, chunk size);
a noise wrapper is a plan around the unit's plan (`saliency_gen.attribution.noise`). Images are
processed in groups whose accumulators fit in `memory_bytes`; that loop is over groups of many
images, not over images (docs/saliency.md, "How it is batched").

Noise is stateless, keyed on (seed, base method, image id, sample), never on chunk position, and
the explained class is computed once per image on the clean input; so results do not depend on
`batch_size` and no image influences another.
"""
from typing import Any, Callable, Optional, Sequence, Union

import numpy as np
import tensorflow as tf

from models.formats.adapter import Adapter, adapt
from models.foundation import executor, transfer, workload
from models.foundation.errors import (
    ShapeError,
    UserError,
    check_integer,
    failure_line,
    first_non_finite,
    op_error_detail,
)
from models.foundation.tracing import flat_call, kept, quiet_retracing
from saliency_gen.attribution import names, noise, transforms
from saliency_gen.attribution.spec import MethodSpec
from saliency_gen.attribution.units import Context, HostPlan, Items


class _Runner:
    """The plan of one (model, method, shape, chunk size, seed) and its traced stream."""

    def __init__(self, adapter, spec: MethodSpec, shape, chunk: int, preprocessing, seed,
                 name, single: bool = False):
        unit = spec.unit
        if adapter is not None:
            adapter.prepare(guided="guided" in unit.views, cam="cam" in unit.views)
        context = Context(adapter, tuple(shape), preprocessing, seed, name)
        options = {key: value for key, value in spec.options.items() if key in unit.params}
        plan = unit.plan(options, context)
        if spec.wrapper is not None:
            plan = noise.NoisePlan(plan, spec.wrapper, spec.wrapper_samples,
                                   noise.method_code(seed, spec.base), shape)
        self.plan = plan
        # One aux row for the whole run (the usual baseline) is broadcast, not copied per item.
        self.shared_aux = shared_aux = (plan.aux is None or np.ndim(plan.aux) == 3
                                        or len(plan.aux) == 1)
        if isinstance(plan, HostPlan):
            return
        # Arguments that are the same on every call are made once (two fewer host-to-tensor
        # conversions a call: docs/saliency.md, "By call size"): the shared aux row, and the
        # noise scales, which only a noise plan reads.
        self.aux_tensor = tf.constant(_aux_rows(plan, shape)) if shared_aux else None
        self.unread_sigmas = None if spec.wrapper else tf.zeros([0], tf.float32)
        height, width, channels = shape
        self._buffers = buffers = executor.Buffers(() if plan.direct else plan.sum_dtypes)
        image_spec = tf.TensorSpec([None, height, width, channels], tf.float32)

        # No autograph: the stream's loop is explicit, and a unit's error (a user method's
        # wrong shape) then reaches the caller as the one line it raised.
        @tf.function(input_signature=[image_spec, tf.TensorSpec([None], tf.int32),
                                      tf.TensorSpec([None], tf.int64),
                                      tf.TensorSpec([None], tf.float32), image_spec],
                     autograph=False)
        def run(images, targets, ids, sigmas, aux):
            group = tf.shape(images)[0]
            state = plan.start(images, targets, ids, sigmas)

            def compute(item):
                image = item // plan.steps
                step = item % plan.steps
                items = Items(x=tf.gather(images, image), targets=tf.gather(targets, image),
                              step=step, aux=aux if shared_aux else tf.gather(aux, image),
                              ids=tf.gather(ids, image), image=image)
                return plan.slot(image, step), plan.shares(state, items)

            if plan.direct:  # one share per image: collected, no sums to keep
                # (a `single` runner's calls have exactly `chunk` images: one chunk, no loop)
                return executor.collect(chunk if single else group, chunk,
                                        lambda item: compute(item)[1][0], shape)
            zeros = plan.zeros(state, group * plan.slots_per_image, shape)
            sums = executor.accumulate(group * plan.steps, chunk, compute, zeros, buffers)
            return plan.finish(state, sums)

        # One runner (and one trace) per method and model is by design.
        self._function = quiet_retracing(run)
        self._concrete: Optional[Callable] = None

    def run(self, *arguments: tf.Tensor) -> tf.Tensor:
        """The traced stream on `arguments` (images, targets, ids, sigmas, aux). Called as its
        concrete function after the first trace, with its flat tensors: the signature is
        fixed and the engine makes every argument itself, so tf.function's dispatch and the
        concrete function's binding of Python arguments are skipped, about 10% of a
        one-gradient call of 24 images on a cheap CNN (docs/saliency.md, "By call size")."""
        with self._buffers.lock:  # the in-place sums are the runner's own
            if self._concrete is None:
                self._concrete = flat_call(self._function.get_concrete_function())
            return self._concrete(*arguments)


def _runner(adapter, model, spec, shape, chunk, preprocessing, seed, name, single=False):
    seeded = spec.wrapper is not None or spec.unit.seeded(spec.options)
    # The adapter is the model's own, one per feature layer (`adapt`): a runner traced with
    # one Grad-CAM layer is never reused for another.
    key = (spec, spec.unit, shape, chunk, single, preprocessing, seed if seeded else None,
           adapter)
    return kept(model, key, lambda: _Runner(adapter, spec, shape, chunk, preprocessing, seed,
                                            name, single))


def predict(model: Any, images: Any, batch_size: int = 64) -> np.ndarray:
    """Logits [N, classes] of `model` on `images`, in chunks (inference mode)."""
    return adapt(model).predict(images, batch_size)


def attribute(model: Any, images: Any, method: Union[str, names.Resolved],
              targets: Optional[Sequence[int]] = None, *,
              batch_size: int = 64, seed: int = 0,
              ids: Optional[Union[Sequence[int], np.ndarray]] = None,
              preprocessing: Optional[str] = None, feature_layer: Optional[str] = None,
              memory_bytes: int = 1 << 28, progress: Optional[Callable[[int], Any]] = None,
              **params: Any) -> np.ndarray:
    """Attributions of `model` on `images` [N, H, W, C] (model input space): float32 maps.

    `method` is a base method ("integrated_gradients"), a wrapped one
    ("smoothgrad_sq(integrated_gradients)"), a scheme name ("roar:IG_SG_2", "bam:GC",
    "idsds:IG-U"), a method registered with `saliency_gen.register_method`, or a
    "package.module:function" string, or such a name resolved once by the caller
    (`saliency_gen.attribution.names.resolved`, then without `params`). `params` override the
    method's parameters (e.g. `steps=`, `nsamples=`, `baseline=`, `transform=`, `reduce=`).
    `targets=None` explains each image's predicted class. `ids` are int64 keys per image for the
    noise (default: positions). `preprocessing` names the input space for pixel-space baselines
    ("black"); it defaults to the model's. `progress(n)` is called after each group of n
    images (at most 256). Output: [N, H, W, C] raw signed maps (CAM and RISE maps upsampled and
    repeated over C), or [N, H, W, 1] with `reduce="sum"`.
    """
    chosen = names.resolved(method, **params)
    method = chosen.name
    if chosen.parts:  # a product of two methods' maps
        first, second = (attribute(model, images, part, targets, batch_size=batch_size,
                                   seed=seed, ids=ids, preprocessing=preprocessing,
                                   feature_layer=feature_layer, memory_bytes=memory_bytes,
                                   progress=None if part is chosen.parts[0] else progress)
                         for part in chosen.parts)
        return _product(first, second)
    spec = chosen.spec
    assert spec is not None  # a resolved name that is not a product has its spec
    unit = spec.unit
    images = np.asarray(images, np.float32)
    if images.ndim != 4:
        raise ShapeError(f"images have shape {images.shape}; expected [N, H, W, C]")
    count = len(images)
    bad = first_non_finite(images)
    if bad is not None:
        raise UserError(f"image {bad} contains NaN or infinite values; fix the input before "
                        "explaining it")
    keys = np.arange(count, dtype=np.int64) if ids is None else np.asarray(ids, np.int64)
    if keys.shape != (count,):
        raise ShapeError(f"ids have shape {keys.shape}; expected [{count}]")
    check_integer("batch_size", batch_size, 1)
    check_integer("seed", seed, 0)
    adapter = adapt(model, feature_layer) if unit.views else None
    if adapter is not None and adapter.input_shape is not None and \
            images.shape[1:] != tuple(adapter.input_shape):
        raise ShapeError(f"images have shape {images.shape}; the model takes "
                         f"[N, {', '.join(map(str, adapter.input_shape))}]")
    if count == 0:
        return np.zeros(images.shape if spec.reduce == "none" else (*images.shape[:3], 1),
                        np.float32)
    preprocessing = (preprocessing or (adapter.preprocessing if adapter else None)
                     or chosen.preprocessing)
    explained = _targets(adapter, images, targets, batch_size)
    shape = images.shape[1:]
    sigmas = noise.sigmas(images, spec.options) if spec.wrapper else np.zeros(count, np.float32)
    steps = spec.wrapper_samples * unit.steps(spec.options, shape)
    per_image = spec.nsamples * int(np.prod(shape)) * 4
    spans = list(executor.groups(count, per_image, memory_bytes))
    # A chunk never exceeds the items of a group, so small jobs are not padded, and the items of
    # a larger one are split evenly (docs/architecture.md, "The chunked executor").
    chunk = executor.chunk_size((spans[0][1] - spans[0][0]) * steps, batch_size)
    # One image a step and one chunk for the whole call: traced for exactly that chunk, without
    # the executor's loop (docs/saliency.md, "By call size")
    single = steps == 1 and len(spans) == 1 and count == chunk
    runner = _runner(adapter, model, spec, shape, chunk, preprocessing, seed, method, single)
    if unit.views:  # every model evaluation of a method is counted as a gradient pass
        workload.count("gradient", count * spec.evaluations(shape))
    parts = []
    for start, stop in spans:  # groups of many images, bounded by memory
        parts.append(_run_group(runner, images[start:stop], explained[start:stop],
                                keys[start:stop], sigmas[start:stop], start, count, method))
        if progress is not None:
            progress(stop - start)
    maps = parts[0] if len(parts) == 1 else np.concatenate(parts)
    unit.check_maps(maps, method)
    if spec.times_input:
        maps = _product(maps, images)
    return transforms.postprocess(maps, spec.transform, spec.reduce)


def _product(maps: np.ndarray, factor: np.ndarray) -> np.ndarray:
    """`maps * factor`, written into `maps` when the shapes allow: the maps are always the
    engine's own array (`_run_group` copies a host method's result), and on a cheap model
    allocating a new array the size of the maps is a visible share of the call."""
    if maps.flags.writeable and maps.dtype == np.float32 and \
            np.broadcast_shapes(maps.shape, factor.shape) == maps.shape:
        return np.multiply(maps, factor, out=maps)
    return maps * factor


def _targets(adapter: Optional[Adapter], images, targets, batch_size):
    """int64 [N] explained classes: given (checked) or predicted; zeros for model-free maps."""
    count = len(images)
    if adapter is None:
        return np.zeros(count, np.int64)
    if targets is None:
        return np.argmax(adapter.predict(images, batch_size), axis=1).astype(np.int64)
    given = np.asarray(targets)
    # whole numbers only: a float class such as 0.5 had been cut to 0, another class explained
    if not (given.dtype.kind in "iu" or (given.dtype.kind == "f" and np.isfinite(given).all()
                                         and (given == np.round(given)).all())):
        raise UserError(f"targets must be integer classes; got {given.dtype} values "
                        f"{given.ravel()[:4].tolist()}")
    targets = given.astype(np.int64).reshape(-1)
    if targets.shape != (count,):  # (a column of classes, [N, 1], reads as [N])
        raise ShapeError(f"targets have shape {given.shape}; expected one class per image, "
                         f"[{count}]")
    classes = adapter.num_classes
    if targets.min() < 0 or (classes is not None and targets.max() >= classes):
        raise UserError(f"a target class is outside [0, {classes}) for this model")
    return targets


def _exited(name: str, ending: SystemExit) -> UserError:
    return UserError(f"method {name!r} called sys.exit({ending.code!r}) (or raised SystemExit); "
                     "a method must return maps or raise an error, not end the program")


def _aux_rows(plan, shape) -> np.ndarray:
    """The plan's aux as rows [1 or N, H, W, C] (zeros when it has none)."""
    aux = plan.aux if plan.aux is not None else np.zeros(shape, np.float32)
    return aux[None] if np.ndim(aux) == 3 else aux


def _run_group(runner, images, targets, ids, sigmas, start, count, name):
    """The float32 maps of one group of images."""
    plan = runner.plan
    if isinstance(plan, HostPlan):
        try:
            return np.array(plan.run(images, targets, ids), np.float32)  # ours, not the plan's
        except SystemExit as ending:  # a user Method's code ending the program
            raise _exited(name, ending) from None
    aux = runner.aux_tensor
    if aux is None:  # one baseline per image
        rows = _aux_rows(plan, images.shape[1:])
        if len(rows) != count:
            raise ShapeError(f"a per-image baseline needs {count} images; got {len(rows)}")
        aux = tf.constant(rows[start:start + len(images)])
    scales = runner.unread_sigmas
    try:
        maps = runner.run(transfer.tensor_from(images), tf.constant(targets, tf.int32),
                          tf.constant(ids), tf.constant(sigmas) if scales is None else scales,
                          aux)
    except tf.errors.OpError as error:
        if failure_line(error):  # out of memory or disk: the binary's one line says so
            raise
        raise UserError(f"method {name!r} failed while running: "
                        f"{op_error_detail(error)}") from None
    except SystemExit as ending:  # a user Method's code ending the program
        raise _exited(name, ending) from None
    if plan.direct:
        # The bits a sum from zero gives, as the accumulating path has them: -0.0 becomes +0.0.
        # Done here because a graph optimiser drops a traced "+ 0.0" and a traced select costs
        # a fifth of a cheap model's gradient time; reading the tensor's own buffer, the addition
        # is also the copy to the host (one pass, where a copy and an in-place add took two).
        return np.add(np.asarray(maps), np.float32(0.0))
    return maps.numpy()
