"""The public call of every measure (docs/measures.md, "Arguments"): the arguments of a Quantus
call, which it takes as well so that a Quantus user's call runs as it is written (Quantus's base
constructor settings and the layout flag of its `__call__`), and the checks of the settings
that all measures share.

- `channel_first=True`: `x_batch` is (N, C, H, W), `a_batch` (N, C', H, W) or (N, H, W),
  `s_batch` (N, 1, H, W) or (N, H, W), as Quantus takes them; they are made NHWC first, and a
  callable `explain_func` is handed (N, C, H, W) images and its (N, C', H, W) maps are made NHWC,
  as Quantus calls it with the images in the layout they were given. None or
  False: NHWC, this library's own layout (Quantus infers the layout when None; here a
  channel-first array is refused with a line saying so: a guess could read an image wrongly).
- `return_aggregate=True`: `[aggregate_func(values)]` (default `np.mean`), as Quantus returns
  it, instead of the values per image (Quantus's default for faithfulness_correlation only).
- `batch_size` (at least 1) and `seed` (not negative), where a measure takes them, are checked
  here for every measure.
- `disable_warnings`, `display_progressbar`: accepted; a call here prints no per-call warning
  or bar. `device`: accepted; TensorFlow places the work (`tf.device` where wanted).
  `model_predict_kwargs`: only empty, as this library calls the model with the images alone.
"""
import functools
import inspect
from typing import Any, Callable, Optional

import numpy as np

from models.foundation.errors import UserError, check_integer


def channels_last(arguments: dict) -> None:
    """A channel-first call's arrays made NHWC in place ({name: value} of the call): x (N, C,
    H, W) and a four-axis a moved to (N, H, W, C); a four-axis s (N, 1, H, W) to (N, H, W, 1),
    which a mask may be."""
    x = np.asarray(arguments["x_batch"])
    if x.ndim != 4:
        raise UserError(f"x_batch has shape {x.shape}; with channel_first=True expected "
                        "(N, C, H, W)")
    arguments["x_batch"] = np.moveaxis(x, 1, 3)
    for name in ("a_batch", "s_batch"):
        if arguments.get(name) is not None and np.ndim(arguments[name]) == 4:
            arguments[name] = np.moveaxis(np.asarray(arguments[name]), 1, 3)
    if callable(arguments.get("explain_func")):
        arguments["explain_func"] = _channel_first_explainer(arguments["explain_func"])


def _channel_first_explainer(explain_func: Callable) -> Callable:
    """A Quantus user's explain_func, written for channel-first images, called by a measure
    with NHWC ones: it gets (N, C, H, W) and its four-axis maps come back NHWC."""
    @functools.wraps(explain_func)
    def explain(*, model: Any, inputs: Any, targets: Any, **kwargs: Any) -> np.ndarray:
        maps = np.asarray(explain_func(model=model, inputs=np.moveaxis(np.asarray(inputs), 3, 1),
                                       targets=targets, **kwargs))
        return np.moveaxis(maps, 1, 3) if maps.ndim == 4 else maps
    return explain


def _check_common(arguments: dict) -> None:
    """The settings every measure that takes them shares: `batch_size` at least 1 (0 had been
    a ZeroDivisionError in 15 measures), `seed` not negative (NumPy's seeds, and Quantus's, are
    not; 5 measures had taken -1, the others refused it each its own way)."""
    check_integer("batch_size", arguments.get("batch_size", 1), 1)
    check_integer("seed", arguments.get("seed", 0), 0)


def accepting_quantus_call(measure: Callable) -> Callable:
    """`measure` taking also the Quantus call's arguments of the module's note."""
    signature = inspect.signature(measure)

    @functools.wraps(measure)
    def call(*given: Any, channel_first: Optional[bool] = None, return_aggregate: bool = False,
             aggregate_func: Optional[Callable] = None, disable_warnings: bool = False,
             display_progressbar: bool = False, device: Any = None,
             model_predict_kwargs: Optional[dict] = None, **settings: Any) -> Any:
        if model_predict_kwargs:
            raise UserError(f"model_predict_kwargs {sorted(model_predict_kwargs)}: the model is "
                            "called with the images alone here; leave it out")
        if channel_first not in (None, False, True):
            raise UserError(f"channel_first must be True, False or None; got {channel_first!r}")
        if aggregate_func is not None and not callable(aggregate_func):
            raise UserError(f"aggregate_func must be a function such as np.mean; got "
                            f"{aggregate_func!r}")
        bound = signature.bind(*given, **settings)  # (a missing argument: Python's TypeError)
        _check_common(bound.arguments)
        if channel_first:
            channels_last(bound.arguments)
        values = measure(*bound.args, **bound.kwargs)
        if return_aggregate:
            return np.asarray([(aggregate_func or np.mean)(values)])
        return values

    call.__doc__ = (f"{measure.__doc__ or ''}\n\n    Also a Quantus call's channel_first, "
                    "return_aggregate, aggregate_func,\n    disable_warnings, "
                    "display_progressbar, device (faithfulness.measures.quantus_call).")
    return call
