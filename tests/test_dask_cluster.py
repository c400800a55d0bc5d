"""The Beam pipelines on a real Dask cluster (docs/scale_out.md, "Dask"): a scheduler and two
single-threaded worker processes on 127.0.0.1 (tests/dask_cluster.py), started from the
installed package. Each Beam binary writes on the cluster the bytes it writes in one process;
each worker process loads a model once, whatever the number of partitions; a worker killed
in the middle of a run (kill -9) still gives the same bytes."""
import hashlib
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from saliency_gen import beam_support, generate
from tests import REPO, binaries, dask_cluster
from tests.conftest import tree_digests

pytest.importorskip("distributed")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with dask_cluster.cluster(str(tmp_path_factory.mktemp("dask"))) as found:
        yield found


def _run(module, flags, *, timeout=600):
    done = binaries.run([sys.executable, "-m", module, *flags], cwd=REPO, capture_output=True,
                        text=True, timeout=timeout)
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def _on(cluster):
    return ["--runner=DaskRunner", f"--dask_scheduler_file={cluster.scheduler_file}"]


def _digest(path):
    with open(path, "rb") as handle:
        return hashlib.sha256(handle.read()).hexdigest()


def test_generation_and_scoring_write_the_one_process_bytes(cluster, small_shards, tmp_path):
    """beam_generate (two methods, 16 units) and beam_scoring (36 units) on the cluster: the
    maps' shards and manifests, and the report, byte for byte those of one process; each
    worker loaded the model once (and scoring's measure once) over all its partitions."""
    pattern, model_path = small_shards
    methods = "roar:SH,roar:SH_SG"
    single = str(tmp_path / "single")
    generate.generate(generate.Config(input_pattern=pattern, model_path=model_path,
                                      saliency_method=methods, output_dir=single, batch_size=5,
                                      chunk_size=16), progress_bar=False)
    on_dask = str(tmp_path / "dask")
    done = _run("saliency_gen.beam_generate", [
        f"--input_pattern={pattern}", f"--model_path={model_path}",
        f"--saliency_method={methods}", f"--output_dir={on_dask}", "--batch_size=5",
        "--unit_records=5", *_on(cluster)])
    assert "wrote 72 maps in 3 shard(s)" in done.stdout
    expected = tree_digests(single)
    assert {name: tree_digests(on_dask).get(name) for name in expected} == expected
    scored = {}
    for name, runner in (("one", ["--beam_workers=1"]), ("dask", _on(cluster))):
        scored[name] = str(tmp_path / f"{name}.json")
        _run("faithfulness.beam_scoring", [
            f"--input_pattern={on_dask}/SH/validation-*", f"--model_path={model_path}",
            "--saliency_method=SH", "--evaluation_protocol=deletion", "--batch_size=8",
            "--unit_records=1", f"--output={scored[name]}", *runner])
    assert _digest(scored["one"]) == _digest(scored["dask"])
    from distributed import Client

    with Client(scheduler_file=cluster.scheduler_file, timeout=30) as client:
        loads = client.run(beam_support.made_in_process)
    assert len(loads) == 2
    for per_worker in loads.values():
        assert per_worker and set(per_worker.values()) == {1}, per_worker


def test_road_writes_the_one_process_bytes(cluster, small_shards, tmp_path):
    pattern, model_path = small_shards
    saliency = str(tmp_path / "maps")
    generate.generate(generate.Config(input_pattern=pattern, model_path=model_path,
                                      saliency_method="roar:SH", output_dir=saliency),
                      progress_bar=False)
    flags = [f"--ckpt_path={model_path}", f"--data_dir={os.path.join(saliency, 'SH')}",
             "--saliency_method=SH", "--ratios=0.3,0.7", "--batch_size=5", "--unit_records=10"]
    outputs = {}
    for name, runner in (("one", ["--beam_workers=1"]), ("dask", _on(cluster))):
        outputs[name] = str(tmp_path / name)
        _run("roar.beam_road", [*flags, f"--output={outputs[name]}", *runner])
    with open(outputs["one"] + ".json") as one, open(outputs["dask"] + ".json") as dask:
        assert json.load(one)["rows"] == json.load(dask)["rows"]
    assert _digest(outputs["one"] + ".json") == _digest(outputs["dask"] + ".json")


def test_a_worker_killed_mid_run_still_gives_the_same_bytes(cluster, small_shards, tmp_path):
    """kill -9 of the worker that is computing a unit: the scheduler gives its work to the
    other worker, and the run writes the bytes of one process (or fails with one line: never
    a partial output); a new worker takes the killed one's place afterwards."""
    from distributed import Client

    pattern, model_path = small_shards
    single = str(tmp_path / "single")
    generate.generate(generate.Config(input_pattern=pattern, model_path=model_path,
                                      saliency_method="roar:SH_SG", output_dir=single,
                                      batch_size=5, chunk_size=16), progress_bar=False)
    on_dask = str(tmp_path / "dask")
    run = subprocess.Popen(
        [sys.executable, "-m", "saliency_gen.beam_generate", f"--input_pattern={pattern}",
         f"--model_path={model_path}", "--saliency_method=roar:SH_SG", f"--output_dir={on_dask}",
         "--batch_size=5", "--unit_records=5", *_on(cluster)],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    victim = None
    with Client(scheduler_file=cluster.scheduler_file, timeout=30) as client:
        deadline = time.monotonic() + 300
        while victim is None and run.poll() is None and time.monotonic() < deadline:
            busy = [address for address, tasks in client.processing().items() if tasks]
            if busy:
                pid = client.run(os.getpid, workers=[busy[0]])[busy[0]]
                os.kill(pid, signal.SIGKILL)
                victim = pid
            time.sleep(0.05)
    stdout, stderr = run.communicate(timeout=600)
    assert victim is not None, "no worker was seen at work"
    cluster.workers[:] = [w for w in cluster.workers if w.pid != victim]
    dask_cluster.start_worker(cluster, "worker-replacement", os.path.dirname(
        cluster.scheduler_file))
    if run.returncode == 0:
        expected = tree_digests(single)
        assert {name: tree_digests(on_dask).get(name) for name in expected} == expected
    else:  # one clear line, and no shard that looks finished
        assert run.returncode == 2 and stderr.strip().startswith("error:"), stderr[-2000:]
        assert not [name for name in tree_digests(on_dask) if name.endswith(".tfrecord")]
