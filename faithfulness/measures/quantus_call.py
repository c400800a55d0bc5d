"""The arguments of a Quantus call that every measure here takes as well (docs/measures.md,
"Arguments"), so that a Quantus user's call runs as it is written: Quantus's base constructor
settings and the layout flag of its `__call__`.

- `channel_first=True`: `x_batch` is (N, C, H, W), `a_batch` (N, C', H, W) or (N, H, W),
  `s_batch` (N, 1, H, W) or (N, H, W), as Quantus takes them; they are made NHWC first. None or
  False: NHWC, this library's own layout (Quantus infers the layout when None; here a
  channel-first array is refused with a line saying so: a guess could read an image wrongly).
- `return_aggregate=True`: `[aggregate_func(values)]` (default `np.mean`), as Quantus returns
  it, instead of the values per image (Quantus's default for faithfulness_correlation only).
- `disable_warnings`, `display_progressbar`: accepted; a call here prints no per-call warning
  or bar. `device`: accepted; TensorFlow places the work (`tf.device` where wanted).
  `model_predict_kwargs`: only empty, as this library calls the model with the images alone.
"""
import functools
from typing import Any, Callable, Optional

import numpy as np

from models.foundation.errors import UserError


def channels_last(x_batch: Any, a_batch: Any, s_batch: Any) -> tuple:
    """(x, a, s) of a channel-first call made NHWC: x (N, C, H, W) and a four-axis a moved
    to (N, H, W, C); a four-axis s (N, 1, H, W) to (N, H, W, 1), which a mask may be."""
    x = np.asarray(x_batch)
    if x.ndim != 4:
        raise UserError(f"x_batch has shape {x.shape}; with channel_first=True expected "
                        "(N, C, H, W)")
    a = np.asarray(a_batch)
    s = None if s_batch is None else np.asarray(s_batch)
    return (np.moveaxis(x, 1, 3), np.moveaxis(a, 1, 3) if a.ndim == 4 else a,
            np.moveaxis(s, 1, 3) if s is not None and s.ndim == 4 else s)


def accepting_quantus_call(measure: Callable) -> Callable:
    """`measure` taking also the Quantus call's arguments of the module's note."""

    @functools.wraps(measure)
    def call(model: Any, x_batch: Any, y_batch: Any, a_batch: Any, s_batch: Any = None, *,
             channel_first: Optional[bool] = None, return_aggregate: bool = False,
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
        if channel_first:
            x_batch, a_batch, s_batch = channels_last(x_batch, a_batch, s_batch)
        values = measure(model, x_batch, y_batch, a_batch, s_batch, **settings)
        if return_aggregate:
            return np.asarray([(aggregate_func or np.mean)(values)])
        return values

    call.__doc__ = (f"{measure.__doc__ or ''}\n\n    Also a Quantus call's channel_first, "
                    "return_aggregate, aggregate_func,\n    disable_warnings, "
                    "display_progressbar, device (faithfulness.measures.quantus_call).")
    return call
