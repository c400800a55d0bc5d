"""The rules an option's value must follow, declared with the option (docs/architecture.md,
"Binaries").

An option (`models.foundation.cli.option`) may carry a `Rule` or a tuple of them next to its
default and help text. A config class that derives from `Checked` applies every rule, and
every option's choices, when it is built (from flags or by a caller), so a bad value stops with
its one-line `UserError` before any work, and the functions the config is passed to trust it.
Each rule has one wording, the one of the check in `models.foundation.errors` it calls; `text`
is what `--help` says of it. A value of None (an option left out) is not checked.
"""
import dataclasses
import math
from typing import Any, Callable, Iterable, Optional, Sequence

from models.foundation.errors import (
    UserError,
    check_choices,
    check_fractions,
    check_minimum,
    check_one_of,
    check_unique,
)

# Compute precisions of Keras models (training, and scoring with --precision): float32, or mixed
# precision with float32 variables and bfloat16 / float16 computation.
PRECISIONS = ("float32", "mixed_bfloat16", "mixed_float16")


@dataclasses.dataclass(frozen=True)
class Rule:
    """`check(flag, value)` raises a `UserError` unless the value follows the rule."""

    check: Callable[[str, Any], None]
    text: str  # one sentence for --help

    def __call__(self, flag: str, value: Any) -> None:
        if value is not None:
            self.check(flag, value)


def at_least(minimum: float) -> Rule:
    """A number of at least `minimum` (sizes, counts, workers)."""
    return Rule(lambda flag, value: check_minimum(flag, value, minimum), f"At least {minimum}.")


def _positive(flag: str, value: Any) -> None:
    if not value > 0:
        raise UserError(f"--{flag}={value} must be positive")


POSITIVE = Rule(_positive, "Positive.")


def _count_or_all(flag: str, value: Any) -> None:
    if value == 0 or value < -1:
        raise UserError(f"--{flag}={value} must be a positive count, or -1 for all")


COUNT_OR_ALL = Rule(_count_or_all, "A positive count, or -1 for all.")
# ROAR's and ROAD's fractions: whole percents of the pixels (errors.whole_percent)
WHOLE_PERCENTS = Rule(check_fractions, "Multiples of 0.01 in [0, 1].")
UNIQUE = Rule(check_unique, "Each value once.")
UNIQUE_NUMBERS = Rule(lambda flag, values: check_unique(flag, [float(v) for v in values]),
                      "Each value once.")


def some(what: str) -> Rule:
    """A list that names at least one `what` (when it is given at all)."""
    def check(flag: str, values: Any) -> None:
        if not values:
            raise UserError(f"--{flag} names no {what}")
    return Rule(check, f"At least one {what}.")


def some_of(known: Sequence, what: str) -> Rule:
    """A list naming at least one of `known`, each once."""
    def check(flag: str, values: Any) -> None:
        check_choices(flag, values, known, what)
        check_unique(flag, values)
    return Rule(check, f"Any of: {', '.join(known)}, each once.")


def between(low: float, high: float) -> Rule:
    """A number in [low, high] (an offset that may be negative)."""
    def check(flag: str, value: Any) -> None:
        if not low <= value <= high:
            raise UserError(f"--{flag}={value} must be between {low} and {high}")
    return Rule(check, f"Between {low} and {high}.")


def at_most(maximum: float) -> Rule:
    """A number of at most `maximum` (a size whose memory grows with it)."""
    def check(flag: str, value: Any) -> None:
        if value > maximum:
            raise UserError(f"--{flag}={value} must be at most {maximum}")
    return Rule(check, f"At most {maximum}.")


# Added to every stored label: -1 or +1 for the TF-slim ImageNet layouts; the largest label sets
# (ImageNet-21k) have about 21,000 classes.
LABEL_OFFSETS = between(-100_000, 100_000)
# Work items in one traced model call: the executor pads the last chunk to this size, so its
# memory grows with the chunk whatever the job's size.
MAX_CHUNK = 4096


def rules_of(field: dataclasses.Field) -> tuple:
    """The rules an option declares (`cli.option`'s `rule`: one, a tuple, or none), as a tuple."""
    rules = field.metadata.get("rule")
    return () if rules is None else rules if isinstance(rules, tuple) else (rules,)


# Every number an option takes stays within this size: TensorFlow counts, sizes and seeds in
# 32-bit integers, and no setting of this project needs more.
LIMIT = 2 ** 31 - 1


def _number_text(value: Any) -> Optional[float]:
    """A list element as the number it writes (None when it writes none)."""
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def check_by_kind(field: dataclasses.Field, value: Any) -> None:
    """What every option of a kind must be, whatever its own rules say (docs/architecture.md,
    "Binaries"): a number is finite and at most `LIMIT` in size, and not negative unless its
    own rules allow it; a list is not empty when its default is not, and the elements of a
    list of numbers (ratios, seeds) are finite numbers, whole where the default's are."""
    name = field.name
    if value is None or isinstance(value, bool):
        return
    if isinstance(value, (int, float)):
        if not math.isfinite(value):
            raise UserError(f"--{name}={value} must be a finite number")
        if abs(value) > LIMIT:
            raise UserError(f"--{name}={value} is out of range (at most {LIMIT} in size)")
        if value < 0 and not rules_of(field):
            raise UserError(f"--{name}={value} must not be negative")
    elif isinstance(value, (tuple, list)):
        default = tuple(field.default) if isinstance(field.default, (tuple, list)) else None
        if not value and default != ():
            raise UserError(f"--{name} is empty; give at least one value"
                            + (f" (default: {','.join(map(str, default))})" if default else ""))
        numbers = [_number_text(item) for item in default or ()]
        numeric = bool(numbers) and None not in numbers
        whole = numeric and all("." not in str(item) for item in default or ())
        for item in value if numeric else ():
            number = _number_text(item)
            if number is None or not math.isfinite(number):
                raise UserError(f"--{name} holds {item!r}, not a finite number")
            if whole and not (number.is_integer() and abs(number) <= LIMIT):
                raise UserError(f"--{name} holds {item!r}, not a whole number of at most "
                                f"{LIMIT} in size")


def check_options(config: Any, names: Optional[Iterable[str]] = None) -> None:
    """Applies every option's kind checks (`check_by_kind`), choices and rules to the values of
    `config` (a dataclass made with `cli.option` fields), or to those of the fields `names`
    only: the first value that breaks one raises its `UserError`."""
    chosen = None if names is None else set(names)
    for field in dataclasses.fields(config):
        if chosen is not None and field.name not in chosen:
            continue
        value = getattr(config, field.name)
        is_list = isinstance(value, (tuple, list))
        if not is_list:  # (a list: after its own rules, whose wording comes first)
            check_by_kind(field, value)
        choices = field.metadata.get("choices")
        if choices is not None and value is not None:
            check_one_of(field.name, value, choices)
        for rule in rules_of(field):
            rule(field.name, value)
        if is_list:
            check_by_kind(field, value)


class Checked:
    """Base of a config dataclass whose options are checked when it is built."""

    def __post_init__(self) -> None:
        check_options(self)
