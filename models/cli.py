"""The command-line convention of every binary (docs/architecture.md, "Binaries").

A binary declares its options once, as a frozen dataclass whose fields are made with `option`
(default, help text, choices). `define_flags(Config)` turns the fields into absl flags of the
same names, and `run_binary(Config, run)` parses them into a `Config` and calls the binary's
importable `run(config)`, which a notebook can call with a `Config` of its own:

    @dataclasses.dataclass(frozen=True)
    class Config:
        num_imgs: int = option(10, "Images sampled per metric.")

    def run(config: Config) -> dict: ...

    if __name__ == "__main__":
        run_binary(Config, run)

`run_binary` prints a `UserError` as one `error: ...` line with exit status 2 and hides log
messages below WARNING unless --verbosity is given. `quiet_startup` (called by `models` on
import, before TensorFlow loads) silences TensorFlow's C++ start-up lines (CUDA stubs, CPU
feature notes), unless the user sets TF_CPP_MIN_LOG_LEVEL to 0 or 1 or passes --verbosity.

This module imports no TensorFlow, so that `quiet_startup` can run first.
"""
import contextlib
import dataclasses
import os
import sys
import typing
from typing import Any, Callable, Optional, Sequence

from models.errors import UserError


def option(default: Any, help: str, choices: Optional[Sequence] = None):  # noqa: A002
    """A config field that is also a flag: its default, help text and allowed values."""
    return dataclasses.field(default=default, metadata={"help": help, "choices": choices})


def _kind(annotation, default):
    """bool, int, float, str or list: the flag type of a field."""
    if typing.get_origin(annotation) is typing.Union:  # Optional[X]
        annotation = next(a for a in typing.get_args(annotation) if a is not type(None))
    if typing.get_origin(annotation) in (list, tuple) or annotation in (list, tuple):
        return list
    if annotation in (bool, int, float, str):
        return annotation
    return type(default) if default is not None else str


def define_flags(config_class, flag_values=None) -> None:
    """Defines one absl flag per field of `config_class` (same name, default and help) in
    `flag_values` (default: absl's global FLAGS)."""
    from absl import flags

    values = flags.FLAGS if flag_values is None else flag_values
    hints = typing.get_type_hints(config_class)
    for field in dataclasses.fields(config_class):
        if field.name in values:
            continue
        default = field.default
        help_text = field.metadata.get("help", field.name)
        choices = field.metadata.get("choices")
        kind = _kind(hints[field.name], default)
        where = {"flag_values": values}
        if choices is not None:
            flags.DEFINE_enum(field.name, default, list(choices), help_text, **where)
        elif kind is bool:
            flags.DEFINE_bool(field.name, default, help_text, **where)
        elif kind is int:
            flags.DEFINE_integer(field.name, default, help_text, **where)
        elif kind is float:
            flags.DEFINE_float(field.name, default, help_text, **where)
        elif kind is list:
            flags.DEFINE_list(field.name, None if default is None else list(default), help_text,
                              **where)
        else:
            flags.DEFINE_string(field.name, default, help_text, **where)


def config_from_flags(config_class, flag_values=None):
    """A `config_class` holding the parsed flags' values (lists become tuples)."""
    from absl import flags

    values = flags.FLAGS if flag_values is None else flag_values
    fields = {}
    for field in dataclasses.fields(config_class):
        value = values[field.name].value
        fields[field.name] = tuple(value) if isinstance(value, list) else value
    return config_class(**fields)


def flag_given(name: str, flag_values=None) -> bool:
    """Was the flag `name` given on the command line (rather than left at its default)?"""
    from absl import flags

    return (flags.FLAGS if flag_values is None else flag_values)[name].present > 0


def run_binary(config_class, run: Callable) -> None:
    """Defines the flags of `config_class`, parses them, and calls `run(config)`; a
    `UserError` becomes one `error:` line and exit status 2."""
    from absl import app, flags, logging

    define_flags(config_class)

    def main(argv):
        if len(argv) > 1:
            raise UserError(f"unexpected arguments {' '.join(argv[1:])}; options are --flags")
        run(config_from_flags(config_class))

    def guarded(argv):
        if not flags.FLAGS["verbosity"].present:
            logging.set_verbosity(logging.WARNING)
        try:
            return main(argv)
        except UserError as error:
            print(f"error: {error}", file=sys.stderr)
            sys.exit(2)

    app.run(guarded)


def _user_asked_for_logs() -> bool:
    """TF_CPP_MIN_LOG_LEVEL below 2 (info or warnings wanted) or a --verbosity flag."""
    level = os.environ.get("TF_CPP_MIN_LOG_LEVEL", "2")
    return (level.isdigit() and int(level) < 2) or any(
        argument.startswith(("--verbosity", "-v=", "--v=")) for argument in sys.argv[1:])


@contextlib.contextmanager
def _stderr_silenced():
    """Sends file descriptor 2 (what C++ libraries write to) to /dev/null inside the block."""
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError):  # no real stderr (some notebook kernels): nothing to hide
        yield
        return
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 2)
    os.close(null)
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)


def quiet_startup() -> None:
    """Loads TensorFlow with its C++ start-up lines silenced (see the module docstring)."""
    if "tensorflow" in sys.modules or _user_asked_for_logs():
        return
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    with _stderr_silenced():
        import tensorflow as tf

        tf.config.list_physical_devices()  # the device probe logs its CUDA lines here
