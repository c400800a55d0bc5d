"""User-facing errors and the wrapper that turns them into one clear line at the command line.

Library code raises a `UserError` subclass whose message names the file, record, flag or value at
fault and says what to do. Binaries run through `models.foundation.cli.run_binary`, so such an error
prints as a single `error: ...` line with exit status 2 instead of a traceback from deep inside
TensorFlow.
"""
import errno
import math
import numbers
from typing import Any, Collection, Iterable, Optional


class UserError(ValueError):
    """A problem with the caller's input (a path, a flag, a file's content), not a bug."""


class MissingPathError(UserError, FileNotFoundError):
    """A file or directory the caller named does not exist."""


class ShapeError(UserError):
    """An array or model has a shape that does not fit what was asked."""


class RecordError(UserError):
    """A TFRecord file or record is corrupt or does not follow the expected schema."""


def require_both_or_neither(first: tuple[str, Any], second: tuple[str, Any]) -> None:
    """Raises unless two (flag name, value) pairs are both given or both left out (None): the
    binaries use their real-data paths together, or neither for the synthetic world."""
    (first_name, first_value), (second_name, second_value) = first, second
    if (first_value is None) != (second_value is None):
        raise UserError(f"pass both --{first_name} and --{second_name}, or neither (synthetic "
                        "world)")


def check_choices(flag: str, values: Any, known: Collection, what: str = "value") -> None:
    """Raises unless the list flag `--flag` names at least one value, each one of `known`."""
    if not values:
        raise UserError(f"--{flag} names no {what}; choose from {', '.join(known)}")
    unknown = [value for value in values if value not in known]
    if unknown:
        raise UserError(f"--{flag}: unknown {what} {unknown[0]!r}; choose from "
                        f"{', '.join(known)}")


def check_one_of(flag: str, value: Any, known: Collection) -> None:
    """Raises unless the flag `--flag` is one of `known` (a scalar choice)."""
    if value not in known:
        raise UserError(f"--{flag} must be one of {', '.join(map(str, known))}; got {value!r}")


def required(config: Any, *names: str) -> tuple:
    """The values of `config`'s flags `names`, in order; one line "--name is required" for the
    first that is left empty."""
    for name in names:
        if not getattr(config, name):
            raise UserError(f"--{name} is required")
    return tuple(getattr(config, name) for name in names)


def _unknown(what: str, value: Any, known: Iterable) -> UserError:
    return UserError(f"unknown {what} {value!r}; choose one of {', '.join(map(str, known))}")


def check_known(value: Any, known: Collection, what: str) -> None:
    """Raises unless `value` is one of `known`: one line naming the unknown `what` and the known
    names (in their order)."""
    try:
        found = value in known
    except TypeError:  # an unhashable value
        found = False
    if not found:
        raise _unknown(what, value, known)


def look_up(table: dict, name: Any, what: str) -> Any:
    """`table[name]`, or one line naming the unknown `what` and the known names (sorted)."""
    try:
        return table[name]
    except (KeyError, TypeError):
        raise _unknown(what, name, sorted(map(str, table))) from None


def check_unique(flag: str, values: Iterable) -> None:
    """Raises if the list flag `--flag` names a value twice (a method shown twice, a ratio
    scored twice)."""
    seen = set()
    for value in values or ():
        if value in seen:
            raise UserError(f"--{flag} names {value!r} twice; give each once")
        seen.add(value)


def check_minimum(flag: str, value: Any, minimum: float) -> None:
    """Raises unless the flag `--flag` is at least `minimum` (sizes, counts, epochs)."""
    if value is None or value < minimum:
        raise UserError(f"--{flag}={value} must be at least {minimum}")


def check_integer(name: str, value: Any, minimum: int) -> None:
    """Raises unless the argument `name` (of a library call, not a flag) is an integer of at least
    `minimum`: a float is not cut to one silently (a seed of 1.5, a batch of 2.5)."""
    if not isinstance(value, numbers.Integral) or value < minimum:  # (NumPy's too)
        bound = "a non-negative integer" if minimum == 0 else f"an integer of at least {minimum}"
        raise UserError(f"{name} must be {bound}; got {value!r}")


def whole_percent(flag: str, value: Any) -> int:
    """The ratio `value` of `--flag` as a whole percentage; one line unless it is a number that
    is a multiple of 0.01 in [0, 1] (ROAR's and ROAD's thresholds are whole percents of the
    pixels, docs/roar.md)."""
    try:
        fraction = float(value)
    except (TypeError, ValueError):
        raise UserError(f"--{flag}={value!r} is not a number") from None
    if not math.isfinite(fraction):
        raise UserError(f"--{flag}={value} must be a finite number")
    percent = round(fraction * 100)
    if abs(percent - fraction * 100) > 1e-6 or not 0 <= percent <= 100:
        raise UserError(f"--{flag}={value} must be a multiple of 0.01 in [0, 1] (a whole "
                        "percent of the pixels)")
    return percent


def check_fractions(flag: str, values: Any) -> None:
    """Raises unless every value of the flag `--flag` is a whole percent (`whole_percent`)."""
    for value in values if isinstance(values, (list, tuple)) else [values]:
        whole_percent(flag, value)


def first_non_finite(values: Any) -> Optional[int]:
    """The index of the first row of `values` [N, ...] that holds a NaN or an infinity, or None
    (integer arrays are finite)."""
    import numpy as np  # here, so that importing the errors stays free

    values = np.asarray(values)
    if values.size == 0 or not np.issubdtype(values.dtype, np.floating):
        return None
    # The extremes first: a NaN makes both NaN, an infinity one of them infinite, and two
    # vectorised reductions read the values at twice the speed of a sum (docs/saliency.md,
    # "By call size").
    if np.isfinite(values.max()) and np.isfinite(values.min()):
        return None
    finite = np.isfinite(values.reshape(len(values), -1)).all(axis=1)
    return None if finite.all() else int(np.flatnonzero(~finite)[0])


def op_error_detail(error: BaseException) -> str:
    """The informative line of a TensorFlow error (or any error): its type and the first line
    of its message that is not TensorFlow's "Graph execution error:" header, the "Detected at
    node ..." trace or a node reference, so that a user's own message (an assertion's, a shape
    error's) reaches the one-line report."""
    text = getattr(error, "message", None) or str(error)
    for line in text.splitlines():
        stripped = line.strip()
        if (not stripped or line[:1].isspace() or stripped == "Graph execution error:"
                or stripped.startswith(("Detected at node", "[[{{node"))
                or (stripped.startswith("<") and stripped.endswith(">"))):  # "<stack traces ..>"
            continue
        stripped = stripped.split("\t [[{{node")[0].strip()
        return f"{type(error).__name__}: {stripped[:400]}"
    return type(error).__name__


NO_SPACE = "No space left on device"


def failure_line(error: BaseException) -> Optional[str]:
    """One line for a failure of the machine rather than of the inputs or the code, None for any
    other: out of disk space (an OSError, or a TensorFlow or HDF5 error whose message says so),
    out of memory (MemoryError, TensorFlow's ResourceExhaustedError)."""
    text = getattr(error, "message", None) or str(error)
    if getattr(error, "errno", None) in (errno.ENOSPC, errno.EDQUOT) or NO_SPACE in text:
        return (f"out of disk space ({op_error_detail(error)}); free space or choose another "
                "path, then re-run (finished outputs are kept)")
    if isinstance(error, MemoryError) or type(error).__name__ == "ResourceExhaustedError":
        return (f"out of memory ({op_error_detail(error)}); lower --batch_size or --chunk_size "
                "(results do not depend on them) or use a machine with more memory")
    return None


def is_tensorflow_error(error: BaseException) -> bool:
    """Is `error` one of TensorFlow's runtime errors (`tf.errors.OpError`), without importing
    TensorFlow?"""
    return any(kind.__name__ == "OpError" and kind.__module__.startswith("tensorflow")
               for kind in type(error).__mro__)
