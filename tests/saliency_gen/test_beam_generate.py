"""Saliency generation as a Beam pipeline: the same bytes as the single-process generator,
whatever the number of workers, and a retried bundle neither drops nor duplicates a record."""
import json
import os
import sys

from saliency_gen import beam_generate, beam_support, generate
from saliency_gen.data import records
from tests import REPO, binaries
from tests.conftest import assert_origin_covers_the_flags, tree_digests

USER_METHODS = os.path.join(REPO, "tests", "data", "user_methods")


def _environment(**extra):
    path = os.pathsep.join([USER_METHODS, REPO, os.environ.get("PYTHONPATH", "")])
    return {**os.environ, "PYTHONPATH": path, **extra}


def test_record_ranges_cover_every_record_once():
    ranges = beam_support.record_ranges([("a", 13), ("b", 5), ("c", 0)], 5)
    assert ranges == [("a", 0, 5), ("a", 5, 5), ("a", 10, 3), ("b", 0, 5)]
    # work units: --unit_records rounded up to whole batches (7 -> 2 batches of 4)
    runner = beam_support.RunnerOptions(unit_records=7)
    assert runner.work_ranges([("a", 13)], 4) == [("a", 0, 8), ("a", 8, 5)]


def test_local_workers_share_the_cores(monkeypatch):
    for name in beam_support.THREAD_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("TF_NUM_INTEROP_THREADS", "3")  # the user's setting is kept
    share = str(max(1, (os.cpu_count() or 1) // 2))
    with beam_support.local_worker_threads(beam_support.pipeline_options("DirectRunner", 2)):
        assert os.environ["TF_NUM_INTRAOP_THREADS"] == share
        assert os.environ["TF_NUM_INTEROP_THREADS"] == "3"
    assert "TF_NUM_INTRAOP_THREADS" not in os.environ
    assert os.environ["TF_NUM_INTEROP_THREADS"] == "3"
    with beam_support.local_worker_threads(beam_support.pipeline_options("DirectRunner", 1)):
        assert "TF_NUM_INTRAOP_THREADS" not in os.environ  # in-process: nothing to share


def test_two_worker_pipeline_writes_the_single_process_bytes(small_shards, tmp_path):
    pattern, model_path = small_shards
    methods = "roar:SH,roar:SH_SG"  # a gradient, and SmoothGrad with keyed noise
    single = str(tmp_path / "single")
    generate.generate(generate.Config(input_pattern=pattern, model_path=model_path,
                                      saliency_method=methods, output_dir=single, batch_size=5,
                                      chunk_size=16), progress_bar=False)
    beam = str(tmp_path / "beam")
    done = binaries.run(
        [sys.executable, "-m", "saliency_gen.beam_generate", f"--input_pattern={pattern}",
         f"--model_path={model_path}", f"--saliency_method={methods}", f"--output_dir={beam}",
         "--batch_size=5", "--chunk_size=7", "--beam_workers=2", "--unit_records=5"],
        cwd=REPO, env=_environment(), capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "wrote 72 maps in 3 shard(s)" in done.stdout
    expected, found = tree_digests(single), tree_digests(beam)
    shards = [name for name in expected if name.endswith(".tfrecord")]
    assert len(shards) == 6
    assert {name: found.get(name) for name in expected} == expected  # manifests included
    with open(os.path.join(beam, "SH", "manifest.json"), encoding="utf-8") as handle:
        assert_origin_covers_the_flags(beam_generate.Config, json.load(handle))
    assert records.check_file(os.path.join(beam, "SH", os.path.basename(shards[0])), "saliency",
                              key="gradient_image") in (11, 12, 13)


def test_a_retried_bundle_gives_a_complete_identical_output(small_shards, tmp_path):
    pattern, model_path = small_shards
    method = "flaky_attribution:gradient_failing_once"
    marker = tmp_path / "failed-once"
    sys.path.insert(0, USER_METHODS)
    os.environ["FLAKY_MARKER"] = str(marker)
    try:
        config = beam_generate.Config(input_pattern=pattern, model_path=model_path,
                                      saliency_method=method, output_dir=str(tmp_path / "beam"),
                                      batch_size=4, unit_records=12,
                                      runner="BundleBasedDirectRunner")
        result = beam_generate.run(config)
        assert marker.exists()  # the injected failure did happen, and the runner retried
        assert result["images"] == 36
        generate.generate(generate.Config(input_pattern=pattern, model_path=model_path,
                                          saliency_method=method,
                                          output_dir=str(tmp_path / "single"), batch_size=4),
                          progress_bar=False)
    finally:
        sys.path.remove(USER_METHODS)
        del os.environ["FLAKY_MARKER"]
    folder = generate.method_directory(method)
    single = tree_digests(str(tmp_path / "single" / folder))
    assert tree_digests(str(tmp_path / "beam" / folder)) == single
    for name in single:
        if name.endswith(".tfrecord"):
            keys = [records.parse_example(r, name)["example/key"]
                    .bytes_list.value[0] for _, r in records.iter_serialized(
                        str(tmp_path / "beam" / folder / name))]
            assert len(keys) == len(set(keys)) and len(keys) in (11, 12, 13)


WORKER_ERROR = '''
import dataclasses
from models.foundation.cli import option, run_binary
from models.foundation.errors import RecordError
from saliency_gen.beam_support import beam, pipeline_options, run

class Broken(beam.DoFn):
    def process(self, shard):
        raise RecordError(f"shard {shard}: record 3: a label outside the classes")

@dataclasses.dataclass(frozen=True)
class Config:
    workers: int = option(2, "Local worker processes.")

def main(config):
    run(lambda root: root | beam.Create([7]) | beam.ParDo(Broken()),
        pipeline_options("DirectRunner", config.workers))

if __name__ == "__main__":
    run_binary(Config, main)
'''


def test_a_worker_that_connects_after_the_run_ended_is_told_to_stop():
    """Beam's race (a worker process still starting when a failed run closes its connection)
    hung a failing two-worker run for good about once in ten on 2 loaded cores."""
    from apache_beam.runners.portability.fn_api_runner import worker_handlers

    beam_support._close_connections_not_yet_started()
    connection = worker_handlers.ControlConnection()
    connection.close()  # the run failed before this worker connected
    connection.set_input(iter([]))  # ... and now it connects
    request = connection._push_queue.get(timeout=5)  # Beam left nothing here: a wait forever
    assert request is worker_handlers.BeamFnControlServicer._DONE_MARKER


def test_an_error_inside_a_worker_process_is_one_line(tmp_path):
    script = tmp_path / "broken_pipeline.py"
    script.write_text(WORKER_ERROR)
    done = binaries.run([sys.executable, str(script)], cwd=REPO, capture_output=True,
                        text=True, timeout=300)
    assert done.returncode == 2, done.stderr[-3000:]
    assert done.stderr.strip().splitlines() == [
        "error: shard 7: record 3: a label outside the classes"], done.stderr[-3000:]


def test_dask_runner_flags_name_a_running_cluster(tmp_path):
    """--runner=DaskRunner needs one of --dask_scheduler_file / --dask_address (each checked in
    one line), the work units become its partitions, and the cluster flags need the runner."""
    import pytest

    from models.foundation.errors import UserError

    pytest.importorskip("distributed")
    scheduler = tmp_path / "scheduler.json"
    scheduler.write_text("{}")
    options = beam_support.RunnerOptions(runner="DaskRunner",
                                         dask_scheduler_file=str(scheduler))
    from apache_beam.runners.dask.dask_runner import DaskOptions

    found = options.pipeline_options(units=7)
    assert found.get_all_options()["runner"] == beam_support.DASK_RUNNER
    dask = found.view_as(DaskOptions)
    assert (dask.scheduler_file, dask.npartitions) == (str(scheduler), 7)
    for given, message in (
            ({}, "needs a running cluster"),
            ({"dask_scheduler_file": str(tmp_path / "none.json")}, "does not exist"),
            ({"dask_address": "127.0.0.1:8786"}, "is not a scheduler address")):
        with pytest.raises(UserError, match=message):
            beam_support.RunnerOptions(runner="DaskRunner", **given).pipeline_options()
    with pytest.raises(UserError, match="need --runner=DaskRunner"):
        beam_support.RunnerOptions(dask_address="tcp://h:1").pipeline_options()
