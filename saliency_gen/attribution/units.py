"""What a method is: a unit that declares its parameters, its cost and its per-item computation.

A base attribution method is one `Method` subclass in its own module under
`saliency_gen/attribution/methods/`, registered with `@register` (docs/saliency.md, "Method
units"). It says:

* `params`: each parameter's default and check (`Param`);
* `views`: which model views it needs ("logits", "guided", "cam"; none for a model-free map);
* `steps(options, shape)`: work items per (image, noise sample), e.g. IG's path points;
* `evaluations(options, shape)`: model evaluations per image (forward or gradient passes);
* `plan(options, context)`: the traced per-item computation for one run, a `Plan`.

The engine flattens image x noise sample x step into one stream of items and evaluates the plan
chunk by chunk (`models.foundation.executor`); noise wrappers (`saliency_gen.attribution.noise`)
and transforms (`saliency_gen.attribution.transforms`) compose around any unit without knowing
it. A method that cannot be traced (a bridge to numpy code) returns a `HostPlan` instead: one
call per group of images.
"""
import dataclasses
import importlib
from typing import Any, Callable, Dict, NamedTuple, Optional, Sequence, Tuple

import numpy as np
import tensorflow as tf

from models.foundation.errors import UserError, check_known


@dataclasses.dataclass(frozen=True)
class Param:
    """A method parameter: its default, and how a value is checked (choices or a minimum)."""

    default: Any
    choices: Optional[Sequence] = None
    minimum: Optional[float] = None
    label: Optional[str] = None  # how error messages name it (default: the parameter name)
    doc: str = ""

    def check(self, name: str, value: Any) -> None:
        label = self.label or name
        if self.choices is not None:
            check_known(value, self.choices, label)
        if self.minimum is not None and int(value) < self.minimum:
            raise UserError(f"{label} must be at least {self.minimum:g}; got {value!r}")


class Items(NamedTuple):
    """One chunk of work items, as a plan's `shares` sees them (all tensors, leading [chunk])."""

    x: tf.Tensor        # [chunk, H, W, C] the item's input (noisy under a noise wrapper)
    targets: tf.Tensor  # [chunk] int32 explained class
    step: tf.Tensor     # [chunk] int32 step of the unit (path point, mask, window, ...)
    aux: tf.Tensor      # [chunk or 1, H, W, C] the run's input (e.g. the IG baseline): one row
                        # when the run has one (broadcast), else the item's image's row
    ids: tf.Tensor      # [chunk] int64 image id (the key of every random draw)
    image: tf.Tensor    # [chunk] int32 position of the image in its group


@dataclasses.dataclass
class Context:
    """What a unit may use to build its plan for one run."""

    model: Any                  # the `models.formats.adapter` adapter (None for model-free methods)
    shape: Tuple[int, int, int]  # (H, W, C) of the images
    preprocessing: Optional[str]  # the input space, for pixel-space baselines
    seed: int
    name: str                   # the method's name as the caller wrote it (for messages)


class Plan:
    """How the engine computes one base method: `steps` items per (image, sample), each adding
    `contribution(items)` [chunk, H, W, C] to its image's map. `aux`: an optional per-run array
    [H, W, C] or per-image array [N, H, W, C] handed to the items (baselines).

    Plans whose per-image result is not a plain sum of item shares declare their accumulators'
    dtypes in `sum_dtypes` and override `shares` and `finish`, and `zeros` where an
    accumulator is not map-shaped (e.g. SmoothGrad-CAM++ accumulates moments at feature
    resolution)."""

    additive = True  # noise wrappers compose only around additive plans
    slots_per_image = 1  # accumulator slots per image
    sum_dtypes: tuple = (tf.float32,)  # one dtype per accumulator (the engine's buffers too)

    def __init__(self, steps: int = 1, contribution: Optional[Callable] = None,
                 aux: Optional[np.ndarray] = None):
        self.steps = int(steps)
        self.contribution = contribution
        self.aux = aux

    def start(self, images: tf.Tensor, targets: tf.Tensor, ids: tf.Tensor,
              sigmas: Any) -> Any:
        """Per-group state computed once inside the traced function (default: none)."""
        return None

    def slot(self, image: tf.Tensor, step: tf.Tensor) -> tf.Tensor:
        """The accumulator slot of each item (default: its image)."""
        return image

    def zeros(self, state: Any, slots: int, shape: Sequence[int]) -> tuple:
        """The zero accumulators, one per `sum_dtypes`, each [slots + 1, ...] (one dropped slot
        for padding)."""
        return tuple(tf.zeros([slots + 1, *shape], dtype) for dtype in self.sum_dtypes)

    def shares(self, state: Any, items: Items) -> tuple:
        """The items' additive shares, one tensor per accumulator."""
        if self.contribution is None:
            raise NotImplementedError(f"{type(self).__name__} needs a contribution or its own "
                                      "shares")
        return (tf.cast(self.contribution(items), tf.float32),)

    def finish(self, state: Any, sums: tuple) -> tf.Tensor:
        """The maps [G, H, W, C] of a group from its accumulators."""
        return sums[0]

    @property
    def direct(self) -> bool:
        """True when each image's map is its one item's share (one step, the default slots,
        shares and finish): the engine then collects the shares instead of summing them."""
        kind = type(self)
        return (self.steps == 1 and self.slots_per_image == 1 and kind.shares is Plan.shares
                and kind.zeros is Plan.zeros and kind.finish is Plan.finish)


class HostPlan:
    """A method computed outside the traced stream: `run(images, targets, ids)` -> numpy maps
    [G, H, W, C] for a group of images (bridges to numpy libraries, untraceable user code)."""

    additive = False
    steps = 1
    aux = None

    def __init__(self, run: Callable):
        self.run = run


class Method:
    """A base attribution method (see the module docstring). Subclasses set the class
    attributes and implement `plan`; `steps` and `evaluations` default to one item and one
    model evaluation per item."""

    name: str = ""
    summary: str = ""
    params: Dict[str, Param] = {}
    views: Tuple[str, ...] = ("logits",)
    wrappable: bool = True   # may a noise wrapper compose around it?

    def steps(self, options: dict, shape: Sequence[int]) -> int:
        return 1

    def evaluations(self, options: dict, shape: Sequence[int]) -> int:
        return self.steps(options, shape) if self.views else 0

    def seeded(self, options: dict) -> bool:
        """Does the plan depend on the seed (beyond a noise wrapper's draws)?"""
        return False

    def check_maps(self, maps: np.ndarray, name: str) -> None:
        """Checks the finished maps (user methods check shape-independent properties here)."""

    def check(self, options: dict) -> None:
        """Checks every parameter value; units with cross-parameter rules extend it."""
        for name, param in self.params.items():
            if name in options:
                param.check(name, options[name])

    def plan(self, options: dict, context: Context) -> Any:
        raise NotImplementedError


REGISTRY: Dict[str, Method] = {}


def registered() -> Dict[str, Method]:
    """The registry (name -> unit), once the built-in units (`saliency_gen.attribution.methods`)
    have registered themselves: importing the package does not load them (docs/architecture.md,
    "Light imports")."""
    importlib.import_module("saliency_gen.attribution.methods")  # a no-op after the first time
    return REGISTRY


def register(method: Any, name: Optional[str] = None) -> Any:
    """Registers a `Method` (class or instance) under `name` (default: its own `name`); returns
    it unchanged so it can decorate a class. Names are unique: registering a taken name for
    another unit is an error."""
    unit = method() if isinstance(method, type) else method
    name = name or getattr(unit, "name", "")
    if not isinstance(unit, Method) or not name:
        raise UserError(f"{method!r} is not a saliency_gen Method with a name")
    if name in registered() and REGISTRY[name] is not unit:
        raise UserError(f"a method called {name!r} is already registered; choose another name")
    REGISTRY[name] = unit
    return method


def unit(name: str) -> Optional[Method]:
    """The registered unit called `name`, or None."""
    return registered().get(name)


def gradient_of(function: Callable, x: tf.Tensor, targets: tf.Tensor) -> tf.Tensor:
    """d function(x)[target] / dx per row: the input gradient every gradient method takes."""
    with tf.GradientTape() as tape:
        tape.watch(x)
        score = tf.reduce_sum(tf.gather(function(x), targets, batch_dims=1))
    return tape.gradient(score, x)


def tile_channels(maps: tf.Tensor, channels: int) -> tf.Tensor:
    """[B, H, W] -> [B, H, W, C]: a one-channel map repeated over the image's channels."""
    return tf.repeat(maps[..., tf.newaxis], channels, axis=-1)
