"""What the Apache Beam pipelines of the project share (docs/scale_out.md): runner options from
flags, work units over record ranges, and the combiner of per-image scores.

A pipeline's work is a list of record ranges (a shard, the first record, the count); each range
is read, explained or scored inside a worker that loaded the model once (`DoFn.setup`), and its
results are keyed so that a grouping or a combiner puts them back together whatever the order in
which workers finished, and whatever the number of workers. A bundle that fails and is retried
by the runner emits its outputs only once: the runner discards a failed attempt's outputs.
"""
import contextlib
import dataclasses
import importlib
import logging
import os
import re
import shlex
import sys
import tempfile
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, Optional, Sequence

import numpy as np

from models.foundation import cli, cluster, errors
from models.foundation.cli import option, require
from models.foundation.errors import UserError, check_minimum
from models.foundation.lazy import lazy_module

if TYPE_CHECKING:
    from models.report import uncertainty
else:  # scipy.stats, a second of a binary's --help (docs/architecture.md, "Light imports")
    uncertainty = lazy_module("models.report.uncertainty")

_root_level = logging.getLogger().level
logging.getLogger().setLevel(logging.ERROR)  # Beam's import warns that GCP's apitools is absent
try:
    if TYPE_CHECKING:
        import apache_beam as beam
    else:
        beam = require("apache_beam", "scale")  # an extra: the main jobs run without it
    from apache_beam.options.pipeline_options import (
        DirectOptions,
        PipelineOptions,
        StandardOptions,
    )
finally:
    logging.getLogger().setLevel(_root_level)

# The runners documented in docs/scale_out.md; any other Beam runner name passes through.
LOCAL_RUNNERS = ("DirectRunner", "BundleBasedDirectRunner")
# Beam's Dask runner (apache_beam.runners.dask), by the short name the flags take
DASK_RUNNER = "apache_beam.runners.dask.dask_runner.DaskRunner"


def per_process(key: Any, make: Callable[[], Any]) -> Any:
    """`make()`, made once per worker process and kept (under `key`): a DoFn's model. Beam's
    Dask runner sets a DoFn up once per partition, not once per worker (docs/scale_out.md,
    "Dask"), so each DoFn's `setup` takes its model from here."""
    if key not in _PER_PROCESS:
        _PER_PROCESS[key] = make()
        _MADE[key] = _MADE.get(key, 0) + 1
    return _PER_PROCESS[key]


_PER_PROCESS: dict = {}
_MADE: dict = {}  # how often each key was made in this process (the tests read it)


def made_in_process() -> dict:
    """{key: times made} in this process (`per_process`)."""
    return {repr(key): count for key, count in _MADE.items()}


def start_worker() -> None:
    """A worker process's start-up, the binary's own (`cli.start_process`: TensorFlow quiet,
    oneDNN on unless the environment the worker inherited says otherwise), called by each
    DoFn's `setup` before its model loads TensorFlow."""
    cli.start_process()


def pipeline_options(runner: str = "DirectRunner", num_workers: int = 2,
                     extra: Optional[str] = None, dask: Optional[dict] = None) -> PipelineOptions:
    """Beam options: `runner` with `num_workers` local worker processes for the DirectRunner
    (multi-processing; 1: in this process), or the Dask cluster `dask` names for the
    DaskRunner (`dask_arguments`), plus `extra` Beam flags given as one string
    ("--project=p --region=r --temp_location=gs://..." for Dataflow, "--flink_master=..." ...)."""
    check_minimum("beam_workers", num_workers, 1)
    arguments = [f"--runner={runner}"]
    if runner == "DaskRunner":
        arguments = [f"--runner={DASK_RUNNER}", *dask_arguments(**(dask or {}))]
    if not cli.user_asked_for_logs():  # local workers: no traceback before the error line
        arguments.append("--default_sdk_harness_log_level=CRITICAL")
    if runner == "DirectRunner":
        arguments += [f"--direct_num_workers={num_workers}",
                      "--direct_running_mode="
                      + ("multi_processing" if num_workers > 1 else "in_memory")]
    try:
        arguments += shlex.split(extra or "")
    except ValueError as error:
        raise UserError(f"--beam_options cannot be parsed ({error}); quote values with "
                        "spaces") from None
    return PipelineOptions(arguments)


def dask_arguments(scheduler_file: Optional[str] = None, address: Optional[str] = None,
                   partitions: int = 1) -> list:
    """The Dask runner's Beam flags for a running cluster: its scheduler file or address, and
    the partitions of the work units (one per unit: the runner's Reshuffle does not spread
    work, its partitions do)."""
    require("dask.distributed", "scale")
    cluster.check_cluster(scheduler_file, address, "--runner=DaskRunner")
    check_minimum("dask_partitions", partitions, 1)
    where = (f"--dask_scheduler_file={scheduler_file}" if scheduler_file is not None
             else f"--dask_client_address={address}")
    return [where, f"--dask_npartitions={partitions}", "--dask_connection_timeout=30"]


@dataclasses.dataclass(frozen=True)
class RunnerOptions(cluster.ClusterOptions):
    """The Beam runner's flags, shared by the project's Beam binaries (their configs inherit
    it). None of them changes results: maps and scores are keyed by example, not by worker or
    work unit (docs/scale_out.md)."""

    runner: str = option("DirectRunner", "Beam runner: DirectRunner (local processes), "
                         "BundleBasedDirectRunner (this process), DaskRunner (a Dask cluster: "
                         "--dask_scheduler_file or --dask_address), DataflowRunner, "
                         "FlinkRunner, SparkRunner, ...", origin=False)
    beam_workers: int = option(2, "DirectRunner: worker processes (1: in this process).",
                               origin=False)
    beam_options: str = option("", "More Beam pipeline flags, as one string (e.g. Dataflow's "
                               "--project, --region, --temp_location).", origin=False)
    unit_records: int = option(256, "Records per work unit, rounded up to a multiple of "
                               "--batch_size: a unit pays the runner's cost of a task, so small "
                               "units cost time; large ones spread less evenly.",
                               origin=False)
    dask_partitions: Optional[int] = option(None, "DaskRunner: partitions of the work units "
                                            "(default: one per unit).", origin=False)

    def pipeline_options(self, units: int = 1) -> PipelineOptions:
        """The Beam options these flags ask for (`pipeline_options`), for `units` work
        units."""
        if self.runner != "DaskRunner" and self.on_cluster:
            raise UserError("--dask_scheduler_file / --dask_address need --runner=DaskRunner")
        dask = {"scheduler_file": self.dask_scheduler_file, "address": self.dask_address,
                "partitions": self.dask_partitions or max(1, units)}
        return pipeline_options(self.runner, self.beam_workers, self.beam_options, dask)

    def work_ranges(self, counts: Sequence[tuple], batch_size: int) -> list:
        """The work units (path, start, count) over the (path, record count) pairs: ranges of
        --unit_records rounded up to a multiple of `batch_size`, so that a unit's batches are
        the single-process run's batches."""
        check_minimum("unit_records", self.unit_records, 1)
        check_minimum("batch_size", batch_size, 1)
        return record_ranges(counts, -(-self.unit_records // batch_size) * batch_size)


def record_ranges(counts: Sequence[tuple], size: int) -> list:
    """Work units (path, start, count) of at most `size` records covering every record of the
    (path, record count) pairs, in file order."""
    check_minimum("batch_size", size, 1)
    return [(path, start, min(size, count - start))
            for path, count in counts for start in range(0, count, size)]


# TensorFlow reads these when a process starts it: the sizes of its thread pools.
THREAD_VARIABLES = ("TF_NUM_INTRAOP_THREADS", "TF_NUM_INTEROP_THREADS")


@contextlib.contextmanager
def local_worker_threads(options: PipelineOptions) -> Iterator[None]:
    """While local worker processes run (the DirectRunner's multi-processing mode), each gets
    TensorFlow thread pools of cores // workers threads, so that N workers share the machine's
    cores instead of each starting one thread per core; settings the user made are kept. Remote
    runners' workers bring their own cores and are left alone."""
    direct = options.view_as(DirectOptions)
    workers = direct.direct_num_workers or 1
    local = (options.view_as(StandardOptions).runner in LOCAL_RUNNERS
             and direct.direct_running_mode == "multi_processing" and workers > 1)
    chosen = [name for name in THREAD_VARIABLES if name not in os.environ] if local else []
    if chosen:
        # This process keeps its own pools: TensorFlow makes them when its runtime starts, so
        # it starts now, before the variables change (else a process whose first TensorFlow
        # work ran inside this block, a test process among them, kept one thread for good).
        import tensorflow as tf

        tf.config.list_logical_devices()
    threads = str(max(1, (os.cpu_count() or 1) // workers))
    os.environ.update({name: threads for name in chosen})
    try:
        yield
    finally:
        for name in chosen:
            os.environ.pop(name, None)


def _close_connections_not_yet_started() -> None:
    """Works around a race in Beam's local runner (docs/scale_out.md, "A failure ends the
    run"): when a pipeline fails before one of its local worker processes has connected, Beam
    closes that worker's control connection without queueing the end-of-work marker, the worker
    connects afterwards and waits for work forever, and the runner waits for it forever. Here
    the marker is queued whatever the connection's state, so a late worker is told at once that
    there is nothing to do and exits."""
    from apache_beam.runners.portability.fn_api_runner import worker_handlers

    connection = worker_handlers.ControlConnection
    if getattr(connection.close, "queues_the_marker_early", False):
        return
    servicer = worker_handlers.BeamFnControlServicer
    beam_close = connection.close

    def close(self) -> None:
        if self._state == servicer.UNSTARTED_STATE:  # the worker has not connected yet
            self._push_queue.put(servicer._DONE_MARKER)
        beam_close(self)

    setattr(close, "queues_the_marker_early", True)  # noqa: B010  (a mark on the function)
    connection.close = close


def main(module_name: str) -> None:
    """Runs the Beam binary `module_name` (its `Config` and `run`) from its importable module,
    not from `__main__`: Beam pickles a DoFn of `__main__` by value, with the globals it uses,
    and a Dask scheduler then imported TensorFlow to read the job, blocked meanwhile; a DoFn
    of an importable module travels by name (docs/scale_out.md, "Dask")."""
    module = importlib.import_module(module_name)
    cli.run_binary(module.Config, module.run)


def run(pipeline_builder: Callable, options: PipelineOptions) -> Any:
    """Builds a pipeline with `pipeline_builder(root)` and runs it to completion (local
    workers with their share of the cores, `local_worker_threads`); returns the runner's
    result (for its metrics)."""
    _close_connections_not_yet_started()
    pipeline = beam.Pipeline(options=options)
    pipeline_builder(pipeline)
    with local_worker_threads(options), quiet_beam_logs():
        try:
            result = pipeline.run()
            result.wait_until_finish()
        except Exception as error:  # noqa: BLE001 - a worker's UserError comes back wrapped
            message = user_error_message(error)
            if message is None:
                raise
            raise UserError(message) from None
    return result


# How an error of models.foundation.errors reads once the runner has wrapped it in text
# (`_is_user_error` keeps the UserError kinds), and the step names Beam appends to its message.
_WRAPPED_ERROR = re.compile(r"^models\.foundation\.errors\.([A-Za-z]*Error): (.+)$", re.M)
_STEP_SUFFIX = re.compile(r"( \[while running '[^']*'\])+$")


def user_error_message(error: BaseException) -> Optional[str]:
    """The message of the UserError behind a runner's exception (in its chain, or in the text
    a multi-process runner made of it), without Beam's step suffix; None if there is none."""
    seen: Optional[BaseException] = error
    while seen is not None:
        if isinstance(seen, UserError):
            return _STEP_SUFFIX.sub("", str(seen))
        seen = seen.__cause__ or seen.__context__
    found = [match.group(2) for match in _WRAPPED_ERROR.finditer(str(error))
             if _is_user_error(match.group(1))]
    return _STEP_SUFFIX.sub("", found[-1]) if found else None


def _is_user_error(name: str) -> bool:
    found = getattr(errors, name, None)
    return isinstance(found, type) and issubclass(found, UserError)


@contextlib.contextmanager
def quiet_beam_logs() -> Iterator[None]:
    """Beam's own output while a pipeline runs (local workers' tracebacks before the error
    they raise, harness chatter) is held back unless the user asked for logs: stderr, which
    the local worker processes inherit, goes to a temporary file. A UserError then reaches the
    caller as its one line alone; any other failure shows everything that was held back; a
    success shows what was held back except Beam's INFO lines and its `apitools` warning."""
    if cli.user_asked_for_logs():
        yield
        return
    logger = logging.getLogger("apache_beam")
    level, show = logger.level, True
    logger.setLevel(logging.CRITICAL)
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as held:
        os.dup2(held.fileno(), 2)
        try:
            yield
        except Exception as error:
            show = user_error_message(error) is None
            raise
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            logger.setLevel(level)
            held.seek(0)
            lines = held.read().decode("utf-8", "replace").splitlines()
            if show:
                kept = [line for line in lines if not line.startswith("INFO:")
                        and "apitools not found" not in line]
                if kept:
                    print("\n".join(kept), file=sys.stderr, flush=True)


class MeanAndInterval(beam.CombineFn):
    """Combines (unit key, value) pairs into {"mean", "low", "high", "n", "n_excluded",
    "per_image"}: the mean of the finite values and its seeded bootstrap interval
    (`models.report.uncertainty.interval`). Values are ordered by their unit key before anything is
    computed, so the result does not depend on how the runner split or ordered the work."""

    def __init__(self, seed: int = 0):
        super().__init__()
        self.seed = seed

    def create_accumulator(self) -> list:
        return []

    def add_input(self, accumulator: list, element: Any) -> list:
        accumulator.append(element)
        return accumulator

    def merge_accumulators(self, accumulators: Iterable[list]) -> list:
        return [item for accumulator in accumulators for item in accumulator]

    def extract_output(self, accumulator: list) -> Any:
        ordered = sorted(accumulator, key=lambda item: item[0])
        values = np.array([value for _, value in ordered], np.float64)
        estimate = uncertainty.interval(values, seed=self.seed)
        return {"mean": estimate.value, "low": estimate.low, "high": estimate.high,
                "n": estimate.n, "n_excluded": estimate.n_excluded,
                "per_image": {key: (float(value) if np.isfinite(value) else None)
                              for key, value in ordered}}
