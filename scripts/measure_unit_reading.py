"""What a Beam work unit's reading costs (docs/records.md, "Reading records"), measured in one
run:

    python -m scripts.measure_unit_reading [--images=4096] [--unit_records=256] [--rounds=3]
        [--model=plain_cnn] [--method=roar:SH_SG]

One shard of random 64-px records is explained three ways in one process confined to the first
usable core with one TensorFlow thread (a pinned Dask worker's setting), after a warm-up of
each: whole (the single-process generator's stream), in work units of --unit_records read by
the process's one range reader (`pipelines.explanation_range`, as the Beam binaries do), and in
the same units with a tf.data pipeline built for each (how they read before 2026-12-01). The
three run in turn, each round's order rotated; prints each one's best time, the extra seconds
per unit against the whole shard, and checks that the three give the same bytes.
"""
import dataclasses
import hashlib
import os
import subprocess
import sys
import tempfile
import time
from typing import TYPE_CHECKING, Any, Callable
from unittest import mock

from models.foundation import cluster, progress, provenance
from models.foundation.cli import option, run_binary
from models.foundation.errors import check_minimum
from models.foundation.lazy import lazy_module
from scripts import bench_scale

# Loaded on first use: --help answers before TensorFlow starts (docs/architecture.md, "Light
# imports").
if TYPE_CHECKING:
    import models
    from saliency_gen import generate
    from saliency_gen.attribution import names
    from saliency_gen.data import pipelines
else:
    models = lazy_module("models")
    generate = lazy_module("saliency_gen.generate")
    names = lazy_module("saliency_gen.attribution.names")
    pipelines = lazy_module("saliency_gen.data.pipelines")

MODES = ("whole shard", "units, one reader", "units, a pipeline each")


@dataclasses.dataclass(frozen=True)
class Config:
    images: int = option(4096, "Random 64-px records in the shard.")
    unit_records: int = option(256, "Records per work unit (as the Beam binaries' flag).")
    rounds: int = option(3, "Rounds of the three ways; each one's best is kept.")
    model: str = option("plain_cnn", "Zoo model explained (random weights, seed 0).")
    method: str = option("roar:SH_SG", "Saliency method.")
    child: str = option("", "Internal: the records folder to measure in this process.")


def pipeline_each(path: str, input_shape: Any, space: Any, geometry: str, start: int,
                  count: int, batch_size: int) -> Any:
    """A range read as before the range reader: a tf.data pipeline of its own."""
    return iter(pipelines.explanation_inputs(
        [path], input_shape, space, geometry,
        select=lambda keyed: keyed.skip(start).take(count)).batch(batch_size).prefetch(1))


def explained(path: str, loaded: Any, args: Config, mode: str) -> tuple:
    """(seconds, digest of the serialized examples) of the shard `path` explained in `mode`."""
    options = dict(batch_size=16, chunk_size=16, seed=0, dtype="float16", geometry="auto",
                   label_offset=0, explain="label", meta={})
    method = [names.resolved(args.method)]
    ranges = [(0, -1)] if mode == MODES[0] else [
        (start, args.unit_records) for start in range(0, args.images, args.unit_records)]
    reader: Callable = pipeline_each if mode == MODES[2] else pipelines.explanation_range
    digest = hashlib.sha256()
    started = time.perf_counter()
    with mock.patch.object(pipelines, "explanation_range", reader):
        for start, count in ranges:
            for example in generate.explain_records(path, loaded, method, options,
                                                    start=start, count=count):
                digest.update(example.SerializeToString(deterministic=True))
    return time.perf_counter() - started, digest.hexdigest()


def measure_here(args: Config) -> None:
    """The --child run: each way once to warm up, then --rounds rotated rounds."""
    path = os.path.join(args.child, "train-00000-of-00001.tfrecord")
    loaded = models.load(os.path.join(args.child, args.model))
    warm = Config(**{**dataclasses.asdict(args), "images": args.unit_records})
    for mode in MODES:
        explained(path, loaded, warm, mode)
    best: dict = {}
    digests = set()
    runs = progress.bar(args.rounds * len(MODES), "measure_unit_reading: runs", "run")
    for turn in range(args.rounds):
        for mode in bench_scale.rotated(list(MODES), turn):
            seconds, digest = explained(path, loaded, args, mode)
            runs.write(f"round {turn + 1}/{args.rounds}, {mode}: {seconds:.2f} s")
            runs.update(1)
            best[mode] = min(best.get(mode, seconds), seconds)
            digests.add(digest)
    runs.close()
    units = -(-args.images // args.unit_records)
    print(f"{'way':26} {'best s':>8} {'of whole':>9} {'extra per unit':>15}")
    for mode in MODES:
        extra = (best[mode] - best[MODES[0]]) / units
        print(f"{mode:26} {best[mode]:8.2f} {best[mode] / best[MODES[0]]:9.3f} "
              + ("" if mode == MODES[0] else f"{extra * 1000:12.1f} ms"))
    print(f"{args.images} records, {units} units of {args.unit_records}; the same bytes: "
          f"{len(digests) == 1}")


def run(args: Config) -> None:
    if args.child:
        measure_here(args)
        return
    check_minimum("images", args.images, 1)
    check_minimum("unit_records", args.unit_records, 1)
    check_minimum("rounds", args.rounds, 1)
    print(f"machine: {provenance.machine()}", flush=True)
    with tempfile.TemporaryDirectory() as root:
        bench_scale.make_records(root, args.images, [args.model], shards=1)
        flags = [f"--{field.name}={getattr(args, field.name)}"
                 for field in dataclasses.fields(Config) if field.name != "child"]
        subprocess.run([sys.executable, "-m", "scripts.measure_unit_reading", *flags,
                        f"--child={root}"], env={**os.environ, **cluster.SINGLE_THREAD},
                       preexec_fn=cluster.on_core(cluster.nth_core(0)), check=True,
                       cwd=bench_scale.REPO)


if __name__ == "__main__":
    run_binary(Config, run)
