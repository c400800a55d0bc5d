"""The arguments every measure of the peers' catalogue takes (docs/measures.md, "Arguments"),
checked once, each failure one line naming the argument, and prepared as Quantus 0.6 prepares
them, so a Quantus user gets Quantus's numbers.

`x_batch` is NHWC in the model's input space; `a_batch` one map per image, (N, H, W) or (N, H,
W, C); `s_batch` one mask per image, (N, H, W) of 0 / 1 or bool. Quantus works channel first:
a map is expanded to (N, 1, H, W) (or transposed to (N, C, H, W)), divided by the largest |a|
of the whole `a_batch` of the call when `normalise` (`normalise_by_max` over every axis,
quantus/functions/normalise_func.py:48; not when every value is 0), then made absolute when
`abs` (quantus/metrics/base.py:452-457), and its features are the channel-first values in
C-order. A mask is compared with every channel of the map.
"""
import dataclasses
from typing import Any, Optional

import numpy as np

from models.foundation.errors import ShapeError, UserError


@dataclasses.dataclass(frozen=True)
class Prepared:
    """A call's arrays as the measures read them: `x` float32 [N, H, W, C]; `a` float64
    [N, F], the maps' features channel first (F = C' x H x W), normalised and made absolute
    as asked, an array of the call's own (never the caller's `a_batch`); `s` bool [N, F]
    (the mask repeated over the map's channels) or None."""

    x: np.ndarray
    a: np.ndarray
    s: Optional[np.ndarray]
    map_shape: tuple  # (C', H, W) of a map, channel first


def prepared(x_batch: Any, a_batch: Any, s_batch: Any = None, *, abs: bool,  # noqa: A002
             normalise: bool, needs_mask: bool = False, blocks: int = 1,
             maps_name: str = "a_batch") -> Prepared:
    """The checked, prepared arrays of one call (see the module's note); with `blocks`, each
    of that many equal blocks of maps is normalised on its own (Quantus normalises each batch
    it explains). `maps_name` names the maps in an error line."""
    x = np.asarray(x_batch, np.float32)
    if x.ndim != 4:
        raise ShapeError(f"x_batch has shape {x.shape}; expected NHWC images [N, H, W, C]")
    if len(x) == 0:
        raise UserError("x_batch holds no images")
    if not np.isfinite(x).all():
        raise UserError("x_batch contains NaN or infinite values")
    given = np.asarray(a_batch)
    if given.dtype.kind not in "biuf":
        given = given.astype(np.float64)
    if given.ndim == 3:
        a = given[:, None]
    elif given.ndim == 4:
        a = np.transpose(given, (0, 3, 1, 2))
    else:
        raise ShapeError(f"{maps_name} has shape {given.shape}; expected maps [N, H, W] or "
                         "[N, H, W, C]")
    if len(a) != len(x) or a.shape[2:] != x.shape[1:3] or a.shape[1] not in (1, x.shape[3]):
        if x.shape[1] in (1, 3) and x.shape[3] not in (1, 3):
            raise ShapeError(f"x_batch has shape {x.shape}: it looks channels first (N, C, H, "
                             "W), as Quantus takes it; pass NHWC images, "
                             "np.transpose(x_batch, (0, 2, 3, 1)), and maps [N, H, W] or "
                             "[N, H, W, C]")
        raise ShapeError(f"{maps_name} has shape {np.shape(a_batch)} for x_batch of shape "
                         f"{x.shape}; expected one map per image, [N, H, W] or [N, H, W, C] "
                         f"at the images' size{_channels_first_hint(given, x, maps_name)}")
    # Each block's extremes, read from the maps as given (contiguous, in their own dtype): a
    # NaN makes both NaN, an infinity one of them infinite, and the largest |a| is
    # max(largest, -smallest). Then one pass makes the features channel first, float64 (a
    # float32 map converts exactly) and divided, into an array of the call's own, which the
    # measures may overwrite.
    high, low = _extremes(given, blocks)
    if not (np.isfinite(high).all() and np.isfinite(low).all()):
        raise UserError(f"{maps_name} contains NaN or infinite values")
    features = np.empty(a.shape, np.float64)
    if normalise:
        divisors = np.repeat(_divisors(high, low), len(a) // blocks)
        np.divide(a, divisors[:, None, None, None], out=features, casting="unsafe")
    else:
        np.copyto(features, a, casting="unsafe")
    if abs:
        np.abs(features, out=features)
    return Prepared(x, features.reshape(len(a), -1),
                    _masks(s_batch, x, a.shape[1], needs_mask), tuple(a.shape[1:]))


def _extremes(values: np.ndarray, blocks: int) -> tuple[np.ndarray, np.ndarray]:
    """(largest, smallest) float64 [blocks] of each of `blocks` equal blocks of `values`."""
    rows = values.reshape(blocks, -1)
    if rows.shape[1] == 0:
        return np.zeros(blocks), np.zeros(blocks)
    return (rows.max(axis=1).astype(np.float64), rows.min(axis=1).astype(np.float64))


def _divisors(high: np.ndarray, low: np.ndarray) -> np.ndarray:
    """The largest |a| of each block (from its extremes), 1 for a block of zeros."""
    largest = np.maximum(high, -low)
    return np.where(largest > 0, largest, 1.0)


def scaled(a: np.ndarray, *, abs: bool, normalise: bool,  # noqa: A002
           blocks: int = 1) -> np.ndarray:
    """Maps [N, F] (float64, the caller's own: scaled in place) divided by the largest |a| of
    each of `blocks` equal blocks of maps (a block of zeros stays as it is) when `normalise`,
    then absolute when `abs`: Quantus's `normalise_by_max` over every axis, then `np.abs`
    (as `prepared` scales the maps it is given)."""
    values = a.reshape(blocks, -1)
    if normalise:
        np.divide(values, _divisors(*_extremes(values, blocks))[:, None], out=values)
    if abs:
        np.abs(values, out=values)
    return a


def image_ids(ids: Any, count: int) -> np.ndarray:
    """int64 [count]: the ids keying each image's random draws: `ids`, or the images'
    positions in the call when None."""
    if ids is None:
        return np.arange(count, dtype=np.int64)
    found = np.asarray(ids, np.int64)
    if found.shape != (count,):
        raise ShapeError(f"ids has shape {found.shape}; expected one id per image, [{count}]")
    return found


def _channels_first_hint(given: np.ndarray, x: np.ndarray, name: str) -> str:
    """The way out of a map or mask given channel first, (N, C, H, W) as Quantus takes it,
    beside NHWC images; '' for any other shape."""
    if given.ndim != 4 or given.shape[0] != len(x) or given.shape[2:] != x.shape[1:3]:
        return ""
    if given.shape[1] == 1:
        return f" ({name} looks channels first, as Quantus takes it: pass {name}[:, 0])"
    if given.shape[1] == x.shape[3]:
        return (f" ({name} looks channels first, as Quantus takes it: pass "
                f"np.transpose({name}, (0, 2, 3, 1)))")
    return ""


def _masks(s_batch: Any, x: np.ndarray, channels: int, needs_mask: bool) -> Optional[np.ndarray]:
    """bool [N, C' x H x W]: each mask repeated over the map's channels (or None)."""
    if s_batch is None:
        if needs_mask:
            raise UserError("s_batch is missing: this measure needs a ground-truth mask per "
                            "image, [N, H, W]")
        return None
    if not needs_mask:
        raise UserError("s_batch is given but this measure takes no mask; leave it out")
    s = np.asarray(s_batch)
    if s.ndim == 4 and s.shape[-1] == 1:
        s = s[..., 0]
    if s.shape != (len(x), *x.shape[1:3]):
        raise ShapeError(f"s_batch has shape {np.shape(s_batch)} for x_batch of shape "
                         f"{x.shape}; expected one mask per image, [N, H, W]"
                         f"{_channels_first_hint(s, x, 's_batch')}")
    if not np.isin(s, (0, 1)).all():
        raise UserError("s_batch holds values other than 0 / 1 (or False / True)")
    s = s.astype(bool)[:, None]
    return np.repeat(s, channels, axis=1).reshape(len(x), -1)
