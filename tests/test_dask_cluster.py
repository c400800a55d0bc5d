"""The Beam pipelines, roar.sweep and the report card on a real Dask cluster
(docs/scale_out.md, "Dask"): a scheduler and two single-threaded worker processes on
127.0.0.1 (`models.foundation.cluster.local_cluster`), started from the installed package.
Each Beam binary writes on the cluster the bytes it writes in one process; each worker process
loads a model once, whatever the number of partitions; a worker killed in the middle of a run
(kill -9) still gives the same bytes; a sweep's retrainings and a card's cells are tasks whose
results equal the sequential run's."""
import hashlib
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from models.foundation import cluster as clusters
from saliency_gen import beam_support, generate
from tests import REPO, binaries
from tests.conftest import tree_digests

distributed = pytest.importorskip("distributed")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    # as a long-running cluster's workers: TensorFlow imported when they start (--preload)
    with clusters.local_cluster(str(tmp_path_factory.mktemp("dask")),
                                preload=clusters.WORKER_PRELOAD) as found:
        with distributed.Client(scheduler_file=found.scheduler_file) as connected:
            loaded = connected.run(lambda: "tensorflow" in sys.modules)
            profiled = connected.run(
                lambda dask_worker: "profile" in dask_worker.periodic_callbacks)
            ticks = connected.run(  # ms between the measurements of itself each server makes
                lambda dask_worker: dask_worker.periodic_callbacks["tick"].callback_time)
            ticks["scheduler"] = connected.run_on_scheduler(
                lambda dask_scheduler: dask_scheduler.periodic_callbacks["tick"].callback_time)
        assert list(loaded.values()) == [True, True]
        assert list(profiled.values()) == [False, False]  # Dask's sampler would slow TF work
        assert list(ticks.values()) == [1000, 1000, 1000]  # not 20 ms: 4-6% of an idle core
        yield found


def test_a_preloaded_worker_has_the_binaries_kernels():
    """A worker preloading `WORKER_PRELOAD` in an environment that names no oneDNN setting
    computes with oneDNN on, as the binaries do; preloading `tensorflow` itself, as the docs had
    workers do, left TensorFlow's own default (off on this project's AMD CPUs: the same probe
    prints False there), and the start-up of a unit's set-up came after TensorFlow had read it."""
    probe = (f"import {clusters.WORKER_PRELOAD[0]}\n"
             "from models.foundation import cli\n"
             "print(cli.onednn_enabled())")
    environment = {key: value for key, value in os.environ.items()
                   if key != "TF_ENABLE_ONEDNN_OPTS"}
    done = binaries.run([sys.executable, "-c", probe], cwd=REPO, env=environment, timeout=120)
    assert done.returncode == 0 and done.stdout.split()[-1:] == ["True"], done.stderr[-2000:]


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity") or len(clusters.usable_cores()) < 2,
                    reason="needs Linux's CPU affinity and two cores")
def test_a_pinned_process_and_the_threads_it_starts_stay_on_their_core():
    """`on_core` (the pinned local cluster's workers, scripts/bench_scale.py --pin_cores): the
    child and a thread it starts later run on the last usable core alone; no core, no
    confinement."""
    core = clusters.usable_cores()[-1]
    child = ("import os, threading; seen = []; thread = threading.Thread(target=lambda: "
             "seen.append(sorted(os.sched_getaffinity(0)))); thread.start(); thread.join(); "
             "print(sorted(os.sched_getaffinity(0)), seen[0])")
    done = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True,
                          check=True, preexec_fn=clusters.on_core(core))
    assert done.stdout.split("]")[:2] == [f"[{core}", f" [{core}"], done.stdout
    assert clusters.on_core(None) is None


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
            "--saliency_method=roar:SH", "--evaluation_protocol=deletion", "--batch_size=8",
            "--unit_records=1", f"--output={scored[name]}", *runner])
    assert _digest(scored["one"]) == _digest(scored["dask"])
    from distributed import Client

    with Client(scheduler_file=cluster.scheduler_file, timeout=30) as client:
        loads = client.run(beam_support.made_in_process)
        # the jobs' DoFns came by name: the scheduler read them without importing TensorFlow
        assert not client.run_on_scheduler(lambda: "tensorflow" in sys.modules)
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
    cluster.add_worker("worker-replacement")
    print(f"killed worker pid {victim} mid-run: the run exited {run.returncode}")
    if run.returncode == 0:
        expected = tree_digests(single)
        assert {name: tree_digests(on_dask).get(name) for name in expected} == expected
    else:  # one clear line, and no shard that looks finished
        assert run.returncode == 2 and stderr.strip().startswith("error:"), stderr[-2000:]
        assert not [name for name in tree_digests(on_dask) if name.endswith(".tfrecord")]


def test_a_two_run_sweep_on_the_cluster_equals_the_sequential_one(cluster, small_shards,
                                                                   tmp_path):
    """roar.sweep with --dask_scheduler_file: its two retrainings run as two tasks and give the
    sequential sweep's numbers; a second submission finds both finished and redoes neither."""
    pattern, _ = small_shards
    train_flags = (f"--data_dir={os.path.dirname(pattern)} --train_pattern=validation-* "
                   "--eval_pattern=validation-* --num_classes=10 --model=plain_cnn --epochs=1 "
                   "--batch_size=12 --optimizer=sgd --base_learning_rate=0.5 "
                   "--warmup_epochs=0 --eval_batch_size=8")
    common = ["--methods=random", "--ratios=0.3,0.7", "--seeds=0", f"--train_flags={train_flags}"]
    sequential, on_dask = str(tmp_path / "sequential"), str(tmp_path / "dask")
    _run("roar.sweep", [*common, f"--output_dir={sequential}"])
    done = _run("roar.sweep", [*common, f"--output_dir={on_dask}",
                               f"--dask_scheduler_file={cluster.scheduler_file}"])
    assert "2 runs trained, 0 already finished" in done.stdout

    def results(root):
        found = {}
        for folder, _, files in os.walk(root):
            if "metrics.json" in files:
                with open(os.path.join(folder, "metrics.json")) as handle:
                    metrics = json.load(handle)
                found[os.path.relpath(folder, root)] = (metrics["top1"], metrics["top5"],
                                                        metrics["n_eval"])
        return found

    assert len(results(sequential)) == 2 and results(on_dask) == results(sequential)
    again = _run("roar.sweep", [*common, f"--output_dir={on_dask}",
                                f"--dask_scheduler_file={cluster.scheduler_file}"])
    assert "0 runs trained, 2 already finished" in again.stdout


def test_card_cells_on_the_cluster_equal_the_sequential_card(cluster, trained_world, tmp_path):
    """The report card with --dask_scheduler_file: each (benchmark, method) cell is a task, and
    the card's values are the sequential card's, cell for cell."""
    data_dir, model_dir, _ = trained_world
    flags = ["--methods=random,bam:VG", "--benchmarks=sparseness",
             f"--model_path={os.path.join(model_dir, 'obj')}",
             f"--input_pattern={os.path.join(data_dir, 'records', 'validation-*')}",
             "--nr_images=8", "--sanity=false", "--meta_evaluation=false",
             "--gallery_images=0"]
    script = os.path.join(REPO, "scripts", "report_card.py")
    cards = {}
    for name, extra in (("sequential", []), ("dask", _on(cluster)[1:])):
        cards[name] = str(tmp_path / name)
        done = binaries.run([sys.executable, script, *flags, f"--output_dir={cards[name]}",
                             *extra], cwd=REPO, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-3000:]

    def cell_values(root):
        found = {}
        for folder, _, files in os.walk(os.path.join(root, "cells")):
            for file in files:
                with open(os.path.join(folder, file)) as handle:
                    found[os.path.relpath(os.path.join(folder, file), root)] = \
                        json.load(handle)["values"]
        return found

    assert len(cell_values(cards["sequential"])) == 2
    assert cell_values(cards["dask"]) == cell_values(cards["sequential"])
    assert _digest(os.path.join(cards["dask"], "card.csv")) == _digest(
        os.path.join(cards["sequential"], "card.csv"))
