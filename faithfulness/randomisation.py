"""The model-parameter randomisation sanity check (Adebayo et al. 2018), cascading from the top
(docs/report_card.md, "Sanity check").

Stage k re-initialises the k weighted layers nearest the output (kernels and biases drawn from
each layer's own initialisers, seeded); the method explains the same images and targets with
the randomised model, and each image's Spearman rank correlation between the original and the
randomised map (absolute values summed over channels, as the paper's main figures) says how
much the map still looks the same. A method that explains the model should fall towards 0 as
more layers are randomised; a map that does not depend on the model (an edge detector, the random
control) stays at 1. The check is MPRT's top-down case at those stages: both re-initialise
through `cascade` (docs/measures.md, "Randomisation").
"""
import dataclasses
import functools
from typing import Any, Callable, Generator, Iterable, Optional

import keras
import numpy as np

import models
import saliency_gen
from faithfulness import stats
from models.architectures.zoo import in_precision
from models.formats import exporting
from models.foundation.metric_spec import MetricSpec
from models.foundation.tracing import assigner, kept, set_aside
from models.report.card_engine import Benchmark
from saliency_gen.attribution import names


def weighted_layers(model: keras.Model) -> list:
    """The layers with a kernel, output side first, those of a nested model (a transfer-learning
    Sequential([base, pooling, head])) among them in its place, as Quantus walks a PyTorch
    model's modules."""
    return [layer for layer in reversed(_flat_layers(model))
            if getattr(layer, "kernel", None) is not None]


def _flat_layers(model: keras.Model) -> list:
    """`model.layers` with each nested model replaced by its own layers, in order."""
    return [inner for layer in model.layers for inner in (
        _flat_layers(layer) if isinstance(layer, keras.Model) else [layer])]


def stages(count: int) -> list:
    """How many top layers each stage randomises: 1, 2, half and all (distinct, ascending)."""
    return sorted({k for k in (1, 2, max(1, count // 2), count) if 1 <= k <= count})


def randomise_top(model: keras.Model, count: int, seed: int = 0) -> None:
    """Re-initialises (in place) the kernels and biases of the `count` weighted layers nearest
    the output, each from its own initialiser with a seed of its own."""
    randomise_layers(model, range(count), seed)


def randomise_layers(model: keras.Model, indices: Iterable[int], seed: int = 0) -> None:
    """Re-initialises (in place) the kernels and biases of the weighted layers at `indices`
    (0: nearest the output, `weighted_layers`), each from its own initialiser with a seed of
    its own (the layer's index): the same values whichever other layers are re-initialised.
    A seeded initialiser gives the same values at every call, so the values of the last seed
    used are drawn once and kept with the model (one set: another seed replaces them), and
    the assignment is one traced call."""
    indices = tuple(indices)
    drawn = kept(model, ("re-initialisation",), _Drawn)
    if drawn.seed != seed:
        drawn.seed, drawn.values, drawn.assigners = seed, {}, {}
    if indices not in drawn.assigners:
        drawn.assigners[indices] = _reinitialiser(model, indices, seed, drawn.values)
    drawn.assigners[indices]()


@dataclasses.dataclass
class _Drawn:
    """A model's fresh values of one seed ({(layer index, variable name): value}) and the
    traced calls that assign them ({layer indices: call})."""

    seed: Optional[int] = None
    values: dict = dataclasses.field(default_factory=dict)
    assigners: dict = dataclasses.field(default_factory=dict)


def _reinitialiser(model: keras.Model, indices: tuple, seed: int,
                   values: dict) -> Callable[[], None]:
    """The traced call that gives the layers at `indices` their fresh values, each drawn once
    into `values` ({(layer index, variable name): value})."""
    targets, fresh = [], []
    for index, name, variable, draw in _initialisers(model, indices, seed):
        if (index, name) not in values:
            values[index, name] = draw()
        targets.append(variable)
        fresh.append(values[index, name])
    return assigner(targets, fresh)


def _initialisers(model: keras.Model, indices: tuple, seed: int) -> list:
    """[(layer index, variable name, variable, draw)] of the kernels and biases of the weighted
    layers at `indices`: `draw()` gives the variable's fresh value from its layer's own
    initialiser, seeded with seed x 1000 + the layer's index."""
    layers = weighted_layers(model)
    found = []
    for index in indices:
        layer = layers[index]
        for name in ("kernel", "bias"):
            variable = getattr(layer, name, None)
            initializer = getattr(layer, f"{name}_initializer", None)
            if name == "kernel" and initializer is None:  # a depthwise convolution's kernel
                initializer = getattr(layer, "depthwise_initializer", None)
            if variable is None or initializer is None:
                continue
            fresh = keras.initializers.deserialize(keras.initializers.serialize(initializer))
            if hasattr(fresh, "seed"):
                fresh.seed = seed * 1000 + index
            found.append((index, name, variable,
                          functools.partial(fresh, variable.shape, dtype=variable.dtype)))
    return found


LAYER_ORDERS = ("top_down", "bottom_up", "independent")


def cascade(model: keras.Model, layer_order: str = "top_down", seed: int = 0,
            steps: Optional[Iterable[int]] = None) -> Generator[int, None, None]:
    """Re-initialises `model`'s weighted layers in place, one step at a time, yielding each
    step's index once the model is at it: step k re-initialises the k + 1 layers nearest the
    output ("top_down", the check's stage k + 1) or the input ("bottom_up"), or the k-th
    layer alone ("independent"); `steps` chooses the steps yielded (all by default). The
    trained weights are back when the generator ends. MPRT (`faithfulness.measures.mprt`) and
    the card's check both randomise through it."""
    layers = weighted_layers(model)
    trained = [variable for layer in layers for variable in layer.weights]
    running = kept(model, ("cascades running",), lambda: [0])  # one inside another: own copy
    keep, restore = (kept(model, ("trained weights aside",), lambda: set_aside(trained))
                     if not running[0] else set_aside(trained))
    keep()
    running[0] += 1
    order = list(range(len(layers)))
    if layer_order == "bottom_up":
        order.reverse()
    wanted = set(range(len(order)) if steps is None else steps)
    done = 0  # cumulative orders: the layers of `order` re-initialised so far
    try:
        for step, index in enumerate(order):
            if step not in wanted:
                continue
            if layer_order == "independent":
                restore()
                randomise_layers(model, [index], seed)
            else:  # a layer's values depend only on its seed: the new layers alone
                randomise_layers(model, order[done:step + 1], seed)
                done = step + 1
            yield step
    finally:
        restore()
        running[0] -= 1


def perturb_weights(model: keras.Model, sd: float, seed: int = 0) -> None:
    """Multiplies (in place) every trainable weight of `model` by 1 + seeded Gaussian noise of
    standard deviation `sd`, each weight tensor with a seed of its own (MetaQuantus's model
    resilience test: a minor change that should leave the maps as they are)."""
    for index, variable in enumerate(model.trainable_weights):
        noise = np.random.default_rng([seed, 0x57, index]).normal(1.0, sd, variable.shape)
        variable.assign(variable.numpy() * noise.astype(variable.dtype))


def flat_abs(maps: Any) -> np.ndarray:
    """[N, pixels]: each map's absolute values summed over channels, flattened (what the
    check correlates, as the paper's main figures)."""
    maps = np.abs(np.asarray(maps, np.float64)).sum(axis=-1)
    return maps.reshape(len(maps), -1)


def model_free(method: Any, shape: tuple) -> bool:
    """Does `method` (a name or a resolved method) compute its maps of images of `shape`
    (H, W, C) without evaluating the model (the edge, centre and constant controls, the random
    maps)?"""
    return names.resolved(method).evaluations(shape) == 0


def benchmark(model_path: str, images: np.ndarray, labels: np.ndarray, ids: np.ndarray, *,
              data: dict, seed: int = 0, batch_size: int = 32,
              maps_of: Optional[Callable[[str], np.ndarray]] = None,
              methods: Optional[dict] = None, precision: str = "float32",
              randomised_maps_of: Optional[Callable[[str], np.ndarray]] = None,
              rebuilt: Optional[Callable[[], keras.Model]] = None,
              holder: Optional[exporting.LoadedModel] = None) -> Benchmark:
    """The cascading check of the exported zoo model `model_path` on `images` (its input
    space), explaining `labels`: one metric per stage, the mean Spearman correlation (lower is
    better). `maps_of(method)`, when given, supplies the trained model's maps of at least
    `images` (their first len(images) are used); `methods` ({name: Resolved}, the run's)
    spares resolving a method's name again. `precision` is the trained and the randomised
    model's compute precision (`models.foundation.rules.PRECISIONS`). `randomised_maps_of(method)`,
    when given, supplies the maps of at least `images` by the model with every weighted layer
    re-initialised (`randomise_top` with `seed`: the last stage's model, the same weights), so
    that the card computes them once for this check and its meta-evaluation. `rebuilt()`, when
    given, is the rebuilt model to cascade (in `precision`; a caller that randomises the same copy
    elsewhere, restoring it, gets each method traced once). The randomised maps are computed by
    `holder` (the caller's loaded export of `model_path`; without it, the check's own) holding the
    cascaded copy's weights (`LoadedModel.holding`), so the methods' traces on it serve them:
    the same bytes as the copy's own maps (docs/report_card.md, "Sanity check")."""
    info = models.read_info(model_path)
    # the trained maps' source
    loaded = (models.load(exporting.export_in_precision(model_path, precision))
              if maps_of is None else None)
    # One randomised model serves every stage and method, its weights set per stage in place:
    # the methods' traced functions are reused (a rebuilt model per stage meant a new trace of
    # every method per stage, most of the check's time on a real network).
    randomised = (rebuilt() if rebuilt is not None
                  else in_precision(lambda: models.rebuild(model_path), precision))
    count = len(weighted_layers(randomised))
    chosen = stages(count)
    # (an export without the list of its variables cannot hold them: the copy explains)
    explaining, within = exporting.stand_in(holder or loaded, randomised)

    def explain(model, method):
        chosen = methods.get(method, method) if methods else method
        return saliency_gen.attribute(model, images, chosen, labels, batch_size=batch_size,
                                      seed=seed, ids=ids, preprocessing=info["preprocessing"])

    def explain_randomised(method):  # with the copy's weights as they are now
        return within(lambda: explain(explaining, method))()

    def score(method):  # MPRT top-down at the chosen stages, on |maps| summed over channels
        trained = explain(loaded, method) if maps_of is None else maps_of(method)[:len(images)]
        original = stats.ranks(flat_abs(trained))  # ranked once for every stage
        if model_free(methods.get(method, method) if methods else method, images.shape[1:]):
            # Its maps do not read the model, so every stage's are the same bytes: computed
            # once, and no weights re-initialised for it (docs/report_card.md, "Sanity check").
            same = stats.spearman_ranked(original, flat_abs(explain_randomised(method)))
            return {f"top {k}": same.copy() for k in chosen}

        def randomised_maps(step):
            if step + 1 == count and randomised_maps_of is not None:
                return randomised_maps_of(method)[:len(images)]
            return explain_randomised(method)

        return {f"top {step + 1}":
                stats.spearman_ranked(original, flat_abs(randomised_maps(step)))
                for step in cascade(randomised, "top_down", seed, [k - 1 for k in chosen])}

    return Benchmark(
        name="Randomisation",
        metrics=tuple(MetricSpec(f"top {k}", False, about=f"Spearman correlation of the maps after "
                                                       f"the top {k} of {count} weighted layers "
                                                       "are re-initialised") for k in chosen),
        score=score, settings={"model_id": info["model_id"], "n_images": len(images),
                               "seed": seed, "stages": chosen, **data,
                               **({} if precision == "float32" else {"precision": precision})},
        cost=2.0 * len(chosen),
        explains=(("", len(images) * (len(chosen) + (maps_of is None))),))
