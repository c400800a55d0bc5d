"""A fully resolved method: `MethodSpec` (base unit, noise wrapper, parameters, post-processing).

`make_spec` fills in the defaults a unit and its wrapper declare and checks every value, so a
spec that exists is valid. Specs are hashable (the engine caches its traced runners by them);
array parameters such as a baseline image are held as `FrozenArray`.
"""
import dataclasses
from typing import Any, Optional, Sequence

import numpy as np
import tensorflow as tf

from models.foundation.errors import UserError, check_known
from saliency_gen.attribution import noise, transforms, units


@dataclasses.dataclass(frozen=True)
class MethodSpec:
    """A base method, an optional noise wrapper, parameters and post-processing."""

    base: str
    wrapper: Optional[str] = None
    params: tuple = ()  # sorted (name, value) pairs
    transform: str = "raw"
    reduce: str = "none"
    times_input: bool = False  # multiply the final map by the clean input (BAM "SG x Input")

    @property
    def options(self) -> dict:
        return dict(self.params)

    @property
    def name(self) -> str:
        return f"{self.wrapper}({self.base})" if self.wrapper else self.base

    @property
    def unit(self) -> units.Method:
        return units.registered()[self.base]

    @property
    def nsamples(self) -> int:
        """Noise samples per image: the wrapper's (or a unit's own `nsamples`), else 1."""
        return int(self.options.get("nsamples", 1))

    @property
    def wrapper_samples(self) -> int:
        """Noise samples the wrapper draws per image (1 without a wrapper)."""
        return int(self.options["nsamples"]) if self.wrapper else 1

    def evaluations(self, shape: Sequence[int]) -> int:
        """Model evaluations (gradient or forward passes) per image of `shape` (H, W, C): the
        unit's, once per noise sample; 0 for a model-free method."""
        return self.wrapper_samples * self.unit.evaluations(self.options, shape)


class FrozenArray:
    """A read-only array parameter (e.g. a baseline image), hashable by shape and bytes."""

    def __init__(self, array: Any):
        self.array = np.array(array, np.float32)
        self.array.setflags(write=False)
        self._key = (self.array.shape, self.array.tobytes())

    def __hash__(self):
        return hash(self._key)

    def __eq__(self, other):
        return isinstance(other, FrozenArray) and self._key == other._key

    def __repr__(self):
        return f"FrozenArray(shape={self.array.shape})"


def _freeze(value):
    if isinstance(value, (np.ndarray, tf.Tensor)) or (
            isinstance(value, list) and value and isinstance(value[0], (list, np.ndarray))):
        return FrozenArray(value)
    if isinstance(value, list):
        return tuple(value)
    return value


def make_spec(base: str, wrapper: Optional[str] = None, transform: str = "raw",
              reduce: str = "none", times_input: bool = False, **params: Any) -> MethodSpec:
    """A `MethodSpec` with defaults filled in and every parameter checked."""
    unit = units.unit(base)
    if unit is None:
        raise UserError(f"unknown method {base!r}; see saliency_gen.METHODS for every name, or "
                        "register your own with saliency_gen.register_method")
    name = f"{wrapper}({base})" if wrapper else base
    if wrapper is not None:
        check_known(wrapper, noise.WRAPPERS, "noise wrapper")
        if not unit.wrappable:
            raise UserError(f"{base} takes no noise wrapper")
    declared = dict(unit.params, **(noise.WRAPPER_PARAMS if wrapper else {}))
    unknown = sorted(set(params) - set(declared))
    if unknown:
        raise UserError(f"method {name} has no parameter {', '.join(unknown)}; it accepts "
                        f"{', '.join(sorted(declared)) or 'none'}")
    merged = {key: params.get(key, param.default) for key, param in declared.items()}
    unit.check(merged)
    if wrapper is not None:
        for key, param in noise.WRAPPER_PARAMS.items():
            param.check(key, merged[key])
    transforms.check(transform, reduce)
    frozen = tuple(sorted((key, _freeze(value)) for key, value in merged.items()))
    return MethodSpec(base, wrapper, frozen, transform, reduce, times_input)
