"""The tests' way to run a binary or script as a user would (`python -m module ...`), without
paying TensorFlow's start-up for every run.

`run(command)` takes the argument list of `subprocess.run` (`[sys.executable, "-m", module,
...]` or `[sys.executable, script, ...]`) and returns a `subprocess.CompletedProcess` (text
output). The command runs in a child forked from a warm process that has imported the project,
TensorFlow and Keras once (and never ran a TensorFlow op, so the child starts TensorFlow's runtime
afresh): the child takes the caller's environment, folder and arguments, runs the module as
`__main__`, runs the exit handlers and ends with the module's exit status, its stdout and stderr
captured in files. About 6 s of import per run are saved on two cores (docs/architecture.md,
"The test suite").

What a fork cannot reproduce is left to `subprocess.run`: an environment that differs in a
variable read while TensorFlow or Python start (anything but the cache folder, TF_CONFIG and
PYTHONPATH, which is applied to `sys.path`), and any command that is not `python -m` or a `.py`
script. Tests of the start-up itself (quiet start, `--help` without TensorFlow) start real
processes on purpose and do not use this module.
"""
import atexit
import json
import os
import runpy
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback

from tests import REPO

# Variables a forked child can take from the request: read after start-up, not while importing.
# (pytest itself sets PYTEST_CURRENT_TEST for every test.)
_RUNTIME_VARIABLES = frozenset({"XDG_CACHE_HOME", "TF_CONFIG", "PYTHONPATH",
                                "PYTEST_CURRENT_TEST"})
_WARM_IMPORTS = ("models", "tensorflow", "keras", "saliency_gen.generate", "roar.train",
                 "roar.road", "bam.metrics", "faithfulness.evaluate")

_server = {}
_server_lock = threading.Lock()


def run(command, cwd=None, env=None, timeout=900, check=False, interrupt_on=None,
        **_captured) -> subprocess.CompletedProcess:
    """`subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True,
    timeout=timeout, check=check)`, in a warm forked child where that gives the same result.

    `interrupt_on` (a text): Ctrl-C (SIGINT) is sent once the program's stdout or stderr
    shows it, and the result's `seconds_after_interrupt` says how long it took to end. Such a
    program runs as a fresh process, as a user starts it: signal handling is what such a test
    looks at, and a child forked from the warm server (a process that had started
    TensorFlow's threads) timed out in two runs of the whole suite."""
    environment = dict(os.environ if env is None else env)
    cwd = os.getcwd() if cwd is None else cwd
    if interrupt_on is not None:
        done = _run_interrupted(command, cwd, environment, timeout, interrupt_on)
    elif not _forkable(command, environment):
        return subprocess.run(command, cwd=cwd, env=environment, capture_output=True, text=True,
                              timeout=timeout, check=check)
    else:
        done = _run_warm(command, cwd, environment, timeout)
    if check:
        done.check_returncode()
    return done


def _interrupt_on(pid, text, outputs, sent) -> None:
    """Sends SIGINT to `pid` once one of the files `outputs` holds `text`; records the time in
    `sent`."""
    while not any(os.path.exists(path) and text in open(path, errors="replace").read()
                  for path in outputs):
        time.sleep(0.2)
    sent.append(time.monotonic())
    os.kill(pid, signal.SIGINT)


def default_interrupt() -> None:
    """In a child about to start a program: SIGINT back to its default, so that the program's
    Python installs its own handler (a test process may have been started ignoring SIGINT,
    and an ignored signal stays ignored across exec)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _run_interrupted(command, cwd, environment, timeout,
                     interrupt_on) -> subprocess.CompletedProcess:
    """`command` as a fresh process, sent Ctrl-C once its output shows `interrupt_on`."""
    with tempfile.TemporaryDirectory(prefix="binary-") as folder:
        outputs = [os.path.join(folder, "stdout"), os.path.join(folder, "stderr")]
        with open(outputs[0], "w") as stdout, open(outputs[1], "w") as stderr:
            process = subprocess.Popen(  # Ctrl-C as in a terminal, whatever this process
                command, cwd=cwd, env=environment, stdout=stdout, stderr=stderr,  # ignores
                stdin=subprocess.DEVNULL, preexec_fn=default_interrupt)
        sent: list = []
        threading.Thread(target=_interrupt_on, args=(process.pid, interrupt_on, outputs, sent),
                         daemon=True).start()
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            printed = open(outputs[1], errors="replace").read()[-1500:]
            print(f"timed out; interrupt sent: {bool(sent)}; its stderr ended:\n{printed}",
                  file=sys.stderr)
            raise
        ended = time.monotonic()
        stdout_text, stderr_text = (open(name, encoding="utf-8", errors="replace").read()
                                    for name in outputs)
    done = subprocess.CompletedProcess(command, process.returncode, stdout_text, stderr_text)
    done.seconds_after_interrupt = ended - sent[0] if sent else None
    return done


def _run_warm(command, cwd, environment, timeout) -> subprocess.CompletedProcess:
    path = _warm_server()
    with tempfile.TemporaryDirectory(prefix="binary-") as folder:
        outputs = [os.path.join(folder, "stdout"), os.path.join(folder, "stderr")]
        request = {"command": list(map(str, command[1:])), "cwd": str(cwd), "env": environment,
                   "outputs": outputs}
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as connection:
            connection.connect(path)
            connection.sendall(json.dumps(request).encode() + b"\n")
            stream = connection.makefile("r")
            pid = int(stream.readline())
            connection.settimeout(timeout)
            try:
                status = stream.readline()
            except (socket.timeout, TimeoutError):
                os.kill(pid, signal.SIGKILL)
                raise subprocess.TimeoutExpired(command, timeout) from None
        stdout, stderr = (open(name, encoding="utf-8", errors="replace").read()
                          for name in outputs)
    # no status: killed by a signal (as by kill -9), which subprocess.run reports as -9
    return subprocess.CompletedProcess(command, int(status) if status.strip() else
                                       -signal.SIGKILL, stdout, stderr)


def _forkable(command, environment) -> bool:
    if len(command) < 2 or command[0] != sys.executable:
        return False
    if command[1] == "-m" and len(command) < 3:
        return False
    if command[1] != "-m" and not str(command[1]).endswith(".py"):
        return False
    started = _server.get("environment", os.environ)  # the warm server starts with os.environ
    keys = (set(environment) | set(started)) - _RUNTIME_VARIABLES
    return all(environment.get(key) == started.get(key) for key in keys)


def _warm_server() -> str:
    """The socket of this process's warm server, started on first use."""
    with _server_lock:
        if "path" not in _server:
            folder = tempfile.mkdtemp(prefix="warm-")
            path = os.path.join(folder, "socket")
            environment = dict(os.environ)
            process = subprocess.Popen([sys.executable, "-m", "tests.binaries", path],
                                       cwd=REPO, env=environment, stdin=subprocess.PIPE,
                                       stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
            if process.stdout.readline().strip() != b"ready":
                raise RuntimeError("the warm server did not start")
            atexit.register(process.kill)
            atexit.register(shutil.rmtree, folder, ignore_errors=True)
            _server.update(path=path, process=process, environment=environment)
        return _server["path"]


def _serve(path: str) -> None:
    """Imports the heavy modules once, then forks one child per request until stdin closes
    (the test process ended)."""
    import importlib

    from models.foundation import cli

    cli.start_process()  # as every binary starts: TensorFlow quiet, oneDNN on
    for name in _WARM_IMPORTS:
        importlib.import_module(name)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # children are reaped by the kernel
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(16)
    if os.fork() == 0:  # a watcher: stdin closes when the test process ends
        sys.stdin.buffer.read()
        os.kill(os.getppid(), signal.SIGTERM)
        os._exit(0)
    print("ready", flush=True)
    while True:
        connection, _ = listener.accept()
        if os.fork() == 0:
            listener.close()
            _child(connection)
        connection.close()


def _child(connection) -> None:
    """Runs one request in this forked process and reports its exit status."""
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    stream = connection.makefile("r")
    request = json.loads(stream.readline())
    connection.sendall(f"{os.getpid()}\n".encode())
    os.environ.clear()
    os.environ.update(request["env"])
    os.chdir(request["cwd"])
    extra = [entry for entry in request["env"].get("PYTHONPATH", "").split(os.pathsep) if entry]
    real_exit = os._exit

    def reporting_exit(code):  # a program ending itself at once still reports its status
        connection.sendall(f"{code}\n".encode())
        real_exit(code)

    os._exit = reporting_exit
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    for descriptor, name in zip((1, 2), request["outputs"]):
        os.dup2(os.open(name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644), descriptor)
    status = 0
    try:
        command = request["command"]
        if command[0] == "-m":
            sys.argv = [command[1], *command[2:]]
            sys.path[0:1] = [request["cwd"], *extra]
            runpy.run_module(command[1], run_name="__main__", alter_sys=True)
        else:
            sys.argv = command
            sys.path[0:1] = [os.path.dirname(os.path.abspath(command[0])), *extra]
            runpy.run_path(command[0], run_name="__main__")
    except SystemExit as ending:
        if ending.code is None:
            status = 0
        elif isinstance(ending.code, int):
            status = ending.code
        else:
            print(ending.code, file=sys.stderr)
            status = 1
    except BaseException:  # noqa: BLE001  (reported as Python reports it, status 1)
        traceback.print_exc()
        status = 1
    try:
        atexit._run_exitfuncs()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        connection.sendall(f"{status}\n".encode())
        real_exit(status)


if __name__ == "__main__":
    _serve(sys.argv[1])
