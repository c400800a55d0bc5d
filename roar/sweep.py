"""`python -m roar.sweep`: ROAR / KAR runs over ratios x methods x seeds, resumable.

    python -m roar.sweep --methods=gradient_image,random --ratios=0.1,0.5,0.9 --seeds=0,1 \\
        --modes=roar,kar --output_dir=roar_runs [--train_flags="--epochs=2"]

Each run is `python -m roar.train` in its own process with the run's flags plus
`--train_flags`; roar.train reuses a finished run of the same origin and refuses one made with
other settings (docs/roar.md, "Training"), so a killed sweep resumes where it stopped.
`random` means `--transformation=random_baseline`. Then `python -m roar.report`.

With `--dask_scheduler_file` (or `--dask_address`) each run is one task of that Dask
cluster (`models.foundation.cluster`): the workers train in parallel, each run in a process of
its own as here, and a run lost with its worker is trained again elsewhere; the runs' folders
must be on a filesystem the workers share (docs/scale_out.md, "Dask").
"""
import dataclasses
import os
import shlex
from typing import Sequence

from models.foundation import cluster, progress
from models.foundation.cli import option, run_binary
from models.foundation.errors import UserError
from models.foundation.rules import UNIQUE_NUMBERS, WHOLE_PERCENTS, Checked, some_of
from roar import train

MODES = ("roar", "kar")
DEFAULTS = train.Config()  # roar.train's own defaults, where --train_flags leaves them


@dataclasses.dataclass(frozen=True)
class Config(cluster.ClusterOptions, Checked):
    """roar.sweep's options (one flag each), checked when built."""

    methods: tuple = option(
        ("gradient_image", "random"),
        "Methods: record keys or generator codes, any saliency_gen method name or "
        "'package.module:function', 'oracle' or 'random'.")
    ratios: tuple = option(("0.1", "0.3", "0.5", "0.7", "0.9"), "Fractions replaced.",
                           rule=(WHOLE_PERCENTS, UNIQUE_NUMBERS))
    seeds: tuple = option(("0",), "Training seeds (the paper: 5 per cell).")
    modes: tuple = option(("roar",), "roar (remove the top) and/or kar (keep the top).",
                          rule=some_of(MODES, "mode"))
    output_dir: str = option("roar_runs", "Root of the run folders.")
    train_flags: str = option("", "Further flags for every roar.train run.")


def planned_runs(methods: Sequence[str], ratios: Sequence[float], seeds: Sequence[int],
                 modes: Sequence[str]) -> list:
    """[(method, ratio, seed, keep)] in a stable order (`modes` are `MODES`)."""
    return [(method, float(ratio), int(seed), mode == "kar")
            for mode in modes for method in methods for ratio in ratios for seed in seeds]


def run_arguments(method: str, ratio: float, seed: int, keep: bool,
                  output_dir: str) -> tuple[list, str]:
    """(roar.train's arguments, the transformation) of one planned run."""
    transformation = "random_baseline" if method == "random" else "modified_image"
    arguments = [f"--ratio={ratio}", f"--seed={seed}", f"--output_dir={output_dir}",
                 f"--transformation={transformation}", f"--keep_information={keep}"]
    if method != "random":
        arguments.append(f"--saliency_method={method}")
    return arguments, transformation


def run(config: Config) -> int:
    """Trains every missing run of the grid (one roar.train process each, here or as tasks of a
    Dask cluster); returns how many."""
    f = config
    runs = planned_runs(f.methods, f.ratios, f.seeds, f.modes)
    extra = shlex.split(f.train_flags)
    options = dict(arg[2:].split("=", 1) for arg in extra if "=" in arg)
    planned = []  # (label, command, finished)
    for method, ratio, seed, keep in runs:
        arguments, transformation = run_arguments(method, ratio, seed, keep, f.output_dir)
        folder = train.run_directory(
            f.output_dir, transformation, ratio, "random" if method == "random" else method,
            keep, options.get("ranking", DEFAULTS.ranking), options.get("fill", DEFAULTS.fill),
            seed)
        # a finished run is still handed to roar.train: it reuses the run of the same origin
        # (at once) and refuses one made with other settings
        planned.append((os.path.relpath(folder, f.output_dir),
                        [cluster.PYTHON, "-m", "roar.train", *arguments, *extra],
                        os.path.isfile(os.path.join(folder, "metrics.json"))))
    if f.on_cluster:  # each run a task of the cluster
        cluster.run_commands([command for _, command, _ in planned],
                             [label for label, _, _ in planned], what="ROAR sweep",
                             scheduler_file=f.dask_scheduler_file, address=f.dask_address,
                             cwd=os.getcwd(), checks=[done for _, _, done in planned])
    else:
        _run_here(planned)
    finished = sum(done for _, _, done in planned)
    print(f"{len(runs) - finished} runs trained, {finished} already finished; now run "
          f"python -m roar.report --output_dir={f.output_dir}")
    return len(runs) - finished


def _run_here(planned: list) -> None:
    """Runs roar.train for each planned run, one after another, on this machine: the finished
    ones first, checked quietly, then each run to train, showing its own progress. The sweep's
    bar counts the finished runs as done but not in its rate or ETA (a check takes seconds, a
    training minutes to hours)."""
    finished = [command for _, command, done in planned if done]
    for command in finished:
        _run_one(command, capture=True)
    with progress.bar(len(planned), "ROAR sweep", "run", initial=len(finished)) as bar:
        for _, command, done in planned:
            if not done:
                _run_one(command, capture=False)
                bar.update(1)


def _run_one(command: list, capture: bool) -> None:
    status, last = cluster.run_command(command, capture=capture)
    if status != 0:
        raise UserError(f"run failed ({' '.join(command[2:])}{': ' if last else ''}"
                        f"{last}); fix it and re-run the sweep: finished runs are kept")


if __name__ == "__main__":
    run_binary(Config, run)
