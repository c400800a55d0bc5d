"""Independent jobs as tasks of a running Dask cluster (docs/scale_out.md, "Dask"): roar.sweep's
retrainings and the report card's cells. Each task runs one command of the project's binaries in
a process of its own on a worker (`run_command`), so a task is what the sequential run does for
that job, with the worker's own Python; the jobs' outputs are files its binary writes
atomically, so a job that finished is never redone and a lost worker's job is simply run again
(Dask retries it on another worker). The workers must see the same paths as the client (one
machine, or a shared filesystem).

`local_cluster` starts a real cluster on this machine (a `dask scheduler` and `dask worker`
processes on 127.0.0.1, one thread each), for the tests and the scaling benchmark.
"""
import concurrent.futures
import contextlib
import dataclasses
import os
import re
import signal
import subprocess
import sys
import time
from typing import Any, Callable, Iterable, Iterator, Optional, Sequence

from models.foundation import progress
from models.foundation.cli import option, require
from models.foundation.errors import MissingPathError, UserError

PYTHON = "{python}"  # in a command: the worker's own Python


@dataclasses.dataclass(frozen=True)
class ClusterOptions:
    """The flags that name a running Dask cluster, declared once for the binaries that use
    one: the Beam binaries' DaskRunner, roar.sweep's and the card's tasks."""

    dask_scheduler_file: Optional[str] = option(
        None, "A running Dask cluster's scheduler file (dask scheduler --scheduler-file): "
        "the work runs there (docs/scale_out.md, \"Dask\").", origin=False)
    dask_address: Optional[str] = option(None, "... or its scheduler's address, "
                                         "tcp://HOST:PORT.", origin=False)

    @property
    def on_cluster(self) -> bool:
        """Whether a cluster is named."""
        return self.dask_scheduler_file is not None or self.dask_address is not None


def run_command(command: Sequence[str], cwd: Optional[str] = None,
                capture: bool = True) -> tuple[int, str]:
    """(exit status, the last line of its stderr) of `command` (`PYTHON` read as this
    process's Python: a worker's own, for a task); without `capture` its output goes to this
    process's terminal and log (its progress shows), and the line is empty."""
    chosen = [sys.executable if part == PYTHON else part for part in command]
    done = subprocess.run(chosen, cwd=cwd, capture_output=capture, text=True, check=False)
    lines = (done.stderr or "").strip().splitlines()
    return done.returncode, lines[-1] if lines else ""


def check_cluster(scheduler_file: Optional[str], address: Optional[str], needed_by: str) -> None:
    """One line unless exactly one of a scheduler file that exists and a scheduler address
    (tcp://HOST:PORT) names the running cluster `needed_by` needs."""
    if (scheduler_file is None) == (address is None):
        raise UserError(f"{needed_by} needs a running cluster: give --dask_scheduler_file or "
                        "--dask_address (one of them; docs/scale_out.md, \"Dask\")")
    if scheduler_file is not None and not os.path.isfile(scheduler_file):
        raise MissingPathError(f"--dask_scheduler_file {scheduler_file} does not exist "
                               "(dask scheduler --scheduler-file writes it)")
    if address is not None and not re.fullmatch(r"(tcp|tls|inproc|ucx)://\S+", address):
        raise UserError(f"--dask_address {address!r} is not a scheduler address such as "
                        "tcp://HOST:8786")


def client(scheduler_file: Optional[str] = None, address: Optional[str] = None) -> Any:
    """A client of the running cluster named by its scheduler file or address (one line when
    it cannot be reached)."""
    distributed = require("distributed", "scale")
    check_cluster(scheduler_file, address, "a job on Dask")
    try:
        return distributed.Client(scheduler_file=scheduler_file, address=address, timeout=30)
    except (OSError, TimeoutError) as error:
        raise UserError(f"cannot reach the Dask scheduler at {scheduler_file or address}: "
                        f"{error}") from None


def run_commands(commands: Sequence[Sequence[str]], labels: Sequence[str], *, what: str,
                 scheduler_file: Optional[str] = None, address: Optional[str] = None,
                 cwd: Optional[str] = None, checks: Optional[Sequence[bool]] = None) -> None:
    """Runs each command as one task of the cluster (`run_command`), following them with a
    progress bar of `what`; the first that fails is one line naming it (the others keep
    running to their end: what finished is kept). `checks[i]`: command i only checks work
    finished before (a run of a resumed sweep): it runs and can fail like the others, and the
    bar counts it as done from the start, not in its rate or ETA."""
    if not commands:
        return
    distributed = require("distributed", "scale")
    checks = [False] * len(commands) if checks is None else list(checks)
    with client(scheduler_file, address) as connected:
        futures = {connected.submit(run_command, list(command), cwd, pure=False,
                                    key=f"{what}-{index}-{label}"): index
                   for index, (command, label) in enumerate(zip(commands, labels))}
        failed = []
        with progress.bar(len(futures), what, "task", initial=sum(checks)) as bar:
            for future in distributed.as_completed(futures):
                try:
                    status, last = future.result()
                except Exception as error:  # noqa: BLE001 - a task the cluster gave up on
                    status, last = -1, f"{type(error).__name__}: {error}"
                if status != 0:
                    failed.append((labels[futures[future]], last))
                if not checks[futures[future]]:
                    bar.update(1)
    if failed:
        label, last = failed[0]
        raise UserError(f"{len(failed)} of {len(futures)} tasks failed, first {label}"
                        f"{': ' + last if last else ''}; fix it and run again: finished "
                        "tasks are kept")


# each local worker computes on one thread (TensorFlow's pools and OpenMP's)
SINGLE_THREAD = {"TF_NUM_INTRAOP_THREADS": "1", "TF_NUM_INTEROP_THREADS": "1",
                 "OMP_NUM_THREADS": "1"}
# The Dask configuration of the local scheduler and workers (docs/scale_out.md, "Dask"): the
# workers' statistical profiler off (sampling the task thread's stack every 10 ms slows a
# TensorFlow worker's units), and Dask's measurements of itself made rarer: the event loop's
# tick every 20 ms, the system monitor every 500 ms and a worker's memory monitor every 100 ms
# kept an idle worker busy 4-6% of its core, time its units on that core lose
DASK_SETTINGS = {"DASK_DISTRIBUTED__WORKER__PROFILE__ENABLED": "False",
                 "DASK_DISTRIBUTED__ADMIN__TICK__INTERVAL": "1s",
                 "DASK_DISTRIBUTED__ADMIN__SYSTEM_MONITOR__INTERVAL": "5s",
                 "DASK_DISTRIBUTED__WORKER__MEMORY__MONITOR_INTERVAL": "1s"}
# what a worker imports as it starts to run this project's work: the binaries' start-up, then
# TensorFlow (models/foundation/dask_worker.py; docs/scale_out.md, "Dask")
WORKER_PRELOAD = ("models.foundation.dask_worker",)


@dataclasses.dataclass
class LocalCluster:
    """A running local cluster: its scheduler file, its folder and its processes."""

    scheduler_file: str
    folder: str
    scheduler: subprocess.Popen
    workers: list
    preload: tuple = ()  # modules each worker imports when it starts (dask worker --preload)
    pinned: bool = False  # worker i confined to the i-th core this process may use
    dask_settings: dict = dataclasses.field(default_factory=lambda: dict(DASK_SETTINGS))

    @property
    def pids(self) -> list:
        """The processes' ids, the scheduler's first."""
        return [self.scheduler.pid, *(worker.pid for worker in self.workers)]

    def add_worker(self, name: str) -> subprocess.Popen:
        """One more single-threaded worker process (no nanny: killing it kills it), started
        with the installed package (no PYTHONPATH) in the cluster's folder, importing the
        cluster's `preload` modules as it starts (on a core of its own if the cluster is
        `pinned`), with the cluster's Dask configuration (`dask_settings`)."""
        core = nth_core(len(self.workers)) if self.pinned else None
        environment = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
        preload = [argument for module in self.preload for argument in ("--preload", module)]
        with open(os.path.join(self.folder, f"{name}.log"), "w") as log:
            worker = subprocess.Popen(
                [*_dask(), "worker", "--scheduler-file", self.scheduler_file, "--nthreads", "1",
                 "--nworkers", "1", "--no-nanny", "--host", "127.0.0.1", "--no-dashboard",
                 "--name", name, "--local-directory", self.folder, *preload],
                env={**environment, **SINGLE_THREAD, **self.dask_settings}, cwd=self.folder,
                stdout=log, stderr=subprocess.STDOUT, preexec_fn=on_core(core))
        self.workers.append(worker)
        return worker

    def workers_seen(self) -> int:
        """How many workers the scheduler knows (0 while it cannot be reached)."""
        distributed = require("distributed", "scale")
        try:
            with distributed.Client(scheduler_file=self.scheduler_file, timeout=10) as found:
                return len(found.scheduler_info()["workers"])
        except (OSError, ValueError, TimeoutError):
            return 0


def usable_cores() -> list:
    """The CPUs this process may run on, in order (its affinity where the system has one)."""
    if hasattr(os, "sched_getaffinity"):
        return sorted(os.sched_getaffinity(0))
    return list(range(os.cpu_count() or 1))


def map_on_cores(function: Callable[[Any], Any], items: Iterable) -> list:
    """[function(item) for item in items], the items shared among threads, one a usable core:
    for host work that releases the GIL (NumPy's sorts, scikit-image's segmentations)."""
    with concurrent.futures.ThreadPoolExecutor(len(usable_cores())) as pool:
        return list(pool.map(function, items))


def overlapped(function: Callable[[Any], Any], items: Iterable) -> list:
    """[function(item) for item in items], each call run in a thread while the iterable makes
    the next item (one call at a time, so at most two items are held): host work on one
    step's results beside the next step's model work (TensorFlow releases the GIL)."""
    found: list = []
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        pending: Optional[concurrent.futures.Future] = None
        for item in items:
            if pending is not None:
                found.append(pending.result())
            pending = pool.submit(function, item)
        if pending is not None:
            found.append(pending.result())
    return found


def nth_core(index: int) -> int:
    """The core that process `index` of a pinned set gets: the usable cores in turn."""
    cores = usable_cores()
    return cores[index % len(cores)]


def on_core(core: Optional[int]) -> Optional[Callable[[], None]]:
    """A `preexec_fn` for `subprocess.Popen` that confines the child, and every thread it will
    start, to CPU `core` (Linux's affinity); None for `core` None (no confinement)."""
    if core is None:
        return None
    if not hasattr(os, "sched_setaffinity"):
        raise UserError("confining a process to a core needs Linux's CPU affinity "
                        "(os.sched_setaffinity)")
    return lambda: os.sched_setaffinity(0, {core})


def _dask() -> list:
    """The `dask` command of this Python's environment."""
    return [os.path.join(os.path.dirname(sys.executable), "dask")]


def _wait_for(condition: Any, seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            raise UserError(f"the local Dask cluster did not start: {what}")
        time.sleep(0.2)


@contextlib.contextmanager
def local_cluster(folder: str, workers: int = 2, preload: Sequence[str] = (),
                  pinned: bool = False,
                  dask_settings: Optional[dict] = None) -> Iterator[LocalCluster]:
    """A scheduler and `workers` single-threaded worker processes on 127.0.0.1, started in
    `folder` (each importing the `preload` modules, as a long-running cluster's workers have:
    `dask worker --preload models.foundation.dask_worker`, `WORKER_PRELOAD`; with `pinned`,
    worker i on the i-th usable core alone, as a cluster's worker has cores of its own) and
    stopped by their process ids when the block ends; the scheduler and the workers run with
    the Dask configuration `dask_settings` (environment variables; default `DASK_SETTINGS`,
    {} for Dask's own defaults)."""
    require("distributed", "scale")
    dask_settings = DASK_SETTINGS if dask_settings is None else dask_settings
    scheduler_file = os.path.join(folder, "scheduler.json")
    with open(os.path.join(folder, "scheduler.log"), "w") as log:
        scheduler = subprocess.Popen(
            [*_dask(), "scheduler", "--host", "127.0.0.1", "--port", "0", "--no-dashboard",
             "--scheduler-file", scheduler_file], cwd=folder, stdout=log,
            stderr=subprocess.STDOUT, env={**os.environ, **dask_settings})
    found = LocalCluster(scheduler_file, folder, scheduler, [], tuple(preload), pinned,
                         dict(dask_settings))
    try:
        _wait_for(lambda: os.path.exists(scheduler_file), 60, "no scheduler file")
        for number in range(workers):
            found.add_worker(f"worker-{number}")
        _wait_for(lambda: found.workers_seen() == workers, 120, f"{workers} workers")
        yield found
    finally:
        for pid in reversed(found.pids):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
        for process in [*found.workers, scheduler]:
            try:
                process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                process.kill()
