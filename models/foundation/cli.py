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

`run_binary` is every binary's one start-up path: it calls `start_process` (TensorFlow's C++
start-up lines silent whenever it first loads, unless the user sets TF_CPP_MIN_LOG_LEVEL to 0 or
1 or passes --verbosity; oneDNN on unless the user chose), answers `--help` / `-h` from the real
`Config` (a binary imports nothing heavy at its top level, so this takes well under a second;
`--helpfull` still lists every absl flag), prints a `UserError` as one `error: ...` line with
exit status 2 and hides log messages below WARNING unless --verbosity is given. Importing a
package changes nothing: no argv is read, no environment variable set, no import hook added.

This module imports no TensorFlow, so that `start_process` can run first.
"""
import atexit
import contextlib
import dataclasses
import errno
import os
import sys
import threading
import typing
from typing import Any, Callable, Optional, Sequence, Union

from models.foundation import rules
from models.foundation.errors import UserError, failure_line, is_tensorflow_error, op_error_detail


def script_module(path: str) -> Any:
    """The script at `path` (scripts/*.py, which are not a package) imported as a module named
    after its file, for the scripts and tests that call another script's functions."""
    import importlib.util

    name = os.path.splitext(os.path.basename(path))[0]
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise UserError(f"{path} is not a Python script")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def require(module: str, extra: str) -> Any:
    """`module`, imported; when it is not installed, one `error:` line naming the project extra
    that installs it, and exit status 2 (optional parts such as Apache Beam)."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError:
        sys.stderr.write(f"error: {module} is not installed; it comes with this project's "
                         f"'{extra}' extra: pip install -e '.[{extra}]'\n")
        sys.exit(2)


def option(default: Any, help: str, choices: Optional[Sequence] = None,  # noqa: A002
           *, origin: Union[bool, str, tuple] = True,
           rule: Optional[Union[rules.Rule, tuple]] = None) -> Any:
    """A config field that is also a flag: its default, help text, allowed values and `rule`
    (a `models.foundation.rules.Rule` or a tuple of them, checked when a `rules.Checked`
    config is built).

    `origin` says how the flag reaches the binary's origin record (docs/architecture.md,
    "Outputs and provenance"): True, its value changes results and is recorded under its name
    (`origin_flags`); a string, its resolved value is recorded under that key (a tuple: under
    one of those keys, as the other flags in use decide); False, it does
    not change results (where outputs go, progress, resumption; input locations are recorded
    as digests of the data)."""
    return dataclasses.field(default=default, metadata={"help": help, "choices": choices,
                                                        "origin": origin, "rule": rule})


def flag_of(owner: type, name: str, default: Any = dataclasses.MISSING, *,
            origin: Union[bool, str, tuple, None] = None) -> Any:
    """A config field that is the option `name` of the options class `owner`, declared there
    once (help text, choices, rule, origin), with `default` instead of the owner's where a
    binary has its own (e.g. ROAD's choices of the mask settings), and `origin` instead of the
    owner's where the binary records it otherwise (see `option`)."""
    declared = next(field for field in dataclasses.fields(owner) if field.name == name)
    metadata = dict(declared.metadata) if origin is None else {**declared.metadata,
                                                               "origin": origin}
    return dataclasses.field(
        default=declared.default if default is dataclasses.MISSING else default,
        metadata=metadata)


def origin_flags(config: Any) -> dict:
    """{name: value} of the config's fields declared `origin=True` (see `option`)."""
    return {field.name: getattr(config, field.name) for field in dataclasses.fields(config)
            if field.metadata.get("origin", True) is True}


def _kind(annotation, default):
    """bool, int, float, str or list: the flag type of a field."""
    if typing.get_origin(annotation) is typing.Union:  # Optional[X]
        annotation = next(a for a in typing.get_args(annotation) if a is not type(None))
    if typing.get_origin(annotation) in (list, tuple) or annotation in (list, tuple):
        return list
    if annotation in (bool, int, float, str):
        return annotation
    return type(default) if default is not None else str


def define_flags(config_class: type, flag_values: Any = None) -> None:
    """Defines one absl flag per field of `config_class` (same name, default and help) in
    `flag_values` (default: absl's global FLAGS)."""
    from absl import flags

    values = flags.FLAGS if flag_values is None else flag_values
    hints = typing.get_type_hints(config_class)
    for field in dataclasses.fields(config_class):
        if field.name in values:
            continue
        default: typing.Any = field.default
        help_text = field.metadata.get("help", field.name)
        choices = field.metadata.get("choices")
        kind = _kind(hints[field.name], default)
        where: dict[str, typing.Any] = {"flag_values": values}
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


def config_from_flags(config_class: type, flag_values: Any = None) -> Any:
    """A `config_class` holding the parsed flags' values (lists become tuples), its options'
    rules checked (a `rules.Checked` config checks itself)."""
    from absl import flags

    values = flags.FLAGS if flag_values is None else flag_values
    fields = {}
    for field in dataclasses.fields(config_class):
        value = values[field.name].value
        fields[field.name] = tuple(value) if isinstance(value, list) else value
    config = config_class(**fields)
    if not isinstance(config, rules.Checked):
        rules.check_options(config)
    return config


# File-system errors caused by the user's environment, not by the program: one line each.
ENVIRONMENT_ERRORS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EACCES, errno.EPERM,
                                errno.EROFS, errno.EISDIR, errno.ENOTDIR, errno.ENAMETOOLONG})


def run_binary(config_class: type, run: Callable) -> None:
    """Defines the flags of `config_class`, parses them, and calls `run(config)`; a
    `UserError` becomes one `error:` line and exit status 2."""
    start_process()
    if any(argument in HELP_FLAGS for argument in sys.argv[1:]):
        doc = getattr(sys.modules.get(getattr(run, "__module__", "")), "__doc__", None)
        print(help_text(config_class, doc, _command()))
        sys.exit(0)
    from absl import app, flags, logging

    define_flags(config_class)

    def main(argv):
        if len(argv) > 1:
            raise UserError(f"unexpected arguments {' '.join(argv[1:])}; options are --flags")
        run(config_from_flags(config_class))

    def guarded(argv):
        if not flags.FLAGS["verbosity"].present:
            logging.set_verbosity(logging.WARNING)
        watch_interrupts()
        try:
            return main(argv)
        except UserError as error:  # (a value echoed in it keeps the line whole)
            print(f"error: {str(error).replace(chr(10), ' ')}", file=sys.stderr)
            sys.exit(2)
        except KeyboardInterrupt:
            _INTERRUPT_REPORTED.set()  # (the watcher then ends the process without a 2nd line)
            print(f"error: {INTERRUPTED}", file=sys.stderr)
            end_interrupted()
        except (OSError, MemoryError) as error:
            line = failure_line(error)
            if line is None and isinstance(error, OSError) and error.errno in ENVIRONMENT_ERRORS:
                # a read-only or forbidden folder, a path of the wrong kind
                where = f" ({error.filename})" if error.filename else ""
                line = (f"{error.strerror or error}{where}; choose another path, then re-run "
                        "(finished outputs are kept)")
            if line is None:
                raise
            print(f"error: {line}", file=sys.stderr)
            sys.exit(2)
        except Exception as error:
            if not is_tensorflow_error(error):
                raise
            # a TensorFlow failure that no layer below explained: its real message, one line
            print(f"error: {failure_line(error) or op_error_detail(error)}", file=sys.stderr)
            sys.exit(2)

    app.run(guarded, flags_parser=lambda argv: _parse_flags(argv, config_class))


INTERRUPTED = ("interrupted (Ctrl-C); the work in progress is abandoned, finished outputs are "
               "kept and nothing unfinished looks finished")
INTERRUPTED_STATUS = 130  # 128 + SIGINT, as a shell reports a process ended by Ctrl-C
# After Ctrl-C, how long the program may take to stop by itself (Python raises
# KeyboardInterrupt only between its own bytecodes: a user method blocked inside a TensorFlow
# kernel, a py_function or C code would otherwise hold it for as long as it runs).
INTERRUPT_GRACE_SECONDS = 3.0
_INTERRUPT_REPORTED = threading.Event()


def watch_interrupts() -> None:
    """Makes Ctrl-C end the binary within `INTERRUPT_GRACE_SECONDS` wherever it is: Python's
    SIGINT handler still raises KeyboardInterrupt (one `error:` line, exit status 130); a thread
    woken by the signal (`signal.set_wakeup_fd`, written by the C-level handler whatever the
    main thread is doing) ends the process with the same line and status if it is still
    running after the grace period. Outputs are written under temporary names and renamed when
    complete, so abandoning them leaves nothing that looks finished."""
    import signal
    import time

    if threading.current_thread() is not threading.main_thread() or \
            signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        return  # not ours to handle (an embedding program, an ignored SIGINT)
    reading, writing = os.pipe()
    os.set_blocking(writing, False)
    signal.set_wakeup_fd(writing, warn_on_full_buffer=False)

    def watch():
        while True:
            received = os.read(reading, 64)
            if signal.SIGINT in received:
                time.sleep(INTERRUPT_GRACE_SECONDS)
                if not _INTERRUPT_REPORTED.is_set():
                    sys.stderr.write(f"error: {INTERRUPTED}\n")
                    sys.stderr.flush()
                os._exit(INTERRUPTED_STATUS)

    threading.Thread(target=watch, name="interrupt-watch", daemon=True).start()


def end_interrupted() -> None:
    """Ends the process with `INTERRUPTED_STATUS` once the exit functions have run (the
    logs flushed, temporary folders removed), without the interpreter's own shut-down.

    Not `sys.exit`: CPython marks a KeyboardInterrupt that leaves code run by `exec` or `eval`
    of a string (dataclasses, namedtuples and TensorFlow's tracing make such code) as
    unhandled, process-wide, and a `python -m` program then ends by SIGINT whatever status it
    chose (the exit status -2, not 130, seen on a loaded machine). The shut-down it skips
    (joining threads, tearing TensorFlow down: seconds on a loaded machine) could wait on a
    method still blocked in a kernel, where the watcher cannot end it any more, and no output
    needs it: outputs are renamed only once complete (docs/architecture.md, "Errors")."""
    atexit._run_exitfuncs()  # (the watcher still ends the process should one of them hang)
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(INTERRUPTED_STATUS)


def _parse_flags(argv: list, config_class: type) -> list:
    """absl's flag parsing, with an unknown flag (the closest of the binary's own flags
    suggested) or an unreadable value as one `error:` line and exit status 2, where absl's own
    parser prints "FATAL Flags parsing error" and exits with 1."""
    import difflib

    from absl import flags

    try:
        return flags.FLAGS(argv)
    except flags.UnrecognizedFlagError as error:
        own = [field.name for field in dataclasses.fields(config_class)]
        close = difflib.get_close_matches(error.flagname, own, n=1)
        message = f"unknown flag --{error.flagname}" + "".join(
            f"; did you mean --{name}?" for name in close)
    except flags.Error as error:  # a value of the wrong type, an unreadable --flagfile
        message = str(error).removeprefix("ERROR:: ")
    print(f"error: {message} (--help lists the flags)", file=sys.stderr)
    sys.exit(2)


def user_asked_for_logs() -> bool:
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


class _QuietLoader:
    """Runs TensorFlow's own loader with file descriptor 2 silenced, then probes the devices
    (whose CUDA lines would come later) under the same silence."""

    def __init__(self, loader):
        self._loader = loader

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module) -> None:
        with _stderr_silenced():
            self._loader.exec_module(module)
            module.config.list_physical_devices()

    def __getattr__(self, name: str):  # resources, source, ...: the real loader's
        return getattr(self._loader, name)


class _QuietTensorFlow:
    """A meta-path finder that hands the first `import tensorflow` a `_QuietLoader`, then
    steps aside: TensorFlow loads only when something needs it, and quietly."""

    def find_spec(self, name, path=None, target=None):
        if name != "tensorflow":
            return None
        sys.meta_path.remove(self)
        import importlib.machinery

        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is not None and spec.loader is not None:
            spec.loader = _QuietLoader(spec.loader)  # type: ignore[assignment]  # a wrapper
        return spec


def quiet_startup() -> None:
    """Makes TensorFlow's C++ start-up lines silent whenever it first loads (see the module
    docstring), without loading it now: light modules stay light."""
    if "tensorflow" in sys.modules or user_asked_for_logs():
        return
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    if not any(isinstance(finder, _QuietTensorFlow) for finder in sys.meta_path):
        sys.meta_path.insert(0, _QuietTensorFlow())


LATE_START_WARNING = (
    "warning: TensorFlow was imported before the project's start-up, so its oneDNN kernels "
    "stay off in this process (on CPUs without AVX-512, gradients about 3x slower): call "
    "models.foundation.cli.start_process() before importing tensorflow, or set "
    "TF_ENABLE_ONEDNN_OPTS=1 (docs/architecture.md, \"oneDNN\")")
_late_start_warned = False


def onednn_enabled() -> Optional[bool]:
    """Whether the TensorFlow loaded in this process computes with oneDNN's kernels (None:
    TensorFlow not loaded, or it does not say)."""
    if "tensorflow" not in sys.modules:
        return None
    try:
        from tensorflow.python.util import _pywrap_util_port  # loaded with TensorFlow
        return bool(_pywrap_util_port.IsMklEnabled())
    except (ImportError, AttributeError):
        return None


def fast_kernels() -> None:
    """Turns TensorFlow's oneDNN kernels on before it loads (docs/architecture.md, "oneDNN"),
    where its own default leaves them off (e.g. AMD CPUs without AVX-512: raw gradients about 3x
    slower). A value the user set, `TF_ENABLE_ONEDNN_OPTS=0` included, is kept. A TensorFlow
    loaded before this ran keeps its choice, which can no longer change: where that left
    oneDNN off and the user set nothing, one warning line says so (once per process)."""
    global _late_start_warned
    if "tensorflow" not in sys.modules:
        os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "1")
    elif ("TF_ENABLE_ONEDNN_OPTS" not in os.environ and not _late_start_warned
          and onednn_enabled() is False):
        _late_start_warned = True
        print(LATE_START_WARNING, file=sys.stderr)


HELP_FLAGS = ("--help", "-h", "--helpshort", "-?")


def flag_text(value: Any) -> str:
    """A default as the user would type it on the command line."""
    if value is None:
        return "(none)"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return ",".join(str(item) for item in value)
    return str(value)


def flag_arguments(config: Any, **changes: Any) -> list:
    """The command-line flags that give `config` (with `changes`): one `--name=value` per
    field that is set (a field left None is left out), as `flag_text` writes values."""
    values = {**{field.name: getattr(config, field.name)
                 for field in dataclasses.fields(config)}, **changes}
    return [f"--{name}={flag_text(value)}" for name, value in values.items()
            if value is not None]


def help_text(config_class: type, doc: Optional[str], command: str) -> str:
    """The `--help` page of a binary: the first paragraph of its docstring `doc` and one line
    per field of its real `config_class` (default, help, choices, rules)."""
    lines = [f"usage: {command} [--flag=value ...]", ""]
    summary = (doc or "").strip().split("\n\n")[0].strip()
    if summary:
        lines += [summary, ""]
    lines.append("flags (default in brackets):")
    for field in dataclasses.fields(config_class):
        one_line = " ".join(str(field.metadata.get("help", "")).split())
        choices = field.metadata.get("choices")
        if choices:
            one_line += f" One of: {flag_text(choices).replace(',', ', ')}."
        for rule in rules.rules_of(field):
            one_line += f" {rule.text}"
        lines.append(f"  --{field.name} [{flag_text(field.default)}]")
        lines.append(f"      {one_line}")
    lines += ["", "  --helpfull  every flag, including absl's and TensorFlow's"]
    return "\n".join(lines)


def _command() -> str:
    """How the running binary was started: `python -m pkg.mod` or `python path/file.py`."""
    argv = list(getattr(sys, "orig_argv", sys.argv))
    if "-m" in argv[:-1]:
        return f"python -m {argv[argv.index('-m') + 1]}"
    return f"python {sys.argv[0]}"


def start_process() -> None:
    """The one start-up of a process that runs the project as a program (every binary, through
    `run_binary`; the test suite; a notebook that wants the same): TensorFlow's C++ start-up
    lines stay silent when it loads and its oneDNN kernels are on, unless the user chose
    otherwise. Importing a package does neither (docs/architecture.md, "Start-up")."""
    quiet_startup()
    fast_kernels()
