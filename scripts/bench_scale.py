"""Scale-out benchmark (docs/scale_out.md, "Benchmark"), measured in one run:

1. saliency generation: `saliency_gen.beam_generate` on the DirectRunner with 2 worker processes
   against the single-process `saliency_gen.generate` on the same records (images/s, ratio);
2. training: `roar.train` steps/s under MirroredStrategy on 2 logical CPUs against one device
   with the same global batch (ratio);
3. Dask (`--workloads=dask`): generation (`saliency_gen.beam_generate`) and deletion scoring
   (`faithfulness.beam_scoring`) on a running local Dask cluster of two single-threaded worker
   processes (`models.foundation.cluster.local_cluster`, TensorFlow preloaded after the
   binaries' start-up: `cluster.WORKER_PRELOAD`) against one
   single-threaded process (the single-process generator; the scoring binary on Beam's
   in-process runner), and against that process run twice at once on half the shards each
   (the most two single-threaded workers can get from the machine): the ratio of the rates,
   its share of the ideal 2, and its share of the two independent processes' rate
   (docs/scale_out.md, "Dask"). With `--pin_cores` each of these processes computes on a core
   of its own (the one process on the first usable core; the two apart, and the two workers,
   on the first two), and the one process is also timed free to use both cores ("one free"):
   a process with one TensorFlow thread still runs helper threads, which use the second core
   whenever it is free, so without pinning "one process" is more than one core's work.
   Each round runs a phase's configurations in an order rotated by the round's number, and
   every run records where its cores' time went (busy, taken by the host, idle: /proc/stat),
   so a virtual machine's drifting cores show beside the ratios; the "unstolen" share divides
   the core-seconds the host left to each run instead of its wall time.

Both on a cheap model (plain_cnn) and a costlier one (small_resnet), 64-px random images, 2,048
by default, so that each Beam worker's start-up (a TensorFlow import and a model load) weighs
less than at a few hundred images (docs/scale_out.md, "Benchmark"). The Beam workers are local
processes with one TensorFlow thread each (`saliency_gen.beam_support.local_worker_threads`:
the cores shared out). Whole processes are
timed (start-up included), so the ratios are what a user sees.

    python scripts/bench_scale.py [--images=2048] [--epochs=2] [--models=plain_cnn,small_resnet]
        [--workloads=generation,training,dask] [--repeats=1] [--pin_cores]
        [--phases=generation,scoring]
"""
import dataclasses
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Any, Optional

import numpy as np
from PIL import Image

from models.foundation import cluster, progress, provenance
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


@dataclasses.dataclass(frozen=True)
class Timing:
    """One timed run: its wall seconds, and over that time, on the cores it was given (every
    core when not confined), the core-seconds spent computing (user and system, anyone's), taken
    by the host (steal: a virtual machine's core not running) and idle (docs/scale_out.md,
    "Dask")."""

    seconds: float
    busy: float
    stolen: float
    idle: float


def core_ticks(cores: Optional[list]) -> np.ndarray:
    """[busy, stolen, idle] clock ticks of `cores` (every core for None) since boot, from
    /proc/stat (zeros where it cannot be read)."""
    wanted = None if cores is None or None in cores else {f"cpu{core}" for core in cores}
    totals = np.zeros(3)
    try:
        with open("/proc/stat") as lines:
            for line in lines:
                name, *fields = line.split()
                if name[:3] != "cpu" or not name[3:].isdigit():
                    continue
                if wanted is None or name in wanted:
                    user, nice, system, idle, iowait, irq, softirq, steal = (
                        int(field) for field in fields[:8])
                    totals += (user + nice + system + irq + softirq, steal, idle + iowait)
    except OSError:
        pass
    return totals


def timed(arguments: list, env: Optional[dict] = None, core: Optional[int] = None) -> Timing:
    """The run of the command `arguments` (`timed_together` of one), on `core` alone if
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
    repeats: int = option(1, "Dask: rounds of each comparison, each round's order rotated; the "
                          "table takes each configuration's best run.")
    pin_cores: bool = option(False, "Dask: each process compared on a core of its own (the one "
                             "process on the first usable core, the two apart and the two "
                             "workers on the first two; Linux).")
    phases: str = option("generation,scoring", "Dask: phases compared: generation (the maps), "
                         "scoring (deletion scores of the one process's maps: it needs "
                         "generation).")


def timed_together(commands: list, env: dict, cores: Optional[list] = None,
                   measured: Optional[list] = None) -> Timing:
    """The run until every one of `commands`, started at once, has finished (their stderr in
    files, so no process waits on a full pipe while another is read), command i on
    `cores[i]` alone where that is not None, the cores' time over `measured` (default `cores`;
    every core if any is None); the last lines of the failures' stderr as the error when one
    fails."""
    cores = cores or [None] * len(commands)
    measured = measured or cores
    ticks = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    with tempfile.TemporaryDirectory() as folder:
        logs = [open(os.path.join(folder, f"{index}.err"), "w+") for index in range(len(commands))]
        before, started = core_ticks(measured), time.time()
        running = [subprocess.Popen(command, cwd=REPO, stdout=subprocess.DEVNULL, stderr=log,
                                    env={**os.environ, **env}, preexec_fn=cluster.on_core(core))
                   for command, log, core in zip(commands, logs, cores)]
        for process in running:
            process.wait()
        seconds, spent = time.time() - started, (core_ticks(measured) - before) / ticks
        failed = []
        for process, log in zip(running, logs):
            log.seek(0)
            if process.returncode:
                failed.append(log.read())
            log.close()
    if failed:
        raise SystemExit("\n".join(failed)[-2000:])
    return Timing(seconds, *spent)


def halves(pattern: str) -> list:
    """The input pattern `pattern` (ending in "-*") split into its first and last two of the
    four shards."""
    return [pattern[:-2] + "-0000[01]-*", pattern[:-2] + "-0000[23]-*"]


CONFIGURATIONS = ("one process", "two apart", "Dask", "one free")
PHASES = {"generation": "generation", "deletion scoring": "scoring"}  # phase: its --phases name


def chosen_phases(args: Config) -> list:
    """The --phases asked for (generation, scoring); an unknown one, or scoring without the
    generation whose maps it scores, is a UserError."""
    chosen = args.phases.split(",")
    unknown = sorted(set(chosen) - set(PHASES.values()))
    if unknown:
        raise UserError(f"--phases: unknown {', '.join(unknown)} (generation, scoring)")
    if "generation" not in chosen:
        raise UserError("--phases: scoring reads the maps of generation, so it needs "
                        "generation too")
    return chosen


def chosen_configurations(args: Config) -> list:
    """The configurations each phase compares: "one free" only with --pin_cores."""
    return [name for name in CONFIGURATIONS if args.pin_cores or name != "one free"]


def dask_commands(root: str, path: str, pattern: str, args: Config) -> dict:
    """{phase: {configuration: (commands, cores)}}: generation and scoring of the model at
    `path`, each configuration's commands started at once, command i on `cores[i]` (None: not
    confined); "Dask" runs its one command, the Beam client, on a running cluster; "one free"
    only with --pin_cores. Every output in a new folder under `root`."""
    pair = [cluster.nth_core(0), cluster.nth_core(1)] if args.pin_cores else [None, None]
    first = pair[:1]  # the one process's core: the first of the pair's
    settings = [f"--model_path={path}", f"--saliency_method={args.method}", "--batch_size=16"]
    generation = [sys.executable, "-m", "saliency_gen.generate", *settings]
    maps = f"{root}/single/{args.method.split(':')[-1]}/train-*"
    scoring = [sys.executable, "-m", "faithfulness.beam_scoring", f"--model_path={path}",
               f"--saliency_method={args.method}", "--evaluation_protocol=deletion",
               "--batch_size=16"]
    phases = {
        "generation": {
            "one process": ([[*generation, f"--input_pattern={pattern}",
                              f"--output_dir={root}/single"]], first),
            "two apart": ([[*generation, f"--input_pattern={half}",
                            f"--output_dir={root}/half{index}"]
                           for index, half in enumerate(halves(pattern))], pair),
            "Dask": ([[sys.executable, "-m", "saliency_gen.beam_generate", *settings,
                       f"--input_pattern={pattern}", f"--output_dir={root}/dask"]], pair),
            "one free": ([[*generation, f"--input_pattern={pattern}",
                           f"--output_dir={root}/free"]], [None])},
        "deletion scoring": {
            "one process": ([[*scoring, f"--input_pattern={maps}", "--beam_workers=1",
                              f"--output={root}/one.json"]], first),
            "two apart": ([[*scoring, f"--input_pattern={half}", "--beam_workers=1",
                            f"--output={root}/half{index}.json"]
                           for index, half in enumerate(halves(maps))], pair),
            "Dask": ([[*scoring, f"--input_pattern={maps}", f"--output={root}/dask.json"]],
                     pair),
            "one free": ([[*scoring, f"--input_pattern={maps}", "--beam_workers=1",
                           f"--output={root}/free.json"]], [None])}}
    wanted, compared = chosen_phases(args), chosen_configurations(args)
    return {phase: {name: phases[phase][name] for name in compared}
            for phase in PHASES if PHASES[phase] in wanted}


def timed_configuration(root: str, name: str, commands: list, cores: list,
                        pinned: bool) -> Timing:
    """The run of one configuration: its commands single-threaded on their cores, or for
    "Dask" its Beam client on a fresh local cluster of two single-threaded workers (pinned to
    `cores` with `pinned`) that started and imported TensorFlow before the job came, the cores'
    time measured on the workers' cores."""
    if name != "Dask":
        return timed_together(commands, cluster.SINGLE_THREAD, cores)
    folder = tempfile.mkdtemp(prefix="cluster_", dir=root)
    with cluster.local_cluster(folder, workers=2, preload=cluster.WORKER_PRELOAD,
                               pinned=pinned) as running:
        on_dask = ["--runner=DaskRunner", f"--dask_scheduler_file={running.scheduler_file}"]
        return timed_together([[*command, *on_dask] for command in commands],
                              cluster.SINGLE_THREAD, [None], measured=cores)


def rotated(items: list, turn: int) -> list:
    """`items` rotated left by `turn`: round `turn`'s order, so that over as many rounds as
    there are items each one runs first, second, ..., last (a machine whose speed drifts over
    minutes then slows no one item alone)."""
    return items[turn % len(items):] + items[:turn % len(items)]


def dask_round(root: str, model: str, path: str, pattern: str, args: Config,
               turn: int, runs: Any) -> dict:
    """{(phase, configuration): Timing} of one round of `model` (whole processes timed), each
    phase's configurations run in their order rotated by `turn`, so that a machine whose speed
    drifts over minutes does not always slow the same one (docs/scale_out.md, "Dask"); each
    run's line printed as it ends, and counted on the progress `runs`."""
    timings = {}
    for phase, configurations in dask_commands(root, path, pattern, args).items():
        for name in rotated(list(configurations), turn):
            commands, cores = configurations[name]
            timing = timed_configuration(root, name, commands, cores, args.pin_cores)
            timings[phase, name] = timing
            runs.write(f"round {turn + 1}/{args.repeats} {phase} {model}, {name}: "
                       f"{timing.seconds:.1f} s; cores busy {timing.busy:.1f} s, stolen "
                       f"{timing.stolen:.1f} s, idle {timing.idle:.1f} s")
            runs.update(1)
    return timings


def dask_rows(root: str, model: str, path: str, pattern: str, args: Config, runs: Any) -> list:
    """Generation and scoring rows of `model`: (name, {configuration: Timing}), each the run
    of least wall time of --repeats rounds (a shared machine's noise only ever slows a run)."""
    rounds = [dask_round(tempfile.mkdtemp(prefix=f"dask_{model}_", dir=root), model, path,
                         pattern, args, turn, runs) for turn in range(args.repeats)]
    rows = []
    for phase in (phase for phase in PHASES if (phase, "Dask") in rounds[0]):
        best = {name: min((found[phase, name] for found in rounds
                           if (phase, name) in found), key=lambda timing: timing.seconds)
                for name in CONFIGURATIONS if (phase, name) in rounds[0]}
        label = f"generation {model} ({args.method})" if phase == "generation" else \
            f"deletion scoring {model}"
        rows.append((label, best))
    return rows


def print_dask_table(rows: list, images: int, pinned: bool) -> None:
    """The Dask rows as rates (images/s) and shares: of twice the one-process rate, of the
    two independent processes' rate, and of twice the one-process rate per core-second the
    host did not take ("unstolen"); then where each run's core-seconds went."""
    title = "Dask, 2 workers x 1 core" if pinned else "Dask, 2 workers x 1 thread"
    print(f"{title:40} {'one process':>12} {'two apart':>10} {'Dask':>8} {'ratio':>6} "
          f"{'of 2x':>6} {'of apart':>8} {'unstolen':>9}"
          + (f" {'one free':>9}" if pinned else "") + "   (images/s)")
    for name, found in rows:
        single, apart, spread = (found[key] for key in ("one process", "two apart", "Dask"))
        unstolen = (single.seconds - single.stolen) / (2 * spread.seconds - spread.stolen)
        print(f"{name:40} {images / single.seconds:12.2f} {images / apart.seconds:10.2f} "
              f"{images / spread.seconds:8.2f} {single.seconds / spread.seconds:6.2f} "
              f"{single.seconds / spread.seconds / 2:6.2f} {apart.seconds / spread.seconds:8.2f} "
              f"{unstolen:9.2f}"
              + (f" {images / found['one free'].seconds:9.2f}" if pinned else ""))
    print(f"{'seconds of the runs above':58} {'wall':>8} {'busy':>8} {'stolen':>8} "
          f"{'idle':>8}")
    for name, found in rows:
        for configuration, timing in found.items():
            print(f"{name + ', ' + configuration:58} {timing.seconds:8.1f} {timing.busy:8.1f} "
                  f"{timing.stolen:8.1f} {timing.idle:8.1f}")


def run(args: Config) -> None:
    """Runs both comparisons and prints the table (whole processes timed)."""
    print(f"machine: {provenance.machine()}", flush=True)
    chosen, workloads = args.models.split(","), args.workloads.split(",")
    check_minimum("repeats", args.repeats, 1)
    unknown = sorted(set(workloads) - {"generation", "training", "dask"})
    if unknown:
        raise UserError(f"--workloads: unknown {', '.join(unknown)} (generation, training, "
                        "dask)")
    per_round = len(chosen_phases(args)) * len(chosen_configurations(args))
    runs = progress.bar(len(chosen) * (2 * ("generation" in workloads) + 2 * (
        "training" in workloads) + args.repeats * per_round * ("dask" in workloads)),
        "bench_scale: timed runs", unit="run")
    root = tempfile.mkdtemp(prefix="bench_scale_")
    try:  # records, maps and clusters of a 16,384-image run fill about 2 GB of /tmp
        measure(args, chosen, workloads, root, runs)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(json.dumps({"images": args.images, "epochs": args.epochs, "cores": os.cpu_count(),
                      "pin_cores": args.pin_cores, "machine": provenance.machine()}))


def measure(args: Config, chosen: list, workloads: list, root: str, runs: Any) -> None:
    """Makes the records and models under `root`, times the comparisons of `workloads` on the
    `chosen` models and prints their tables."""
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
        runs.update(2)
        rows.append((f"generation {model} ({args.method})", args.images / single.seconds,
                     args.images / beam.seconds, "images/s"))
    for model in (chosen if "training" in workloads else ()):
        train = [sys.executable, "-m", "roar.train", "--transformation=raw_image",
                 f"--data_dir={root}", "--num_classes=10", f"--model={model}",
                 f"--epochs={args.epochs}", "--batch_size=32", "--optimizer=sgd",
                 "--warmup_epochs=0"]
        steps = args.epochs * (args.images // 32)
        one = timed([*train, f"--output_dir={root}/one_{model}"])
        two = timed([*train, f"--output_dir={root}/two_{model}", "--strategy=mirrored",
                     "--cpu_replicas=2"])
        runs.update(2)
        rows.append((f"training {model} (MirroredStrategy, 2 logical CPUs)",
                     steps / one.seconds, steps / two.seconds, "steps/s"))
    dask = [row for model, path in (paths.items() if "dask" in workloads else ())
            for row in dask_rows(root, model, path, pattern, args, runs)]
    runs.close()
    if rows:
        print(f"{'workload':58} {'one process':>16} {'scaled out':>16} {'ratio':>7}")
    for name, base, scaled, unit in rows:
        print(f"{name:58} {base:7.2f} {unit:>8} {scaled:7.2f} {unit:>8} {scaled / base:7.2f}")
    if dask:
        print_dask_table(dask, args.images, args.pin_cores)


if __name__ == "__main__":
    run_binary(Config, run)
