"""A real Dask cluster for the scale-out tests (docs/scale_out.md, "Dask"): a `dask scheduler`
and two `dask worker` processes on 127.0.0.1, one thread each, started from the installed
package (no path set up for them) and stopped by their process ids."""
import contextlib
import dataclasses
import os
import signal
import subprocess
import sys
import time
from typing import Iterator

# each worker computes on one thread, as the scaling benchmark's single-threaded process
SINGLE_THREAD = {"TF_NUM_INTRAOP_THREADS": "1", "TF_NUM_INTEROP_THREADS": "1",
                 "OMP_NUM_THREADS": "1"}


@dataclasses.dataclass
class Cluster:
    """A running cluster: its scheduler file and the processes' ids (scheduler first)."""

    scheduler_file: str
    scheduler: subprocess.Popen
    workers: list

    @property
    def pids(self) -> list:
        return [self.scheduler.pid, *(worker.pid for worker in self.workers)]


def _dask() -> list:
    """The `dask` command of this Python's environment."""
    return [os.path.join(os.path.dirname(sys.executable), "dask")]


def _wait_for(condition, seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"the Dask cluster did not start: {what}")
        time.sleep(0.2)


def start_worker(cluster: Cluster, name: str, folder: str) -> subprocess.Popen:
    """One more single-threaded worker process of `cluster` (no nanny: killing it kills it)."""
    environment = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    log = open(os.path.join(folder, f"{name}.log"), "w")  # noqa: SIM115 (the process's log)
    worker = subprocess.Popen(
        [*_dask(), "worker", "--scheduler-file", cluster.scheduler_file, "--nthreads", "1",
         "--nworkers", "1", "--no-nanny", "--host", "127.0.0.1", "--no-dashboard",
         "--name", name, "--local-directory", folder],
        env={**environment, **SINGLE_THREAD}, cwd=folder, stdout=log, stderr=subprocess.STDOUT)
    cluster.workers.append(worker)
    return worker


def workers_seen(cluster: Cluster) -> int:
    """How many workers the scheduler knows (0 while it cannot be reached)."""
    from distributed import Client

    try:
        with Client(scheduler_file=cluster.scheduler_file, timeout=10) as client:
            return len(client.scheduler_info()["workers"])
    except (OSError, ValueError, TimeoutError):
        return 0


@contextlib.contextmanager
def cluster(folder: str, workers: int = 2) -> Iterator[Cluster]:
    """A scheduler and `workers` worker processes, started in `folder` (outside the checkout,
    so nothing is imported from it) and stopped by their ids when the block ends."""
    scheduler_file = os.path.join(folder, "scheduler.json")
    log = open(os.path.join(folder, "scheduler.log"), "w")  # noqa: SIM115
    scheduler = subprocess.Popen(
        [*_dask(), "scheduler", "--host", "127.0.0.1", "--port", "0", "--no-dashboard",
         "--scheduler-file", scheduler_file], cwd=folder, stdout=log,
        stderr=subprocess.STDOUT)
    found = Cluster(scheduler_file, scheduler, [])
    try:
        _wait_for(lambda: os.path.exists(scheduler_file), 60, "no scheduler file")
        for number in range(workers):
            start_worker(found, f"worker-{number}", folder)
        _wait_for(lambda: workers_seen(found) == workers, 120, f"{workers} workers")
        yield found
    finally:
        for pid in reversed(found.pids):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
        for process in [*found.workers, scheduler]:
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
