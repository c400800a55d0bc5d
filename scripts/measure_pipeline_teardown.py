"""The generator on one core with and without tf.data's autotuning of its input pipeline
(docs/records.md, "Reading records"), measured in one run:

    python -m scripts.measure_pipeline_teardown [--images=512] [--repeats=3]
        [--model=plain_cnn] [--method=roar:SH_SG]

`saliency_gen.generate` explains random 64-px records (4 shards) as a whole process confined
to the first usable core with one TensorFlow thread, as a pinned Dask worker or a one-core job
runs it: once as shipped (the explanation pipeline not autotuned) and once with the pipeline
autotuned (TensorFlow's default, restored for that run only), alternating, each round's order
rotated. Prints each run (wall seconds, the core's busy and idle seconds) and the ratio of
the best runs; both write the same bytes (checked).
"""
import dataclasses
import filecmp
import glob
import os
import sys
import tempfile
from typing import TYPE_CHECKING

from models.foundation import cluster, progress, provenance
from models.foundation.cli import option, run_binary
from models.foundation.errors import UserError, check_minimum
from models.foundation.lazy import lazy_module
from scripts import bench_scale

# Loaded on first use: --help answers before TensorFlow starts (docs/architecture.md, "Light
# imports").
if TYPE_CHECKING:
    from saliency_gen import generate
    from saliency_gen.data import pipelines
else:
    generate = lazy_module("saliency_gen.generate")
    pipelines = lazy_module("saliency_gen.data.pipelines")

MODES = ("as shipped", "autotuned")


@dataclasses.dataclass(frozen=True)
class Config:
    images: int = option(512, "Random 64-px images explained per run (4 shards).")
    repeats: int = option(3, "Rounds of the two runs; the table takes each one's best.")
    model: str = option("plain_cnn", "Zoo model explained (random weights, seed 0).")
    method: str = option("roar:SH_SG", "Saliency method.")
    child: str = option("", "Internal: run the generator in this process with the input "
                        "pipeline 'autotuned' or 'as shipped', with --records and --output.")
    records: str = option("", "Internal: the records folder of a --child run.")
    output: str = option("", "Internal: the output folder of a --child run.")


def generate_here(args: Config) -> None:
    """The --child run: the generator on `args.records`, its input pipeline autotuned if
    asked (`pipelines.without_autotuning` made a no-op for this process)."""
    if args.child == "autotuned":
        pipelines.without_autotuning = lambda data: data
    generate.run(generate.Config(
        input_pattern=os.path.join(args.records, "train-*"),
        model_path=os.path.join(args.records, args.model), output_dir=args.output,
        saliency_method=args.method, batch_size=16))


def one_run(args: Config, root: str, mode: str, name: str) -> bench_scale.Timing:
    """The whole --child process of `mode`, on the first usable core, single-threaded."""
    command = [sys.executable, "-m", "scripts.measure_pipeline_teardown", f"--child={mode}",
               f"--records={root}", f"--output={os.path.join(root, name)}",
               f"--model={args.model}", f"--method={args.method}"]
    return bench_scale.timed_together([command], cluster.SINGLE_THREAD, [cluster.nth_core(0)])


def same_outputs(root: str, names: list) -> bool:
    """Whether every run's output shards hold the same bytes as the first run's."""
    first = sorted(glob.glob(os.path.join(root, names[0], "*", "train-*")))
    return bool(first) and all(
        filecmp.cmp(path, path.replace(os.path.join(root, names[0]), os.path.join(root, name)),
                    shallow=False) for name in names[1:] for path in first)


def run(args: Config) -> None:
    """Both modes, --repeats rounds alternating, then the table."""
    if args.child:
        if args.child not in MODES:
            raise UserError(f"--child must be one of {', '.join(MODES)}; got {args.child!r}")
        return generate_here(args)
    check_minimum("repeats", args.repeats, 1)
    check_minimum("images", args.images, 4)
    print(f"machine: {provenance.machine()}; one core ({cluster.nth_core(0)}), one "
          "TensorFlow thread", flush=True)
    root = tempfile.mkdtemp(prefix="teardown_")
    bench_scale.make_records(root, args.images, [args.model])
    best: dict = {}
    names = []
    runs = progress.bar(args.repeats * len(MODES), "measure_pipeline_teardown: runs", "run")
    for turn in range(args.repeats):
        for mode in bench_scale.rotated(list(MODES), turn):
            name = f"{mode.replace(' ', '_')}_{turn}"
            timing = one_run(args, root, mode, name)
            names.append(name)
            runs.write(f"round {turn + 1}/{args.repeats}, {mode}: {timing.seconds:.1f} s; core "
                       f"busy {timing.busy:.1f} s, idle {timing.idle:.1f} s")
            runs.update(1)
            if mode not in best or timing.seconds < best[mode].seconds:
                best[mode] = timing
    runs.close()
    shipped, tuned = best["as shipped"], best["autotuned"]
    print(f"{'input pipeline':14} {'wall s':>8} {'idle s':>8} {'images/s':>9}")
    for mode in MODES:
        print(f"{mode:14} {best[mode].seconds:8.1f} {best[mode].idle:8.1f} "
              f"{args.images / best[mode].seconds:9.2f}")
    print(f"as shipped / autotuned, images/s: {tuned.seconds / shipped.seconds:.2f}; "
          f"same bytes: {same_outputs(root, names)}")


if __name__ == "__main__":
    run_binary(Config, run)
