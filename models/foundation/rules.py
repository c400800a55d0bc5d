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
from typing import Any, Callable, Sequence

from models.foundation.errors import (
    UserError,
    check_choices,
    check_fractions,
    check_minimum,
    check_one_of,
    check_unique,
)


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


def _rules_of(field: dataclasses.Field) -> tuple:
    rules = field.metadata.get("rule")
    return () if rules is None else rules if isinstance(rules, tuple) else (rules,)


def check_options(config: Any) -> None:
    """Applies every option's choices and rules to the values of `config` (a dataclass made
    with `cli.option` fields): the first value that breaks one raises its `UserError`."""
    for field in dataclasses.fields(config):
        value = getattr(config, field.name)
        choices = field.metadata.get("choices")
        if choices is not None and value is not None:
            check_one_of(field.name, value, choices)
        for rule in _rules_of(field):
            rule(field.name, value)


class Checked:
    """Base of a config dataclass whose options are checked when it is built."""

    def __post_init__(self) -> None:
        check_options(self)
