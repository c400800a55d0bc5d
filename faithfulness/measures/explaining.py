"""How the measures that re-explain perturbed inputs explain them (docs/measures.md,
"Explanation functions"): `explain_func` is a method name of the attribution engine
("gradient", "integrated_gradients", "smoothgrad(gradient)", "bam:GC", a registered method),
a "package.module:function" plug-in, or a Python callable `explain_func(model=, inputs=,
targets=, **explain_func_kwargs)` as Quantus calls it (NHWC inputs here); its maps are prepared
as the call's `a_batch` was (`arguments.prepared`), and must have its shape.
"""
import dataclasses
from typing import Any, Callable, Hashable, Optional

import keras
import numpy as np

import models
from faithfulness.measures.arguments import prepared
from models.foundation.errors import ShapeError, UserError
from models.foundation.tracing import assigner, kept
from saliency_gen.attribution import engine, names


def keras_of(model: Any, what: str) -> Any:
    """`model` as a Keras model the measure may wrap or change: a live Keras model as it is,
    or the zoo model an export holds (`models.rebuild`, once per loaded model: callers copy it
    before they change it); of the export whose weights a loaded model holds while it holds
    them (`LoadedModel.holding`), or the Keras model it holds; else one line naming `what`
    needs."""
    held = getattr(model, "held", None)
    if isinstance(model, keras.Model):
        return model
    if isinstance(held, keras.Model):
        return held
    path = getattr(held or model, "path", None)
    if path is None:
        raise UserError(f"{what}: pass a Keras model or an exported zoo model (models.load)")
    return kept(model, ("rebuilt Keras model", path), lambda: models.rebuild(path))


def kept_copy(model: Any, key: Hashable, what: str,
              build: Callable[[keras.Model], keras.Model]) -> keras.Model:
    """A Keras model made by `build(source)` from `model`'s Keras form (`keras_of`) once per
    (`model`, `key`) and kept with `model`, so that the engine's traces on it serve every call
    (a copy made per call was traced again per call); it takes `model`'s current weights at
    each call, in one traced call. A measure that changes its weights restores them before it
    returns (`randomisation.cascade`), and calls on one model run one at a time."""
    source = keras_of(model, what)
    copy = kept(model, ("measures' copy", key), lambda: build(source))
    kept(copy, ("weights of", source), lambda: assigner(copy.weights, source.weights))()
    return copy


@dataclasses.dataclass(frozen=True)
class KeyedExplain:
    """An explainer that takes the perturbed images' ids, `explain(images, targets, ids)` (a
    binary's or the card's explainer of a `Group`)."""

    explain: Callable[..., Any]


def raw_explainer(model: Any, explain_func: Any, explain_func_kwargs: Optional[dict], *,
                  batch_size: int = 64, seed: int = 0) -> Callable[..., np.ndarray]:
    """`raw(images, targets, ids)`: the maps of `explain_func` (a `KeyedExplain`, a callable
    as Quantus calls one, or a method name for the engine) of `model` for `images` (NHWC), as
    they come."""
    if explain_func is None:
        raise UserError("explain_func is missing: this measure explains images again; give a "
                        "method name (e.g. 'gradient') or a callable")
    kwargs = dict(explain_func_kwargs or {})
    if isinstance(explain_func, KeyedExplain):
        def raw(images, targets, ids):
            return np.asarray(explain_func.explain(images, targets, ids))
    elif callable(explain_func):
        def raw(images, targets, ids):
            return np.asarray(explain_func(model=model, inputs=images, targets=targets, **kwargs))
    else:
        resolved = names.resolved(explain_func, **kwargs)

        def raw(images, targets, ids):
            return engine.attribute(model, images, resolved, targets, batch_size=batch_size,
                                    seed=seed, ids=ids)
    return raw


def explainer(model: Any, explain_func: Any, explain_func_kwargs: Optional[dict], *,
              abs: bool, normalise: bool, map_shape: tuple,  # noqa: A002
              batch_size: int = 64, seed: int = 0) -> Callable[..., np.ndarray]:
    """`explain(images, targets, ids)` -> float64 [n, F]: the maps of `explain_func` for
    `images` (NHWC), prepared as `a_batch` (`map_shape`: its (C', H, W))."""
    raw = raw_explainer(model, explain_func, explain_func_kwargs, batch_size=batch_size,
                        seed=seed)

    def explain(images: np.ndarray, targets: np.ndarray, ids: np.ndarray,
                blocks: int = 1, unscaled: bool = False) -> np.ndarray:
        """The prepared maps of `images`, each of `blocks` equal blocks normalised on its
        own (Quantus normalises each batch it explains); `unscaled`: checked, not scaled."""
        maps = np.asarray(raw(images, targets, ids))
        if maps.ndim == 4 and map_shape[0] == 1 and maps.shape[-1] == 1:
            maps = maps[..., 0]
        found = prepared(images, maps, abs=abs and not unscaled,
                         normalise=normalise and not unscaled,
                         blocks=blocks,
                         maps_name="explain_func's maps")
        if found.map_shape != map_shape:
            raise ShapeError(_mismatch(np.shape(maps)[1:], map_shape))
        return found.a
    return explain


def _mismatch(maps: tuple, map_shape: tuple) -> str:
    """The line for an explain_func whose maps (per image, as it gives them) do not have the
    shape of a_batch's (`map_shape`, channel first), a_batch's shown as it was given (NHWC)."""
    channels, height, width = map_shape
    given = f"({height}, {width})" if channels == 1 else f"({height}, {width}, {channels})"
    one = channels == 1 and len(maps) == 3 and maps[-1] > 1
    return (f"explain_func gives maps of shape {tuple(maps)} per image, but a_batch's are "
            f"{given}{' (one channel)' if one else ''}; compute a_batch with the same "
            "explain_func" + (", or give one whose maps have one channel (its maps summed "
                              "over the channels, say)" if one else ""))
