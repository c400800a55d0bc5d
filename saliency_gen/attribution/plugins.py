"""A researcher's own method, in every benchmark (docs/saliency.md, "Your own method").

The simplest contract is a plain function

    def my_method(model, images, targets):   # model: float32 [B, H, W, C] -> logits [B, K]
        ...                                   # images: tf.Tensor [B, H, W, C], input space return
        maps                           # targets: int32 [B]; maps [B, H, W, C] or [B, H, W, 1]

registered with `register_method("name", my_method)`, or named anywhere a method name is
accepted by the string "package.module:my_method" (imported on first use). The function is
traced and called on chunks of any size inside the engine's stream (one work item per image
and noise sample), so SmoothGrad / SmoothGrad² / VarGrad wrap it like any built-in. Keyword
parameters declared in `params` are passed to it (and can be overridden per call); a function
that takes `ids` receives the images' int64 keys (for its own stateless random draws) and one
that takes `seed` the run's seed. `traced=False` runs it eagerly on whole groups of images
instead (numpy code; no noise wrappers); a function named by its string says so by an attribute,
`my_method.traced = False`. A `Method` subclass or instance can be registered too,
for multi-item methods that join the stream item by item.

A function that raises, returns the wrong shape, or returns NaN or infinite values gets one
`UserError` line naming the method and what to fix.
"""
import importlib
import inspect
import logging
import os
from typing import Any, Callable, Optional, Sequence

import numpy as np
import tensorflow as tf

from models.foundation.errors import UserError, first_non_finite
from saliency_gen.attribution import units
from saliency_gen.attribution.code_identity import (
    code_digest,
    digest_on_disk,
    has_module_file,
    user_modules,
)
from saliency_gen.attribution.units import Context, HostPlan, Method, Param, Plan


def _first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0] if text else ''}".rstrip(": ")


class FunctionMethod(Method):
    """A plain function `fn(model, images, targets, **params)` as a method unit."""

    views = ("logits",)

    def __init__(self, name: str, fn: Callable, params: Optional[dict] = None,
                 traced: bool = True, wrappable: bool = True, evaluations: int = 1,
                 summary: str = ""):
        if not callable(fn):
            raise UserError(f"method {name!r}: {fn!r} is not callable")
        self.name = name
        self.fn = fn
        self.params = {key: value if isinstance(value, Param) else Param(value)
                       for key, value in (params or {}).items()}
        self.traced = traced
        self.wrappable = wrappable and traced
        self._evaluations = int(evaluations)
        self.summary = summary or (inspect.getdoc(fn) or "").split("\n")[0]
        accepted = inspect.signature(fn).parameters
        self._wants = {key for key in ("ids", "seed") if key in accepted}
        # taken now, from the code as it was loaded: a module file edited later, but not
        # re-imported, must not pass for the code that runs; code without a file (a
        # notebook's) is read at each use, as its helpers in other cells are live
        self._code = code_digest(fn) if has_module_file(fn) else None

    @property
    def code(self) -> str:
        """`code_digest` of the function (and what it reads) as it runs now."""
        return self._code if self._code is not None else code_digest(self.fn)

    def evaluations(self, options: dict, shape: Sequence[int]) -> int:
        return self._evaluations

    def seeded(self, options: dict) -> bool:
        return "seed" in self._wants

    def _call(self, model, x, targets, ids, options, seed):
        extra = {"ids": ids, "seed": seed}
        try:
            return self.fn(model, x, targets, **options,
                           **{key: extra[key] for key in self._wants})
        except (UserError, KeyboardInterrupt, SystemExit):  # SystemExit: the engine says
            raise
        except BaseException as error:  # any failure of user code becomes one clear line
            if self.traced and "symbolic" in str(error):  # NumPy on a traced tensor
                raise UserError(
                    f"method {self.name!r} raised {_first_line(error)}; the function is traced, "
                    "so its images are symbolic tensors: use TensorFlow ops, or run its NumPy "
                    "code eagerly on whole groups of images by setting traced = False on the "
                    "function (or register_method(..., traced=False))") from None
            raise UserError(f"method {self.name!r} raised {_first_line(error)}; fix the "
                            "function (it gets model, images [B, H, W, C] float32, targets "
                            "[B] int32)") from None

    def _shaped(self, maps, x):
        """maps as float32 [B, H, W, C], or a clear error naming the expected shape."""
        given = type(maps).__name__
        try:
            maps = tf.convert_to_tensor(maps)
        except (TypeError, ValueError) as error:
            raise UserError(f"method {self.name!r} returned {given}, not a tensor "
                            f"({_first_line(error)}); return maps [B, H, W, C]") from None
        if not (maps.dtype.is_floating or maps.dtype.is_integer):
            raise UserError(f"method {self.name!r} returned {given} of dtype "
                            f"{maps.dtype.name}, not numbers; return maps [B, H, W, C]")
        maps = tf.cast(maps, tf.float32)
        if maps.shape.rank is None:  # e.g. a tf.py_function's result: checked when it runs
            maps = tf.ensure_shape(maps, x.shape)
        batch, height, width, channels = x.shape
        shape = tuple(maps.shape)
        fits = (len(shape) == 4 and shape[0] in (batch, None) and shape[1:3] == (height, width)
                and shape[3] in (channels, 1))
        if not fits:
            raise UserError(f"method {self.name!r} returned maps of shape {shape} for images of "
                            f"shape {tuple(x.shape)}; return [B, H, W, C] = [{batch}, {height}, "
                            f"{width}, {channels}] or [B, H, W, 1]")
        return tf.repeat(maps, channels, axis=-1) if shape[3] == 1 and channels != 1 else maps

    def plan(self, options: dict, context: Context) -> Any:
        call = context.model.logits
        seed = context.seed

        def contribution(items):
            return self._shaped(self._call(call, items.x, items.targets, items.ids, options,
                                           seed), items.x)

        if self.traced:
            return Plan(1, contribution)

        def run(images, targets, ids):
            x = tf.constant(images)
            maps = self._call(call, x, tf.constant(targets, tf.int32),
                              tf.constant(ids, tf.int64), options, seed)
            return self._shaped(maps, x).numpy()

        return HostPlan(run)

    def check_maps(self, maps: np.ndarray, name: str) -> None:
        bad = first_non_finite(maps)
        if bad is not None:
            raise UserError(f"method {name!r} returned NaN or infinite values for image {bad}; "
                            "make the function return finite maps (e.g. guard divisions by "
                            "zero)")


def register_method(name: str, method: Any, *, params: Optional[dict] = None,
                    traced: bool = True, wrappable: bool = True, evaluations: int = 1,
                    replace: bool = False) -> Method:
    """Registers a user method under `name`: a plain function (see the module docstring) or a
    `saliency_gen.Method` instance or class. Returns the unit. `params` maps parameter names to
    defaults (or `Param`s); `evaluations` is the model evaluations per image (for reports);
    `replace=True` re-registers a name (e.g. after editing the function in a notebook)."""
    if not isinstance(name, str) or not name or any(c in name for c in "()"):
        raise UserError(f"a method name must be a non-empty string without parentheses; "
                        f"got {name!r}")
    if ":" in name and name.split(":", 1)[0].lower() in SCHEMES:
        raise UserError(f"{name!r} starts with a naming scheme's prefix; choose another name")
    if isinstance(method, type) and issubclass(method, Method):
        method = method()
    unit = method if isinstance(method, Method) else FunctionMethod(
        name, method, params, traced, wrappable, evaluations)
    if replace:
        units.registered().pop(name, None)
    units.register(unit, name)
    return unit


SCHEMES = ("roar", "bam", "idsds")


def user_code(unit: Method) -> Optional[str]:
    """`code_digest` of the code behind a unit that is not the package's own (a plain function
    registered or named "package.module:function", a user's `Method`); None for a built-in,
    whose code the package version fixes."""
    if isinstance(unit, FunctionMethod):
        return unit.code
    if type(unit).__module__.split(".")[0] == "saliency_gen":
        return None
    if not has_module_file(type(unit)):  # a notebook's class: as it runs now
        return code_digest(type(unit))
    if "_user_code" not in vars(unit):  # once per unit, as it was loaded
        setattr(unit, "_user_code", code_digest(type(unit)))
    return vars(unit)["_user_code"]


_WARNED: set = set()  # (method name, digest on disk) already warned of in this process


def warn_if_edited(unit: Method, name: str, code: str) -> None:
    """One warning (once a process per edit) when the files of a user method loaded from files
    changed on disk after it was loaded: this process files its results under the digest taken
    at loading, so a re-run in it reuses the results of the code as loaded (a notebook that
    imported the module before the edit; also one that reloaded a helper module since, whose
    new code would run under the old digest); a new process, or the module reloaded and the
    method registered again, runs the edit under its own digest. `code`: the unit's
    `user_code`, taken at loading for code from files."""
    target = unit.fn if isinstance(unit, FunctionMethod) else type(unit)
    if not has_module_file(target):  # (a notebook's code is digested as it runs)
        return
    now = digest_on_disk(target)  # (a `stat` a file while none changed)
    if now == code or (name, now) in _WARNED:
        return
    _WARNED.add((name, now))
    files = ", ".join(os.path.basename(path) for _, path in user_modules(target))
    logging.getLogger(__name__).warning(
        "the files of method %s (%s) changed since it was imported; this process files its "
        "results under the code as imported, so a re-run here can show that code's results: "
        "start a new process, or reload the module and register the method again, to run the "
        "edit under its own digest", name, files)


def load(spec: str) -> str:
    """Makes sure the method named by "package.module:attribute" is registered (importing the
    module on first use) and returns the name to resolve it by (the string itself)."""
    if units.unit(spec) is not None:
        return spec
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise UserError(f"method {spec!r} is neither registered nor 'package.module:function'")
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise UserError(f"cannot import module {module_name!r} for method {spec!r} "
                        f"({_first_line(error)}); put its folder on PYTHONPATH, or use a "
                        f"scheme prefix ({', '.join(s + ':' for s in SCHEMES)})") from None
    except Exception as error:  # the module itself failed while importing
        raise UserError(f"importing module {module_name!r} for method {spec!r} failed: "
                        f"{_first_line(error)}") from None
    target = module
    for part in attribute.split("."):
        if not hasattr(target, part):
            raise UserError(f"module {module_name!r} has no {attribute!r} (method {spec!r})")
        target = getattr(target, part)
    if units.unit(spec) is None:  # importing may have registered it already
        # (a function marked `traced = False` runs eagerly: NumPy code)
        register_method(spec, target, traced=getattr(target, "traced", True) is not False)
    return spec
