"""Scale-out benchmark (docs/scale_out.md, "Benchmark"), measured in one run:

1. saliency generation: `saliency_gen.beam_generate` on the DirectRunner with 2 worker processes
   against the single-process `saliency_gen.generate` on the same records (images/s, ratio);
2. training: `roar.train` steps/s under MirroredStrategy on 2 logical CPUs against one device
   with the same global batch (ratio);
3. Dask (`--workloads=dask`): generation (`saliency_gen.beam_generate`) and deletion scoring
   (`faithfulness.beam_scoring`) on a running local Dask cluster of two single-threaded worker
   processes (`models.foundation.cluster.local_cluster`, TensorFlow preloaded) against one
   single-threaded process (the single-process generator; the scoring binary on Beam's
   in-process runner), and against that process run twice at once on half the shards each
   (the most two single-threaded workers can get from the machine): the ratio of the rates,
   its share of the ideal 2, and its share of the two independent processes' rate
   (docs/scale_out.md, "Dask"). With `--pin_cores` each of these processes computes on a core
   of its own (the one process on the first usable core; the two apart, and the two workers,
   on the first two), and the one process is also timed free to use both cores ("one free"):
   a process with one TensorFlow thread still runs helper threads, which use the second core
   whenever it is free, so without pinning "one process" is more than one core's work.

Both on a cheap model (plain_cnn) and a costlier one (small_resnet), 64-px random images, 2,048
by default, so that each Beam worker's start-up (a TensorFlow import and a model load) weighs
less than at a few hundred images (docs/scale_out.md, "Benchmark"). The Beam workers are local
processes with one TensorFlow thread each (`saliency_gen.beam_support.local_worker_threads`:
the cores shared out). Whole processes are
timed (start-up included), so the ratios are what a user sees.

    python scripts/bench_scale.py [--images=2048] [--epochs=2] [--models=plain_cnn,small_resnet]
        [--workloads=generation,training,dask] [--repeats=1] [--pin_cores]
"""
import dataclasses
import io
import json
import os
import subprocess
import sys
import tempfile
import time
from typing import Optional

import numpy as np
from PIL import Image

from models.foundation import cluster, provenance
from models.foundation.cli import option, run_binary
from models.foundation.errors import UserError, check_minimum

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def make_records(root, images, chosen, size=64, shards=4):
    import keras

    import models
    from saliency_gen.data import records

    rng = np.random.RandomState(0)
    per = images // shards
    for shard in range(shards):
        examples = []
        for index in range(per):
            buffer = io.BytesIO()
            Image.fromarray(rng.randint(0, 256, (size, size, 3), np.uint8)).save(buffer, "PNG")
            examples.append(records.image_example(buffer.getvalue(), int(rng.randint(10)),
                                                  filename=f"{shard}_{index:04d}.png"))
        name = f"train-{shard:05d}-of-{shards:05d}.tfrecord"
        records.write_records(os.path.join(root, name), examples)
        records.write_records(os.path.join(root, name.replace("train", "validation")),
                              examples[: max(1, per // 4)])
    paths = {}
    for model in chosen:
        keras.utils.set_random_seed(0)
        paths[model] = os.path.join(root, model)
        models.export(models.build(model, 10, (size, size, 3)), paths[model])
    return paths


def timed(arguments: list, env: Optional[dict] = None, core: Optional[int] = None) -> float:
    """Seconds the command `arguments` took (`timed_together` of one), on `core` alone if
    given."""
    return timed_together([arguments], env or {}, [core])


@dataclasses.dataclass(frozen=True)
class Config:
    images: int = option(2048, "Random 64-px images to explain and train on.")
    epochs: int = option(2, "Training epochs of each training comparison.")
    method: str = option("roar:SH_SG", "Saliency method of the generation comparison.")
    models: str = option("plain_cnn,small_resnet", "Models compared, comma-separated.")
    workloads: str = option("generation,training", "Comparisons run: generation, training, "
                            "dask.")
    repeats: int = option(1, "Dask: rounds of each comparison; the table takes each run's "
                          "best.")
    pin_cores: bool = option(False, "Dask: each process compared on a core of its own (the one "
                             "process on the first usable core, the two apart and the two "
                             "workers on the first two; Linux).")


def timed_together(commands: list, env: dict, cores: Optional[list] = None) -> float:
    """Seconds until every one of `commands`, started at once, has finished (their stderr in
    files, so no process waits on a full pipe while another is read), command i on
    `cores[i]` alone where that is not None; the last lines of the failures' stderr as the
    error when one fails."""
    cores = cores or [None] * len(commands)
    with tempfile.TemporaryDirectory() as folder:
        logs = [open(os.path.join(folder, f"{index}.err"), "w+") for index in range(len(commands))]
        started = time.time()
        running = [subprocess.Popen(command, cwd=REPO, stdout=subprocess.DEVNULL, stderr=log,
                                    env={**os.environ, **env}, preexec_fn=cluster.on_core(core))
                   for command, log, core in zip(commands, logs, cores)]
        for process in running:
            process.wait()
        seconds = time.time() - started
        failed = []
        for process, log in zip(running, logs):
            log.seek(0)
            if process.returncode:
                failed.append(log.read())
            log.close()
    if failed:
        raise SystemExit("\n".join(failed)[-2000:])
    return seconds


def halves(pattern: str) -> list:
    """The input pattern `pattern` (ending in "-*") split into its first and last two of the
    four shards."""
    return [pattern[:-2] + "-0000[01]-*", pattern[:-2] + "-0000[23]-*"]


def dask_round(root: str, model: str, path: str, pattern: str, args: Config) -> tuple:
    """One round of generation and scoring of `model`, each as seconds of (one
    single-threaded process, two such processes at once on half the shards each: the most two
    single-threaded workers can get from this machine, two single-threaded workers of a running
    local Dask cluster, and with --pin_cores, where each of those is on a core of its own, one
    process free to use both cores: NaN without), whole processes timed, every output in a new
    folder under `root`."""
    one = dict(cluster.SINGLE_THREAD)
    pair = [cluster.nth_core(0), cluster.nth_core(1)] if args.pin_cores else [None, None]
    first = pair[0]  # the one process's core: the first of the pair's
    settings = [f"--model_path={path}", f"--saliency_method={args.method}", "--batch_size=16"]
    generation = [sys.executable, "-m", "saliency_gen.generate", *settings]
    single = timed([*generation, f"--input_pattern={pattern}",
                    f"--output_dir={root}/single"], one, first)
    apart = timed_together([[*generation, f"--input_pattern={half}",
                             f"--output_dir={root}/half{index}"]
                            for index, half in enumerate(halves(pattern))], one, pair)
    free = timed([*generation, f"--input_pattern={pattern}", f"--output_dir={root}/free"],
                 one) if args.pin_cores else float("nan")
    maps = f"{root}/single/{args.method.split(':')[-1]}/train-*"
    scoring = [sys.executable, "-m", "faithfulness.beam_scoring", f"--model_path={path}",
               f"--saliency_method={args.method}", "--evaluation_protocol=deletion",
               "--batch_size=16"]
    scored_one = timed([*scoring, f"--input_pattern={maps}", "--beam_workers=1",
                        f"--output={root}/one.json"], one, first)
    scored_apart = timed_together(
        [[*scoring, f"--input_pattern={half}", "--beam_workers=1",
          f"--output={root}/half{index}.json"] for index, half in enumerate(halves(maps))], one,
        pair)
    scored_free = timed([*scoring, f"--input_pattern={maps}", "--beam_workers=1",
                         f"--output={root}/free.json"], one) if args.pin_cores else float("nan")
    folder = tempfile.mkdtemp(prefix="cluster_", dir=root)
    # a running cluster: its workers started and imported TensorFlow before the job came
    with cluster.local_cluster(folder, workers=2, preload=("tensorflow",),
                               pinned=args.pin_cores) as running:
        on_dask = ["--runner=DaskRunner", f"--dask_scheduler_file={running.scheduler_file}"]
        spread = timed([sys.executable, "-m", "saliency_gen.beam_generate", *settings,
                        f"--input_pattern={pattern}", f"--output_dir={root}/dask",
                        *on_dask], env=one)
        scored_dask = timed([*scoring, f"--input_pattern={maps}", *on_dask,
                             f"--output={root}/dask.json"], env=one)
    return (single, apart, spread, free), (scored_one, scored_apart, scored_dask, scored_free)


def dask_rows(root: str, model: str, path: str, pattern: str, args: Config) -> list:
    """Generation and scoring rows of `model`: (name, seconds of one process, of two apart, on
    Dask, of one process free to use both cores), each the best of --repeats rounds (a shared
    machine's noise only ever slows a run)."""
    rounds = [dask_round(tempfile.mkdtemp(prefix=f"dask_{model}_", dir=root), model, path,
                         pattern, args) for _ in range(args.repeats)]
    best = np.min(np.array(rounds), axis=0)
    return [(f"generation {model} ({args.method})", *best[0]),
            (f"deletion scoring {model}", *best[1])]


def print_dask_table(rows: list, images: int, pinned: bool) -> None:
    """The Dask rows as rates (images/s) and shares: of twice the one-process rate and of the
    two independent processes' rate."""
    title = "Dask, 2 workers x 1 core" if pinned else "Dask, 2 workers x 1 thread"
    print(f"{title:40} {'one process':>12} {'two apart':>10} {'Dask':>8} {'ratio':>6} "
          f"{'of 2x':>6} {'of apart':>8}" + (f" {'one free':>9}" if pinned else "")
          + "   (images/s)")
    for name, single, apart, spread, free in rows:
        print(f"{name:40} {images / single:12.2f} {images / apart:10.2f} "
              f"{images / spread:8.2f} {single / spread:6.2f} {single / spread / 2:6.2f} "
              f"{apart / spread:8.2f}" + (f" {images / free:9.2f}" if pinned else ""))


def run(args: Config) -> None:
    """Runs both comparisons and prints the table (whole processes timed)."""
    print(f"machine: {provenance.machine()}", flush=True)
    chosen, workloads = args.models.split(","), args.workloads.split(",")
    check_minimum("repeats", args.repeats, 1)
    unknown = sorted(set(workloads) - {"generation", "training", "dask"})
    if unknown:
        raise UserError(f"--workloads: unknown {', '.join(unknown)} (generation, training, "
                        "dask)")
    root = tempfile.mkdtemp(prefix="bench_scale_")
    paths = make_records(root, args.images, chosen)
    pattern = os.path.join(root, "train-*")
    rows = []
    for model, path in (paths.items() if "generation" in workloads else ()):
        common = [f"--input_pattern={pattern}", f"--model_path={path}",
                  f"--saliency_method={args.method}", "--batch_size=16"]
        single = timed([sys.executable, "-m", "saliency_gen.generate", *common,
                        f"--output_dir={root}/single_{model}"])
        beam = timed([sys.executable, "-m", "saliency_gen.beam_generate", *common,
                      f"--output_dir={root}/beam_{model}", "--beam_workers=2"])
        rows.append((f"generation {model} ({args.method})", args.images / single,
                     args.images / beam, "images/s"))
    for model in (chosen if "training" in workloads else ()):
        train = [sys.executable, "-m", "roar.train", "--transformation=raw_image",
                 f"--data_dir={root}", "--num_classes=10", f"--model={model}",
                 f"--epochs={args.epochs}", "--batch_size=32", "--optimizer=sgd",
                 "--warmup_epochs=0"]
        steps = args.epochs * (args.images // 32)
        one = timed([*train, f"--output_dir={root}/one_{model}"])
        two = timed([*train, f"--output_dir={root}/two_{model}", "--strategy=mirrored",
                     "--cpu_replicas=2"])
        rows.append((f"training {model} (MirroredStrategy, 2 logical CPUs)", steps / one,
                     steps / two, "steps/s"))
    dask = [row for model, path in (paths.items() if "dask" in workloads else ())
            for row in dask_rows(root, model, path, pattern, args)]
    if rows:
        print(f"{'workload':58} {'one process':>16} {'scaled out':>16} {'ratio':>7}")
    for name, base, scaled, unit in rows:
        print(f"{name:58} {base:7.2f} {unit:>8} {scaled:7.2f} {unit:>8} {scaled / base:7.2f}")
    if dask:
        print_dask_table(dask, args.images, args.pin_cores)
    print(json.dumps({"images": args.images, "epochs": args.epochs, "cores": os.cpu_count(),
                      "pin_cores": args.pin_cores, "machine": provenance.machine()}))


if __name__ == "__main__":
    run_binary(Config, run)
