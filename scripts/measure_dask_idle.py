"""What an idle local Dask cluster costs its cores (docs/scale_out.md, "Dask"), measured in one
run:

    python -m scripts.measure_dask_idle [--seconds=40] [--repeats=2]

A scheduler and two single-threaded workers (`models.foundation.cluster.local_cluster`, each
worker on a core of its own, TensorFlow preloaded as `cluster.WORKER_PRELOAD` has it) are
started with Dask's own configuration and with the project's (`cluster.DASK_SETTINGS`),
alternately, and left idle; after their start-up the CPU time each process spends in
`--seconds` (user and system, read by psutil, which comes with Dask) is its share of a core.
A worker's share is time that the units it runs on that core lose. Prints each run and the
mean share per process.
"""
import dataclasses
import tempfile
import time

from models.foundation import cluster, progress, provenance
from models.foundation.cli import option, require, run_binary
from models.foundation.errors import UserError, check_minimum

CONFIGURATIONS = {"Dask's defaults": {}, "the project's (DASK_SETTINGS)": cluster.DASK_SETTINGS}
SETTLE_SECONDS = 5  # after the workers joined: their start-up's last work ends


@dataclasses.dataclass(frozen=True)
class Config:
    seconds: float = option(40.0, "Idle seconds measured per run.")
    repeats: int = option(2, "Rounds of the two configurations (each round's order rotated).")


def cpu_seconds(pid: int) -> float:
    """User plus system CPU seconds of process `pid` so far."""
    used = require("psutil", "scale").Process(pid).cpu_times()
    return used.user + used.system


def idle_shares(settings: dict, seconds: float) -> dict:
    """{process: share of a core} of an idle local cluster run with `settings`."""
    with tempfile.TemporaryDirectory(prefix="dask_idle_") as folder:
        with cluster.local_cluster(folder, workers=2, preload=cluster.WORKER_PRELOAD,
                                   pinned=True, dask_settings=settings) as running:
            names = ["scheduler", "worker 0", "worker 1"]
            time.sleep(SETTLE_SECONDS)
            before = [cpu_seconds(pid) for pid in running.pids]
            time.sleep(seconds)
            after = [cpu_seconds(pid) for pid in running.pids]
    return {name: (end - start) / seconds for name, start, end in zip(names, before, after)}


def run(config: Config) -> dict:
    """Measures both configurations --repeats times; prints and returns the mean shares."""
    check_minimum("repeats", config.repeats, 1)
    if config.seconds <= 0:
        raise UserError(f"--seconds must be positive; got {config.seconds}")
    print(f"machine: {provenance.machine()}", flush=True)
    found: dict = {name: [] for name in CONFIGURATIONS}
    order = list(CONFIGURATIONS)
    with progress.bar(config.repeats * len(order), "idle clusters measured", "run") as bar:
        for turn in range(config.repeats):
            for name in order[turn % 2:] + order[:turn % 2]:
                shares = idle_shares(CONFIGURATIONS[name], config.seconds)
                found[name].append(shares)
                bar.write(f"round {turn + 1}, {name}: " + ", ".join(
                    f"{process} {100 * share:.2f}%" for process, share in shares.items()))
                bar.update(1)
    means = {name: {process: sum(run[process] for run in runs) / len(runs)
                    for process in runs[0]} for name, runs in found.items()}
    print(f"\nshare of a core, idle, mean of {config.repeats} runs of {config.seconds:g} s")
    print(f"{'configuration':32} {'scheduler':>10} {'worker 0':>10} {'worker 1':>10}")
    for name, shares in means.items():
        print(f"{name:32} " + " ".join(f"{100 * share:9.2f}%" for share in shares.values()))
    return means


if __name__ == "__main__":
    run_binary(Config, run)
