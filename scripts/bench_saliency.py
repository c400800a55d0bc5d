"""Benchmarks the attribution engine against its ceiling and against PAIR `saliency.core`.

    python scripts/bench_saliency.py [--models=plain_cnn@64,efficientnet_lite0@224]

For each model (`name@side`; by default the cheap `plain_cnn`, three stride-2 convolutions of
widths 16-32-64, where per-item overheads show, and the costlier `small_resnet` at 64 px, both
with random weights, and the real-size EfficientNet-Lite0 at 224 px with its ImageNet weights,
docs/real_model.md), on the same images (fewer at a larger side: the counts below are for 64
px and shrink with the pixel count, at least 8 and 4):

* engine: `saliency_gen.attribute` images/s (after one warm-up call; a timing makes as many
  calls as take the ceiling's 256 gradients: ten calls of 24 one-gradient images) for
  gradient, gradient x input, IG (25 steps), SmoothGrad, SmoothGrad^2 and VarGrad (25 samples
  each), and a researcher's method registered from outside the engine (the input gradient
  times a Gaussian blob, plain and under SmoothGrad^2); the better of two chunk sizes: the
  engine's default (64) and the ceiling's batch size;
* ceiling: the best raw batched input-gradient throughput over batch sizes (a bare traced
  gradient of the target logits, traced for any batch size and for exactly that one), divided by
  the gradients each method needs per image; for a call (`--call_sizes`), the throughput of
  exactly the call's gradients in batches of at most that size, the rest as one batch traced
  for its own size (24 gradients: one batch of 24; 96 at a best batch of 64: 64 + 32). The batch
  size is chosen once per model; the ceiling is then re-measured beside each method's engine
  runs (interleaved, best of --repeats each, four times as many for one-gradient methods), so
  machine drift affects both alike;
* noise peer (noise-wrapped methods): a bare traced loop doing only the work every exact
  implementation of these methods must do: drawing each image's noise with the engine's keyed
  generator (stateless Philox normals) and taking the raw gradients of the noisy images at the
  ceiling's batch size. Engine / noise peer isolates the engine's own overhead from the cost of
  the Gaussian draws, which is large next to a cheap model's gradient;
* bare function (the gradient, gradient x input and the researcher's one-gradient method): the
  method's function itself (the raw gradient; times the input; the researcher's plain
  function), traced without the engine, on the call's images in the ceiling's batches, so
  engine / bare function isolates what the engine adds from the work the function does beyond
  a raw gradient (its own product);
* every peer starts, as an engine call does, from the call's NumPy images (one copy into an
  aligned tensor per batch, `models.foundation.transfer`, the engine's own) and ends with NumPy
  maps; the ceiling's images are tensors made before the clock starts (its bound is the passes
  alone);
* bare IG (IG): IG written bare as Captum orders it, the cheapest exact form: every path point
  of a batch of images at once (the ceiling's batch size of points), their gradients' mean per
  image, times the image (zero baseline, PAIR's 25 linspace points). Its element-wise work (the
  path points, the mean, the product) is what IG needs beyond the raw gradients, a visible
  share of a cheap model's gradient; engine / bare IG isolates the engine's own overhead
  (the engine weights each point's share before it sums them: more element-wise passes, kept
  for its maps' bytes, docs/saliency.md "By call size");
* Captum (IG and SmoothGrad^2): Captum's `IntegratedGradients` (25 steps, zero baseline) and
  `NoiseTunnel(Saliency)` with `nt_type="smoothgrad_sq"` (25 samples) on the model's PyTorch
  twin with the same weights (`faithfulness.torch_twin`, from the model's layer graph), on the
  same images as the engine, measured beside it; the better of Captum's batch settings (all
  steps or samples at once, or 256 inputs per batch). Skipped when torch or captum is absent
  (`pip install torch==2.13.0 captum`). The "bound" column is the ceiling over Captum: the
  largest speed-up over Captum that a method running at the raw-gradient ceiling would have;
* PAIR: `saliency.core` images/s at its defaults (one gradient per call) and with `batch_size`
  tuned where PAIR has one (IG), for the methods PAIR has; its VarGrad row times the equivalent
  loop of 25 `GetMask` calls on noisy inputs.

`--call_sizes=24,96` measures every method at those numbers of images per call instead (the
"images" column): a small call shows the engine's fixed per-call costs (argument checks,
transfers, the finiteness check), which a call of 256 images hides.

Prints a table per model with the ratios engine/ceiling, engine/peer, engine/Captum and
engine/PAIR, then whether each goal of docs/saliency.md ("Benchmark") holds: built-in
gradient and IG >= 0.9 of the ceiling (and IG's ratio to bare IG), noise wrappers >= 0.9 of
their noise peer, gradient, gradient x input and the user's method >= 0.9 of their bare
function, >= 2x Captum;
--output_json writes them as JSON.
"""
import dataclasses
import functools
import json
import os
import time
from typing import TYPE_CHECKING, Optional

import numpy as np

import models  # noqa: I001  (first: TensorFlow loads quietly)
import saliency_gen
from faithfulness import torch_twin
from models.foundation import progress, provenance, transfer
from models.foundation.cli import option, run_binary
from models.foundation.lazy import lazy_module

# Loaded on first use: --help and a bad flag are answered before TensorFlow starts
# (docs/architecture.md, "Light imports").
if TYPE_CHECKING:  # the type checker's view of the same modules
    import keras
    import tensorflow as tf

    from models.formats import pretrained
    from saliency_gen.attribution import noise
    from saliency_gen.attribution.methods import pair
else:
    keras = lazy_module("keras")
    tf = lazy_module("tensorflow")
    pretrained = lazy_module("models.formats.pretrained")
    noise = lazy_module("saliency_gen.attribution.noise")
    pair = lazy_module("saliency_gen.attribution.methods.pair")

ENGINE_DEFAULT_CHUNK = 64  # saliency_gen.attribute's default batch_size
# (label, engine name, gradients per image, parameters, PAIR has it)
METHODS: tuple[tuple[str, str, int, dict, bool], ...] = (
    ("gradient", "gradient", 1, {}, True),
    ("gradient x input", "grad_x_input", 1, {}, False),
    ("IG (25 steps)", "integrated_gradients", 25, {"steps": 25}, True),
    ("SmoothGrad (25)", "smoothgrad(gradient)", 25, {"nsamples": 25}, False),
    ("SmoothGrad^2 (25)", "smoothgrad_sq(gradient)", 25, {"nsamples": 25}, True),
    ("VarGrad (25)", "vargrad(gradient)", 25, {"nsamples": 25}, True),
    ("user: gradient x blob", "bench_blob", 1, {}, False),
    ("user: SmoothGrad^2 (25)", "smoothgrad_sq(bench_blob)", 25, {"nsamples": 25}, False),
)


# A row's peer: the noise peer of a noise wrapper, the bare function of the gradient, of gradient
# x input and of the user's method, bare IG of IG; the keys of its rate and of the engine's ratio
PEER_KEYS = {"noise": ("noise_peer_images_per_s", "ratio_to_noise_peer"),
             "bare": ("bare_function_images_per_s", "ratio_to_bare_function"),
             "bare IG": ("bare_ig_images_per_s", "ratio_to_bare_ig")}
CAPTUM_METHODS = ("integrated_gradients", "smoothgrad_sq(gradient)")  # Captum peers exist


def bare_gradient(call, x, t):
    """The input gradient of each image's target logit under `call` (the ceiling's work)."""
    with tf.GradientTape() as tape:
        tape.watch(x)
        score = tf.reduce_sum(tf.gather(call(x), t, batch_dims=1))
    return tape.gradient(score, x)


def gradient_times_blob(model, images, targets):
    """A researcher's method in the plain-function form: the input gradient of the target logit
    times a centred Gaussian blob."""
    with tf.GradientTape() as tape:
        tape.watch(images)
        score = tf.reduce_sum(tf.gather(model(images), targets, batch_dims=1))
    gradient = tape.gradient(score, images)
    rows = tf.linspace(-1.0, 1.0, images.shape[1])[:, None]
    cols = tf.linspace(-1.0, 1.0, images.shape[2])[None, :]
    return gradient * tf.exp(-(rows ** 2 + cols ** 2) / 0.5)[None, :, :, None]


USER_FUNCTIONS = {"bench_blob": gradient_times_blob}  # registered name: plain function


def gradient_times_input(call, images, targets):
    """Gradient x input written bare: the input gradient of the target logit times the image
    (the work of the engine's `grad_x_input`: a raw gradient and its product)."""
    return bare_gradient(call, images, targets) * images


# The one-gradient methods whose peer is their own function traced bare (method -> function)
BARE_FUNCTIONS = {"gradient": bare_gradient, "grad_x_input": gradient_times_input,
                  **USER_FUNCTIONS}


@dataclasses.dataclass(frozen=True)
class Config:
    """The script's options (one flag each)."""

    models: tuple = option(("plain_cnn@64", "small_resnet@64", "efficientnet_lite0@224"),
                           "Registered models to benchmark as name@side: by default the cheap "
                           "plain CNN (conv 16-32-64, stride 2) and a costlier small residual "
                           "net (random weights), and EfficientNet-Lite0 with its ImageNet "
                           "weights.")
    num_images: int = option(256, "Images explained per measurement of a one-gradient method "
                             "(as many as the largest batch tried, so the engine's chunks can be "
                             "as large as the ceiling's).")
    heavy_images: int = option(64, "Images explained per measurement of a 25-gradient method.")
    pair_images: int = option(4, "Images explained by PAIR (it is slow; rates are per image); "
                              "0 skips PAIR.")
    batch_sizes: str = option("8,16,32,64,128,256", "Batch sizes tried for the ceiling.")
    repeats: int = option(3, "Timed repetitions; the best is kept.")
    call_sizes: str = option("", "Images per engine call to measure every method at (comma-"
                             "separated, e.g. 24,96, where fixed per-call costs show); default: "
                             "--num_images for one-gradient methods, --heavy_images for the "
                             "others.")
    output_json: Optional[str] = option(None, "Optional JSON output.")


def _best_time(function, repeats):
    function()  # warm-up: tracing and caches
    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        function()
        best = min(best, time.perf_counter() - started)
    return best


def traced_gradient(model, shape, batch=None, method=bare_gradient):
    """`method(call, images, targets)` on the model's logits, traced bare (no engine): the raw
    input gradient by default; traced for any batch size, or for exactly `batch` images (static
    shapes help some models)."""
    logits = models.adapt(model).logits  # the pass the engine runs (batch norms folded)

    @tf.function(input_signature=[tf.TensorSpec([batch, *shape], tf.float32),
                                  tf.TensorSpec([batch], tf.int32)], autograph=False)
    def traced(x, t):
        return method(logits, x, t)

    return traced


def gradient_runner(model, images, targets, count, static=False, method=bare_gradient,
                    batch=None, host=False):
    """A callable computing the raw input gradients (or maps of a plain-function `method`,
    called bare) of `count` images, `rounds` times over, in batches of at most `batch` (default
    `count`): full batches traced for any batch size or, `static` (or fewer images than
    `batch`), for exactly their size, and the rest as one batch traced for its own size (a call
    of 96 images at batch 64: 64 + 32, as a caller batching the call's own images would);
    with `host`, each batch starts from the NumPy images, as an engine call does; returns
    (callable, gradients)."""
    if batch is not None and count < batch:  # one batch smaller than the best: its own trace
        static = True
    batch = count if batch is None else min(batch, count)
    reps = np.resize(np.arange(len(images)), max(count, len(images)))
    full, rest = divmod(count, batch)
    traced = traced_gradient(model, images.shape[1:], batch if static else None, method)
    pieces = [(traced, start, start + batch) for start in range(0, full * batch, batch)]
    if rest:
        pieces.append((traced_gradient(model, images.shape[1:], rest, method), full * batch,
                       count))
    batches = [(function, images[reps[start:end]], targets[reps[start:end]].astype(np.int32))
               for function, start, end in pieces]
    if not host:  # tensors made once, before the clock starts
        batches = [(function, tf.constant(x), tf.constant(t)) for function, x, t in batches]
    to_tensor = transfer.tensor_from if host else (lambda x: x)
    rounds = max(1, 256 // count)

    def run():
        for _ in range(rounds):
            for function, x, t in batches:
                function(to_tensor(x), tf.constant(t)).numpy()

    return run, count * rounds


def ceiling(model, images, targets, batch_sizes, repeats):
    """(best gradients/s, its (batch size, static), {batch size: gradients/s}) of a bare traced
    gradient, traced for any batch size and for exactly that batch size (the best of both)."""
    rates: dict = {}
    best_rate, best = 0.0, None
    for size in batch_sizes:
        for static in (False, True):
            run, count = gradient_runner(model, images, targets, size, static)
            rate = count / _best_time(run, repeats)
            rates[size] = max(rates.get(size, 0.0), rate)
            if rate > best_rate:
                best_rate, best = rate, (size, static)
    return best_rate, best, rates


def noise_peer_runner(model, images, targets, size, samples):
    """A callable doing the unavoidable work of an exact noise wrapper on all `images`: their
    keyed Gaussian noise (the engine's generator) and the raw gradients of the noisy copies."""
    shape = list(images.shape[1:])
    ids = tf.constant(np.arange(len(images), dtype=np.int64))

    @tf.function
    def draw(ids):
        return tf.reshape(noise.group_noise(ids, samples, 7, shape), [-1, *shape])

    gradient = traced_gradient(model, shape)
    images, targets = np.ascontiguousarray(images), targets.astype(np.int32)

    def run():  # from the call's NumPy images, as the engine
        x = tf.repeat(transfer.tensor_from(images), samples, axis=0)
        t = tf.repeat(tf.constant(targets), samples)
        noisy = x + 10.0 * draw(ids)
        for start in range(0, int(noisy.shape[0]), size):
            gradient(noisy[start:start + size], t[start:start + size]).numpy()

    return run


def bare_ig_runner(model, images, targets, size, steps):
    """A callable computing IG (zero baseline, `steps` linspace points) of all `images` bare:
    the points of `size` // `steps` images a batch, Captum's order (the mean of the points'
    gradients, then times the image)."""
    shape = list(images.shape[1:])
    alphas = tf.reshape(tf.constant(np.linspace(0, 1, steps), tf.float32), [1, steps, 1, 1, 1])
    per_batch = max(1, size // steps)
    logits = models.adapt(model).logits  # the pass the engine runs (batch norms folded)

    @tf.function(input_signature=[tf.TensorSpec([None, *shape], tf.float32),
                                  tf.TensorSpec([None], tf.int32)], autograph=False)
    def integrated(x, t):
        points = tf.reshape(alphas * x[:, None], [-1, *shape])
        gradients = bare_gradient(logits, points, tf.repeat(t, steps))
        return x * tf.reduce_mean(tf.reshape(gradients, [-1, steps, *shape]), axis=1)

    images, targets = np.ascontiguousarray(images), targets.astype(np.int32)

    def run():  # from the call's NumPy images, as the engine
        x, t = transfer.tensor_from(images), tf.constant(targets)
        for start in range(0, len(images), per_batch):
            integrated(x[start:start + per_batch], t[start:start + per_batch]).numpy()

    return run


def interleaved(runs: dict, repeats: int) -> dict:
    """Best time of each callable in `runs`, measured in turn (after one warm-up each), so that
    machine drift affects them alike."""
    for run in runs.values():
        run()
    best = dict.fromkeys(runs, float("inf"))
    for _ in range(repeats):
        for key, run in runs.items():
            started = time.perf_counter()
            run()
            best[key] = min(best[key], time.perf_counter() - started)
    return best


def pair_rate(model, images, targets, method, params, batch_size=None):
    from saliency import core

    call = pair.as_call_model_function(model)

    def run():
        for image, target in zip(images, targets):
            args = {"class": int(target)}
            if method == "gradient":
                core.GradientSaliency().GetMask(image, call, args)
            elif method == "integrated_gradients":
                core.IntegratedGradients().GetMask(image, call, args, x_steps=params["steps"],
                                                   batch_size=batch_size or 1)
            elif method == "smoothgrad_sq(gradient)":
                core.GradientSaliency().GetSmoothedMask(image, call, args,
                                                        nsamples=params["nsamples"],
                                                        magnitude=True)
            else:  # VarGrad: PAIR has none; the equivalent loop of GetMask on noisy inputs
                sigma = 0.15 * (image.max() - image.min())
                for _ in range(params["nsamples"]):
                    core.GradientSaliency().GetMask(
                        image + np.random.normal(0, sigma, image.shape), call, args)

    return len(images) / _best_time(run, 1)


def captum_runs(twin, images, targets, method, params) -> dict:
    """{setting: callable} running Captum's `method` on the PyTorch `twin` for `images`
    (NHWC numpy, moved to NCHW once): IG with a zero baseline, or NoiseTunnel SmoothGrad^2 of
    the plain gradient; one callable per batch setting (None: all steps or samples at once)."""
    import torch
    from captum.attr import IntegratedGradients, NoiseTunnel, Saliency

    x = torch.tensor(np.ascontiguousarray(images.transpose(0, 3, 1, 2)))
    t = torch.tensor(targets.astype(np.int64))
    if method == "integrated_gradients":
        explainer = IntegratedGradients(twin)
        return {batch: functools.partial(explainer.attribute, x, baselines=torch.zeros_like(x),
                                         target=t, n_steps=params["steps"],
                                         internal_batch_size=batch)
                for batch in (None, 256)}
    explainer = NoiseTunnel(Saliency(twin))
    sigma = 0.15 * float(images.max() - images.min())
    return {batch: functools.partial(
        explainer.attribute, x, nt_type="smoothgrad_sq", nt_samples=params["nsamples"],
        nt_samples_batch_size=None if batch is None else max(1, batch // len(images)),
        stdevs=sigma, target=t) for batch in (None, 256)}


def pytorch_twin(model, name):
    """The model's PyTorch twin (`faithfulness.torch_twin`), or None without torch / captum or
    for layers the twins lack; prints how far its logits are from the Keras model's."""
    try:
        import captum  # noqa: F401
        import torch
    except ImportError:
        return None
    try:
        twin = torch_twin.twin(model)
    except ValueError as error:
        print(f"note: no PyTorch twin of {name}: {error}")
        return None
    torch.set_num_threads(os.cpu_count())
    probe = np.random.default_rng(1).normal(0, 50, (4, *model.input_shape[1:])).astype(
        np.float32)
    with torch.no_grad():
        theirs = twin(torch.tensor(probe.transpose(0, 3, 1, 2))).numpy()
    ours = saliency_gen.predict(model, probe)
    print(f"PyTorch twin of {name}: largest |logit difference| "
          f"{np.abs(theirs - ours).max():.2e} (logits up to {np.abs(ours).max():.2e})")
    return twin


def benchmark_model(entry: str):
    """(Keras model, side) of a `name@side` entry: the pretrained weights where the project
    has them (`models.formats.pretrained`), else random weights (seeded)."""
    name, _, side = entry.partition("@")
    size = int(side or 64)
    keras.utils.set_random_seed(0)
    if name in pretrained.PRETRAINED and size == pretrained.PRETRAINED[name].image_size:
        model = models.rebuild(pretrained.export_path(name))
    else:
        model = models.build(name, 10, (size, size, 3))
    return model, size


def pair_rates(model, images, targets, method, params, engine):
    """PAIR's images/s with its defaults and tuned (IG's best of 5 and 25 steps a batch), and
    the engine's speed-up over the tuned rate."""
    default = pair_rate(model, images, targets, method, params)
    tuned = default
    if method == "integrated_gradients":
        tuned = max(pair_rate(model, images, targets, method, params, b) for b in (5, 25))
    return {"pair_default_images_per_s": default, "pair_tuned_images_per_s": tuned,
            "speedup_vs_pair_tuned": engine / tuned}


def print_rows(rows, best_batch, static, chunks, config):
    """One model's table, as text."""
    print(f"ceiling: batch {best_batch}, traced for {'that' if static else 'any'} batch size; "
          f"engine: the better of chunks {', '.join(map(str, chunks))}; {config.num_images} "
          f"images for one-gradient methods, {config.heavy_images} for 25-gradient ones; peer: "
          "the noise peer of a noise wrapper, the bare function of gradient x input and of the "
          "user's method, bare IG of IG\n")
    print(f"{'method':<24}{'images':>7}{'engine img/s':>13}{'chunk':>6}{'ceiling':>10}{'ratio':>7}"
          f"{'peer':>11}"
          f"{'ratio':>7}{'Captum':>9}{'x Captum':>9}{'bound':>7}{'PAIR dflt':>11}{'PAIR tuned':>11}"
          f"{'x tuned':>8}")
    for row in rows:
        pair_cells = (f"{row['pair_default_images_per_s']:>11.2f}"
                      f"{row['pair_tuned_images_per_s']:>11.2f}"
                      f"{row['speedup_vs_pair_tuned']:>8.1f}"
                      if "pair_tuned_images_per_s" in row else f"{'-':>11}{'-':>11}{'-':>8}")
        captum_cells = (f"{row['captum_images_per_s']:>9.2f}{row['speedup_vs_captum']:>9.2f}"
                        f"{row['ceiling_vs_captum']:>7.2f}"
                        if "captum_images_per_s" in row else f"{'-':>9}{'-':>9}{'-':>7}")
        peer = [(row[rate], row[ratio]) for rate, ratio in PEER_KEYS.values() if rate in row]
        peer_cells = (f"{peer[0][0]:>11.2f}{peer[0][1]:>7.2f}" if peer
                      else f"{'-':>11}{'-':>7}")
        print(f"{row['method']:<24}{row['call_images']:>7}{row['engine_images_per_s']:>13.2f}"
              f"{row['engine_chunk']:>6}"
              f"{row['ceiling_images_per_s']:>10.2f}{row['ratio_to_ceiling']:>7.2f}"
              + peer_cells + captum_cells + pair_cells)


def ceiling_batch_sizes(flag: str, num_images: int) -> list:
    """The --batch_sizes the ceiling tries: those at most `num_images` (the images a
    one-gradient call explains at this size), or that count alone where none is (a small
    --num_images at 224 px: 64 images at 64 px are 5 there, 8 at least)."""
    return [b for b in (int(b) for b in flag.split(",")) if b <= num_images] or [num_images]


def bench_model(entry, config):
    """The rows of one model's table."""
    model, size = benchmark_model(entry)
    name = entry
    scale = (size / 64) ** 2  # the image counts are for 64 px
    num_images = max(8, round(config.num_images / scale))
    heavy_images = max(4, round(config.heavy_images / scale))
    config = dataclasses.replace(config, num_images=num_images, heavy_images=heavy_images)
    call_sizes = [int(size) for size in config.call_sizes.split(",") if size.strip()]
    images = np.random.default_rng(0).normal(
        0, 50, (max([config.num_images, *call_sizes]), size, size, 3)).astype(np.float32)
    targets = np.argmax(saliency_gen.predict(model, images), axis=1)
    batch_sizes = ceiling_batch_sizes(config.batch_sizes, num_images)
    gradients_per_second, (best_batch, static), rates = ceiling(model, images, targets,
                                                               batch_sizes, config.repeats)
    print(f"\nmodel {name}, {os.cpu_count()} CPUs; raw gradient throughput by "
          "batch size: " + ", ".join(f"{b}: {r:.0f}/s" for b, r in rates.items()))
    ceilings: dict = {}  # gradients -> (run, gradients per run): the ceiling of a call's work

    def ceiling_at(gradients):
        if gradients not in ceilings:
            ceilings[gradients] = gradient_runner(model, images, targets, gradients, static,
                                                  batch=best_batch)
        return ceilings[gradients]

    chunks = sorted({ENGINE_DEFAULT_CHUNK, best_batch})
    twin = pytorch_twin(model, entry.partition("@")[0])
    rows = []
    cases = [(entry, count) for entry in METHODS for count in call_sizes or [
        config.num_images if entry[2] == 1 else config.heavy_images]]
    timing = progress.bar(len(cases), f"bench_saliency {name}: methods x call sizes", "row")
    for (label, method, per_image, params, in_pair), count in cases:

        # Calls enough for the gradients of one timing of the ceiling (`gradient_runner`): a
        # single small call timed right after another function's runs pays for the switch.
        rounds = max(1, 256 // (count * per_image))

        def engine_run(chunk, method=method, params=params, count=count, rounds=rounds):
            def run():
                for _ in range(rounds):
                    saliency_gen.attribute(model, images[:count], method, targets[:count],
                                           batch_size=chunk, **params)
            return run

        runs = {chunk: engine_run(chunk) for chunk in chunks}
        # the raw gradients the call needs, in batches of at most the ceiling's
        runs["ceiling"], ceiling_count = ceiling_at(count * per_image)
        peer, peer_count = None, count  # measured beside the engine
        if "(" in method:  # a noise wrapper: its noise peer
            peer, runs["peer"] = "noise", noise_peer_runner(
                model, images[:count], targets[:count], best_batch, params["nsamples"])
        elif method == "integrated_gradients":  # IG's own work, written bare
            peer, runs["peer"] = "bare IG", bare_ig_runner(
                model, images[:count], targets[:count], best_batch, params["steps"])
        elif method in BARE_FUNCTIONS:  # the method's own function, traced bare
            peer = "bare"  # the call's own images, as the ceiling
            runs["peer"], peer_count = gradient_runner(model, images, targets, count, static,
                                                       BARE_FUNCTIONS[method], best_batch,
                                                       host=True)
        captum = {}
        if twin is not None and method in CAPTUM_METHODS:
            captum = {("captum", setting): run for setting, run in captum_runs(
                twin, images[:count], targets[:count], method, params).items()}
            runs.update(captum)
        # A one-gradient run of a cheap model lasts a tenth of a second: more turns against jitter.
        seconds = interleaved(runs, config.repeats * (4 if per_image == 1 else 1))
        for size in chunks:  # seconds a call
            seconds[size] /= rounds
        chunk = min(chunks, key=lambda name: seconds[name])
        engine = count / seconds[chunk]
        limit = ceiling_count / seconds["ceiling"] / per_image
        row = {"model": name, "method": label, "call_images": count,
               "engine_images_per_s": engine,
               "engine_chunk": chunk, "ceiling_images_per_s": limit,
               "ratio_to_ceiling": engine / limit}
        if peer is not None:
            rate_key, ratio_key = PEER_KEYS[peer]
            peer_rate = peer_count / seconds["peer"]
            row.update({rate_key: peer_rate, ratio_key: engine / peer_rate})
        if captum:
            setting = min(captum, key=lambda name: seconds[name])
            row.update(captum_images_per_s=count / seconds[setting],
                       captum_batch=setting[1] or "all",
                       speedup_vs_captum=seconds[setting] / seconds[chunk],
                       ceiling_vs_captum=limit * seconds[setting] / count)
        if in_pair and config.pair_images:
            row.update(pair_rates(model, images[:config.pair_images],
                                  targets[:config.pair_images], method, params, engine))
        rows.append(row)
        timing.update(1)
    timing.close()
    print_rows(rows, best_batch, static, chunks, config)
    return {"model": name, "ceiling_batch": best_batch, "ceiling_static_shape": static,
            "ceiling_rates": rates, "rows": rows}


def run(config: Config):
    print(f"machine: {provenance.machine()}", flush=True)
    for name, function in USER_FUNCTIONS.items():
        saliency_gen.register_method(name, function, replace=True)
    results = [bench_model(name, config) for name in config.models]
    rows = [row for result in results for row in result["rows"]]
    print()
    for what, key, chosen in (
            ("the built-in gradient and IG / ceiling", "ratio_to_ceiling",
             [row for row in rows  # the built-ins without noise (IG has a peer too)
              if PEER_KEYS["noise"][1] not in row
              and (row["method"] == "gradient" or PEER_KEYS["bare"][1] not in row)]),
            ("IG / bare IG", "ratio_to_bare_ig",
             [row for row in rows if "ratio_to_bare_ig" in row]),
            ("noise wrappers / their noise peer", "ratio_to_noise_peer",
             [row for row in rows if "ratio_to_noise_peer" in row]),
            ("gradient, gradient x input and the user's method / their bare function",
             "ratio_to_bare_function",
             [row for row in rows if "ratio_to_bare_function" in row])):
        if chosen:
            low = min(chosen, key=lambda row: row[key])
            print(f"{what} >= 0.9 on every model: {'yes' if low[key] >= 0.9 else 'NO'} "
                  f"(lowest {low[key]:.3f}: {low['model']} {low['method']})")
    captum_rows = [row for row in rows if "speedup_vs_captum" in row]
    if captum_rows:
        lowest = min(row["speedup_vs_captum"] for row in captum_rows)
        bounded = [f"{row['model']} {row['method']} (ceiling {row['ceiling_vs_captum']:.2f}x)"
                   for row in captum_rows if row["ceiling_vs_captum"] < 2]
        print(f"engine >= 2x Captum (IG, SmoothGrad^2) on every model with a twin: "
              f"{'yes' if lowest >= 2 else 'NO'} (lowest {lowest:.2f}x)"
              + (f"; TensorFlow's raw-gradient ceiling is itself under 2x Captum for: "
                 f"{', '.join(bounded)}" if bounded else ""))
    else:
        print("Captum: not measured (torch or captum missing; pip install torch==2.13.0 captum)")
    if config.output_json:
        with open(config.output_json, "w", encoding="utf-8") as handle:
            json.dump({"results": results}, handle, indent=2)
    return results


if __name__ == "__main__":
    run_binary(Config, run)
